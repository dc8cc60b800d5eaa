"""Starts ctxlog-server (the binary named by CTXLOG_SERVER_BIN) with the
interop script and two tenants' tokens on a free loopback port, and stops
it (by the pid it started) when the session ends: once as it starts by
default, once with `--idempotency header`, once with `--push`."""

import contextlib
import os
import re
import subprocess
import tempfile
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENS = {"alice": "interop-token-alice", "bob": "interop-token-bob"}


@contextlib.contextmanager
def running(*extra):
    """A server on a fresh store, with `extra` flags; yields its URL."""
    binary = os.environ.get("CTXLOG_SERVER_BIN")
    if not binary or not os.path.exists(binary):
        pytest.fail("set CTXLOG_SERVER_BIN to the built ctxlog-server binary")
    with tempfile.TemporaryDirectory() as tmp:
        tokens = os.path.join(tmp, "tokens")
        with open(tokens, "w") as f:
            for tenant, token in TOKENS.items():
                f.write(f"{token} {tenant}\n")
        proc = subprocess.Popen(
            [binary, "--dir", os.path.join(tmp, "store"), "--listen", "127.0.0.1:0",
             "--tokens", tokens, "--agent", "scripted:" + os.path.join(HERE, "script.json"),
             *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "RUST_LOG": "info"},
        )
        found = {}
        ready = threading.Event()

        def read_log():
            for line in proc.stderr:
                m = re.search(r"address=(\S+)", line)
                if m and "url" not in found:
                    found["url"] = "http://" + m.group(1)
                    ready.set()

        threading.Thread(target=read_log, daemon=True).start()
        if not ready.wait(30):
            proc.kill()
            pytest.fail("ctxlog-server did not start within 30 s")
        try:
            yield found["url"]
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            assert proc.returncode == 0, f"ctxlog-server exited with {proc.returncode}"


@pytest.fixture(scope="session")
def server():
    with running() as url:
        yield url


@pytest.fixture(scope="session")
def server_push():
    """A server that serves push notifications (to loopback webhooks)."""
    with running("--push", "--allow-private-webhooks") as url:
        yield url


@pytest.fixture(scope="session")
def server_header():
    """A server that tells resends only by Idempotency-Key."""
    with running("--idempotency", "header") as url:
        yield url
