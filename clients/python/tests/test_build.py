"""The package installs with pip and no package index, through the
standard-library build backend in build_backend/."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

from .server import PYTHON_ROOT

sys.path.insert(0, os.path.join(PYTHON_ROOT, "build_backend"))
import norn_build  # noqa: E402

import norn  # noqa: E402


class BackendTest(unittest.TestCase):
    def test_subset_parser_reads_pyproject_as_tomllib_does(self) -> None:
        with open(os.path.join(PYTHON_ROOT, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        ours = norn_build._Toml(text).parse()
        self.assertEqual(ours["project"]["name"], "norn")
        self.assertEqual(ours["build-system"]["requires"], [])
        try:
            import tomllib  # type: ignore[import-not-found]
        except ImportError:
            self.skipTest("tomllib arrived in Python 3.11")
        self.assertEqual(ours, tomllib.loads(text))

    def test_subset_parser(self) -> None:
        doc = norn_build._Toml(
            '# comment\nname = "a\\"b\\u00e9" # trailing\n[t.u]\nx = [1, 2.5, true,\n  "s", \'lit\\\\\',]\n'
            'y = { a = "1", b.c = false }\n"quoted key" = -3\n[[arr]]\nk = 1\n[[arr]]\nk = 2\n'
        ).parse()
        self.assertEqual(doc, {
            "name": 'a"bé',
            "t": {"u": {"x": [1, 2.5, True, "s", "lit\\\\"], "y": {"a": "1", "b": {"c": False}}, "quoted key": -3}},
            "arr": [{"k": 1}, {"k": 2}],
        })
        for bad in ('a = "unterminated\n', "a = \n", "a = 1\na = 2\n", "[t\n", 'a = """x"""\n'):
            with self.assertRaises(norn_build.TomlError, msg=bad):
                norn_build._Toml(bad).parse()

    def test_version_matches_the_package(self) -> None:
        self.assertEqual(norn_build.project()["version"], norn.__version__)

    def test_wheel_and_sdist(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            whl = norn_build.build_wheel(d)
            self.assertEqual(whl, f"norn-{norn.__version__}-py3-none-any.whl")
            with zipfile.ZipFile(os.path.join(d, whl)) as zf:
                names = set(zf.namelist())
                record = zf.read(f"norn-{norn.__version__}.dist-info/RECORD").decode()
                meta = zf.read(f"norn-{norn.__version__}.dist-info/METADATA").decode()
            for want in ("norn/__init__.py", "norn/client.py", "norn/worker.py", "norn/py.typed"):
                self.assertIn(want, names)
                self.assertIn(want + ",sha256=", record)
            self.assertFalse([n for n in names if "__pycache__" in n or n.startswith("tests/")])
            self.assertIn("Requires-Python: >=3.9", meta)
            self.assertNotIn("Requires-Dist", meta, "standard library only")
            sdist = norn_build.build_sdist(d)
            with tarfile.open(os.path.join(d, sdist)) as tf:
                members = set(tf.getnames())
            base = f"norn-{norn.__version__}/"
            for want in ("pyproject.toml", "PKG-INFO", "build_backend/norn_build.py", "norn/worker.py"):
                self.assertIn(base + want, members)


class OfflineInstallTest(unittest.TestCase):
    """`pip install ./clients/python` into a fresh virtual environment with
    no index and no local wheels: nothing may need downloading."""

    def test_pip_install_without_an_index(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            venv = os.path.join(d, "venv")
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            py = os.path.join(venv, "bin", "python")
            empty = os.path.join(d, "no-wheels")
            os.mkdir(empty)
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS=empty, PIP_DISABLE_PIP_VERSION_CHECK="1")
            env.pop("PYTHONPATH", None)
            res = subprocess.run([py, "-m", "pip", "install", PYTHON_ROOT], env=env, capture_output=True, text=True)
            self.assertEqual(res.returncode, 0, res.stdout + res.stderr)
            out = subprocess.run(
                [py, "-c", "import norn, os; print(norn.__version__, os.path.dirname(norn.__file__))"],
                cwd=d, env=env, capture_output=True, text=True, check=True,
            ).stdout.split()
            self.assertEqual(out[0], norn.__version__)
            self.assertTrue(out[1].startswith(venv), out[1])


if __name__ == "__main__":
    unittest.main()
