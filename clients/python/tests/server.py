"""Starts real norn servers for the tests.

The binary is $NORN_BIN when set (CI builds it once), else it is built from
the repository with `go build ./cmd/norn` into a temporary directory, once
per test run. Each server gets a fresh data directory and a free port on
127.0.0.1 (--addr 127.0.0.1:0; the address is read from the line
"norn: listening on URL" the server prints).

When $NORN_OAPROXY_BIN names the oaproxy binary (internal/oaproxy), every
plain-HTTP server is reached through it: the proxy checks each request and
response against server/openapi.json, and stop() fails with the mismatches
it logged. $NORN_OAPROXY_LOG, when set, also receives them (CI checks it is
empty after the run).
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from typing import Callable, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PYTHON_ROOT = os.path.abspath(os.path.join(HERE, ".."))

_lock = threading.Lock()
_binary: Optional[str] = None


def norn_binary() -> str:
    global _binary
    with _lock:
        if _binary:
            return _binary
        env_bin = os.environ.get("NORN_BIN")
        if env_bin:
            _binary = env_bin
            return _binary
        if not shutil.which("go"):
            raise RuntimeError("the tests need a norn binary: set NORN_BIN or install Go to build ./cmd/norn")
        tmp = tempfile.mkdtemp(prefix="norn-py-bin-")
        atexit.register(shutil.rmtree, tmp, True)
        out = os.path.join(tmp, "norn")
        subprocess.run(["go", "build", "-o", out, "./cmd/norn"], cwd=REPO, check=True)
        _binary = out
        return _binary


class Server:
    """A running `norn server` with its own data directory."""

    def __init__(self, *args: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="norn-py-data-")
        self.proxy: Optional[subprocess.Popen] = None
        self.proxy_log = ""
        cmd = [norn_binary(), "server", "--addr", "127.0.0.1:0", "--store", "embedded:" + os.path.join(self.dir, "data"),
               "--dashboard=false", "--log-level", "warn", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: "queue.Queue[Optional[str]]" = queue.Queue()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 60
        self.url = ""
        while not self.url:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                self.stop()
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise RuntimeError(f"norn server did not start: {err}")
            if "listening on " in line:
                self.url = line.split("listening on ", 1)[1].split()[0]
        # Drain stderr so the server never blocks on a full pipe.
        threading.Thread(target=lambda: self.proc.stderr and self.proc.stderr.read(), daemon=True).start()
        self.upstream = self.url
        proxy_bin = os.environ.get("NORN_OAPROXY_BIN")
        if proxy_bin and self.url.startswith("http://"):
            self.proxy_log = os.path.join(self.dir, "oaproxy.log")
            self.proxy = subprocess.Popen([proxy_bin, "-upstream", self.url, "-log", self.proxy_log],
                                          stdout=subprocess.PIPE, text=True)
            assert self.proxy.stdout is not None
            line = self.proxy.stdout.readline()
            if "listening on " not in line:
                self.stop()
                raise RuntimeError(f"oaproxy did not start: {line!r}")
            self.url = line.split("listening on ", 1)[1].split()[0]
        atexit.register(self.stop)

    def stop(self) -> None:
        """Stops the server (and its proxy); fails with the proxy's
        mismatches between the traffic and the OpenAPI document."""
        self._stop_server()
        proxy, self.proxy = self.proxy, None
        mismatches = ""
        if proxy is not None:
            if proxy.poll() is None:
                proxy.send_signal(signal.SIGTERM)
                try:
                    proxy.wait(30)
                except subprocess.TimeoutExpired:
                    proxy.kill()
                    proxy.wait()
            if proxy.stdout is not None:
                proxy.stdout.close()
            if os.path.exists(self.proxy_log):
                with open(self.proxy_log, encoding="utf-8") as f:
                    mismatches = f.read()
            shared = os.environ.get("NORN_OAPROXY_LOG")
            if mismatches and shared:
                with open(shared, "a", encoding="utf-8") as f:
                    f.write(mismatches)
        shutil.rmtree(self.dir, ignore_errors=True)
        if mismatches:
            raise AssertionError("the traffic does not match server/openapi.json:\n" + mismatches)

    def _stop_server(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                try:
                    f.close()
                except ValueError:
                    pass  # a reader thread is still in it; the process is gone


def wait_for(cond: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    """Polls cond until it returns something true, or fails the test after
    timeout seconds. The poll interval is short: this awaits a condition,
    it does not guess a duration; the timeout only bounds a failing test
    (generous, because CI machines are shared and loaded)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def unique_queue(name: str) -> str:
    """A queue of one test alone, so tests sharing a server do not see each
    other's tasks."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def history_types(task) -> List[str]:
    return [h["type"] for h in task.get("history") or ()]
