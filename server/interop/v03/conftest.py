"""Starts ctxlog-server (the binary named by CTXLOG_SERVER_BIN) for the
v0.3 suite, by the pid it keeps: on the interop script, with a token, on a
free loopback port; one that a test can kill -9 and start again on the
same store (on a new port). With CTXLOG_V03_REFERENCE=a2a-sdk it starts
a2a-sdk 1.3.0's server in its v0.3 mode instead (a2a_sdk_v03.py), for
the comparison docs/compatibility.md reports."""

import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time

import httpx
import pytest

import strict03

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "script.json")
TOKEN = "v03-token"

strict03.forbid_extras()


class Server:
    """One store, served by one process at a time."""

    def __init__(self, tmp, *extra):
        self.store = os.path.join(tmp, "store")
        self.tokens = os.path.join(tmp, "tokens")
        with open(self.tokens, "w") as f:
            f.write(f"{TOKEN} alice\n")
        self.extra = extra
        self.proc = None
        self.url = None

    def start(self):
        if os.environ.get("CTXLOG_V03_REFERENCE") == "a2a-sdk":
            return self._start_reference()
        binary = os.environ.get("CTXLOG_SERVER_BIN")
        if not binary or not os.path.exists(binary):
            pytest.fail("set CTXLOG_SERVER_BIN to the built ctxlog-server binary")
        self.proc = subprocess.Popen(
            [binary, "--dir", self.store, "--listen", "127.0.0.1:0", "--tokens", self.tokens,
             "--agent", "scripted:" + SCRIPT, *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "RUST_LOG": "info"},
        )
        found, ready = {}, threading.Event()

        def read_log(stream):
            for line in stream:
                m = re.search(r"address=(\S+)", line)
                if m and not ready.is_set():
                    found["url"] = "http://" + m.group(1)
                    ready.set()

        threading.Thread(target=read_log, args=(self.proc.stderr,), daemon=True).start()
        if not ready.wait(30):
            self.proc.kill()
            pytest.fail("ctxlog-server did not start within 30 s")
        self.url = found["url"]
        return self

    def _start_reference(self):
        """a2a-sdk 1.3.0's server in its v0.3 mode on this store
        (a2a_sdk_v03.py), for the comparison run."""
        python = os.environ.get("CTXLOG_V1_PYTHON")
        if not python or not os.path.exists(python):
            pytest.fail("set CTXLOG_V1_PYTHON to the python of the a2a-sdk 1.3.0 venv")
        os.makedirs(self.store, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [python, os.path.join(HERE, "a2a_sdk_v03.py"), str(port),
             os.path.join(self.store, "tasks.db")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(self.url + "/.well-known/agent-card.json").status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.proc.kill()
        pytest.fail("the a2a-sdk reference server did not start within 30 s")

    def kill9(self):
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        reference = os.environ.get("CTXLOG_V03_REFERENCE") == "a2a-sdk"
        assert reference or self.proc.returncode == 0, f"exited with {self.proc.returncode}"


@pytest.fixture(scope="session")
def server():
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(tmp).start()
        yield s
        s.stop()


@pytest.fixture
def fresh_server():
    """A server of its own, for a test that kills it."""
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(tmp).start()
        yield s
        if s.proc.poll() is None:
            s.stop()


@pytest.fixture(scope="session")
def push_server():
    """A server that serves push notifications."""
    with tempfile.TemporaryDirectory() as tmp:
        s = Server(tmp, "--push", "--allow-private-webhooks").start()
        yield s
        s.stop()
