"""The programs of examples/python run as their docstrings say: the
store-only script twice in one directory, and the a2a-sdk client against
the a2a-sdk server on CtxlogTaskStore."""

import os
import re
import signal
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python")


def run(script, *args, cwd):
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_store_script_runs_twice_and_works_once(tmp_path):
    first = run("store_basics.py", cwd=tmp_path)
    task = re.search(r"^new task (\w+): TASK_STATE_COMPLETED$", first, re.M)
    assert task, first
    assert "history for the prompt: 0 characters" in first
    second = run("store_basics.py", cwd=tmp_path)
    assert f"already received: task {task[1]} is TASK_STATE_COMPLETED" in second
    # The history both runs print holds the one turn, never twice.
    for out in (first, second):
        assert out.count("| Please refund order 42.") == 1 and out.count("| Done: $42.00 refunded.") == 1
    assert os.path.isdir(tmp_path / "agent-data")


def test_the_client_talks_to_the_server(tmp_path):
    server = subprocess.Popen(
        [sys.executable, os.path.join(EXAMPLES, "a2a_server.py"), "--port", "0"],
        cwd=tmp_path, stdout=subprocess.PIPE, text=True,
    )
    try:
        line = server.stdout.readline()
        if not line.startswith("listening on "):
            pytest.fail(f"the server did not start: {line!r}, exit {server.poll()}")
        out = run("a2a_client.py", line.split()[-1], cwd=tmp_path)
        lines = out.splitlines()
        assert lines[0].startswith("task ") and lines[0].endswith("TASK_STATE_SUBMITTED")
        assert lines[1:5] == [
            "status: TASK_STATE_WORKING",
            "artifact: part one",
            "artifact: part two",
            "status: TASK_STATE_COMPLETED (done: refund order 42)",
        ]
        assert lines[5:7] == [
            "status: TASK_STATE_INPUT_REQUIRED (which order?)",
            "status: TASK_STATE_COMPLETED (done: order 42)",
        ]
        assert re.fullmatch(r"2 tasks in context \S+: TASK_STATE_COMPLETED, TASK_STATE_COMPLETED", lines[7])
        server.send_signal(signal.SIGTERM)
        assert server.stdout.read().strip() == "store closed"
        assert server.wait(timeout=30) in (0, -signal.SIGTERM)
        # The store it kept is in ./agent-data, as its docstring says.
        assert os.path.isdir(tmp_path / "agent-data")
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=30)
