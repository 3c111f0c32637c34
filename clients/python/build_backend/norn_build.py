"""A PEP 517 build backend in the standard library alone.

pip installs a project by first installing its build backend into an
isolated environment. The usual backends (setuptools, hatchling, flit) come
from a package index, which a machine without one cannot reach; this
backend needs nothing (``requires = []`` in pyproject.toml), so
``pip install ./clients/python`` works offline on any Python >= 3.9 with
pip. It builds a pure-Python wheel of the ``norn`` package from the PEP 621
table of pyproject.toml, an sdist, and editable installs (PEP 660).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "norn"


# ---- pyproject.toml -----------------------------------------------------------


class TomlError(ValueError):
    pass


def loads_toml(text: str) -> Dict[str, Any]:
    """Parses TOML with tomllib where Python has it (3.11+) and otherwise
    with the subset parser below, which covers what a pyproject.toml uses:
    tables, dotted keys, strings, integers, floats, booleans, arrays and
    inline tables."""
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:
        return _Toml(text).parse()
    return tomllib.loads(text)


_BARE = re.compile(r"[A-Za-z0-9_-]+")
_NUMBER = re.compile(r"[+-]?(?:0|[1-9][0-9_]*)(?:\.[0-9_]+)?(?:[eE][+-]?[0-9]+)?")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


class _Toml:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0

    def error(self, msg: str) -> TomlError:
        line = self.s.count("\n", 0, self.i) + 1
        return TomlError(f"pyproject.toml line {line}: {msg}")

    def ws(self, newlines: bool = False) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            else:
                return

    def parse(self) -> Dict[str, Any]:
        root: Dict[str, Any] = {}
        table = root
        while True:
            self.ws(newlines=True)
            if self.i >= len(self.s):
                return root
            if self.s.startswith("[[", self.i):
                self.i += 2
                keys = self.keys()
                self.expect("]]")
                parent = self.walk(root, keys[:-1])
                arr = parent.setdefault(keys[-1], [])
                if not isinstance(arr, list):
                    raise self.error(f"{'.'.join(keys)} is not an array of tables")
                table = {}
                arr.append(table)
            elif self.s[self.i] == "[":
                self.i += 1
                keys = self.keys()
                self.expect("]")
                table = self.walk(root, keys)
            else:
                keys = self.keys()
                self.expect("=")
                self.ws()
                value = self.value()
                target = self.walk(table, keys[:-1])
                if keys[-1] in target:
                    raise self.error(f"duplicate key {keys[-1]!r}")
                target[keys[-1]] = value
            self.ws()
            if self.i < len(self.s) and self.s[self.i] not in "\r\n":
                raise self.error(f"unexpected {self.s[self.i]!r}")

    def walk(self, table: Dict[str, Any], keys: List[str]) -> Dict[str, Any]:
        for k in keys:
            table = table.setdefault(k, {})
            if isinstance(table, list):
                table = table[-1]
            if not isinstance(table, dict):
                raise self.error(f"{k!r} is not a table")
        return table

    def expect(self, token: str) -> None:
        self.ws()
        if not self.s.startswith(token, self.i):
            raise self.error(f"expected {token!r}")
        self.i += len(token)

    def keys(self) -> List[str]:
        keys = []
        while True:
            self.ws()
            c = self.s[self.i : self.i + 1]
            if c in ('"', "'"):
                keys.append(self.string())
            else:
                m = _BARE.match(self.s, self.i)
                if not m:
                    raise self.error("expected a key")
                keys.append(m.group())
                self.i = m.end()
            self.ws()
            if self.s[self.i : self.i + 1] != ".":
                return keys
            self.i += 1

    def string(self) -> str:
        s = self.s
        if s.startswith('"""', self.i) or s.startswith("'''", self.i):
            raise self.error("multi-line strings are not supported")
        quote = s[self.i]
        self.i += 1
        out = []
        while True:
            if self.i >= len(s) or s[self.i] == "\n":
                raise self.error("unterminated string")
            c = s[self.i]
            self.i += 1
            if c == quote:
                return "".join(out)
            if c == "\\" and quote == '"':
                e = s[self.i : self.i + 1]
                self.i += 1
                if e in _ESCAPES:
                    out.append(_ESCAPES[e])
                elif e in ("u", "U"):
                    n = 4 if e == "u" else 8
                    out.append(chr(int(s[self.i : self.i + n], 16)))
                    self.i += n
                else:
                    raise self.error(f"invalid escape \\{e}")
            else:
                out.append(c)

    def value(self) -> Any:
        s = self.s
        c = s[self.i : self.i + 1]
        if c in ('"', "'"):
            return self.string()
        if c == "[":
            self.i += 1
            arr = []
            while True:
                self.ws(newlines=True)
                if s[self.i : self.i + 1] == "]":
                    self.i += 1
                    return arr
                arr.append(self.value())
                self.ws(newlines=True)
                if s[self.i : self.i + 1] == ",":
                    self.i += 1
                elif s[self.i : self.i + 1] != "]":
                    raise self.error("expected ',' or ']' in array")
        if c == "{":
            self.i += 1
            table: Dict[str, Any] = {}
            self.ws()
            if s[self.i : self.i + 1] == "}":
                self.i += 1
                return table
            while True:
                keys = self.keys()
                self.expect("=")
                self.ws()
                self.walk(table, keys[:-1])[keys[-1]] = self.value()
                self.ws()
                if s[self.i : self.i + 1] == "}":
                    self.i += 1
                    return table
                self.expect(",")
        for word, v in (("true", True), ("false", False)):
            if s.startswith(word, self.i):
                self.i += len(word)
                return v
        m = _NUMBER.match(s, self.i)
        if m:
            self.i = m.end()
            text = m.group().replace("_", "")
            return float(text) if any(ch in text for ch in ".eE") else int(text)
        raise self.error("unsupported value")


def project() -> Dict[str, Any]:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        data = loads_toml(f.read())
    proj = data.get("project")
    if not isinstance(proj, dict) or not proj.get("name") or not proj.get("version"):
        raise TomlError("pyproject.toml: [project] needs a name and a static version")
    return proj


# ---- metadata -----------------------------------------------------------------


def _dist_name(proj: Dict[str, Any]) -> str:
    return re.sub(r"[-_.]+", "_", proj["name"]).lower()


def metadata(proj: Dict[str, Any]) -> str:
    """Core metadata 2.1 from the [project] table."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {proj['name']}",
        f"Version: {proj['version']}",
    ]
    if proj.get("description"):
        lines.append(f"Summary: {proj['description']}")
    if proj.get("requires-python"):
        lines.append(f"Requires-Python: {proj['requires-python']}")
    lic = proj.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append(f"License: {lic['text']}")
    elif isinstance(lic, str):
        lines.append(f"License-Expression: {lic}")
    for person in proj.get("authors") or ():
        if person.get("email"):
            who = f"{person['name']} <{person['email']}>" if person.get("name") else person["email"]
            lines.append(f"Author-email: {who}")
        elif person.get("name"):
            lines.append(f"Author: {person['name']}")
    if proj.get("keywords"):
        lines.append("Keywords: " + ",".join(proj["keywords"]))
    for c in proj.get("classifiers") or ():
        lines.append(f"Classifier: {c}")
    for label, url in (proj.get("urls") or {}).items():
        lines.append(f"Project-URL: {label}, {url}")
    for dep in proj.get("dependencies") or ():
        lines.append(f"Requires-Dist: {dep}")
    body = ""
    readme = proj.get("readme")
    if isinstance(readme, str):
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
        ctype = "text/markdown" if readme.lower().endswith(".md") else "text/plain"
        lines.append(f"Description-Content-Type: {ctype}")
    return "\n".join(lines) + "\n\n" + body


def _package_files() -> List[Tuple[str, str]]:
    """(path in the archive, path on disk) of the package's files."""
    out = []
    pkg = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, name)
            out.append((os.path.relpath(full, ROOT).replace(os.sep, "/"), full))
    return out


class _Wheel:
    def __init__(self, path: str) -> None:
        self.zf = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.records: List[str] = []

    def add(self, arcname: str, data: bytes) -> None:
        info = zipfile.ZipInfo(arcname, date_time=_zip_time())
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zf.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append(f"{arcname},sha256={digest},{len(data)}")

    def close(self, record_name: str) -> None:
        self.records.append(f"{record_name},,")
        info = zipfile.ZipInfo(record_name, date_time=_zip_time())
        info.external_attr = 0o644 << 16
        self.zf.writestr(info, "\n".join(self.records) + "\n")
        self.zf.close()


def _zip_time() -> Tuple[int, int, int, int, int, int]:
    # Reproducible archives: SOURCE_DATE_EPOCH when set, else a fixed date.
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    return time.gmtime(max(epoch, 315532800))[:6]


def _dist_info(proj: Dict[str, Any]) -> Dict[str, bytes]:
    return {
        "METADATA": metadata(proj).encode("utf-8"),
        "WHEEL": b"Wheel-Version: 1.0\nGenerator: norn_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "top_level.txt": (PACKAGE + "\n").encode(),
    }


def _build(wheel_directory: str, editable: bool) -> str:
    proj = project()
    name = f"{_dist_name(proj)}-{proj['version']}"
    filename = f"{name}-py3-none-any.whl"
    w = _Wheel(os.path.join(wheel_directory, filename))
    if editable:
        w.add(f"__editable__.{name}.pth", (ROOT + "\n").encode("utf-8"))
    else:
        for arcname, full in _package_files():
            with open(full, "rb") as f:
                w.add(arcname, f.read())
    for fname, data in _dist_info(proj).items():
        w.add(f"{name}.dist-info/{fname}", data)
    w.close(f"{name}.dist-info/RECORD")
    return filename


# ---- PEP 517 / PEP 660 hooks ----------------------------------------------------


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[dict] = None) -> str:
    proj = project()
    name = f"{_dist_name(proj)}-{proj['version']}.dist-info"
    os.makedirs(os.path.join(metadata_directory, name), exist_ok=True)
    for fname, data in _dist_info(proj).items():
        with open(os.path.join(metadata_directory, name, fname), "wb") as f:
            f.write(data)
    return name


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None) -> str:
    return _build(wheel_directory, editable=False)


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None) -> str:
    return _build(wheel_directory, editable=True)


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    proj = project()
    name = f"{_dist_name(proj)}-{proj['version']}"
    filename = f"{name}.tar.gz"
    files = [(arc, full) for arc, full in _package_files()]
    for rel in ("pyproject.toml", "README.md", "build_backend/norn_build.py"):
        if os.path.exists(os.path.join(ROOT, rel)):
            files.append((rel, os.path.join(ROOT, rel)))
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tf:

        def add(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{name}/{arcname}")
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            tf.addfile(info, io.BytesIO(data))

        for arc, full in files:
            with open(full, "rb") as f:
                add(arc, f.read())
        add("PKG-INFO", metadata(proj).encode("utf-8"))
    return filename
