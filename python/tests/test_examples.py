"""The programs of examples/python run as their docstrings say: the
store-only script twice in one directory, the a2a-sdk client against the
a2a-sdk server on CtxlogTaskStore, the Agents SDK agent and the LangGraph
graph killed and resumed (ADK's example: python/tests_adk). Light on
imports, so that .ci/run runs them in a venv that has the wheel and its
extras alone."""

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


def test_the_conversation_outlives_a_kill(tmp_path):
    """The example agent answers two turns, is SIGKILLed without closing
    anything, and started again: its next turn sees the whole
    conversation."""
    script = os.path.join(EXAMPLES, "agents_session.py")
    agent = subprocess.Popen([sys.executable, script, "--dir", "agent-data"], cwd=tmp_path,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        for n, line in enumerate(["first", "second"], start=1):
            agent.stdin.write(line + "\n")
            agent.stdin.flush()
            reply = agent.stdout.readline()
            assert f"you said {line!r} ({n} turns)" in reply, reply
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=30)
    assert agent.returncode == -signal.SIGKILL
    done = subprocess.run([sys.executable, script, "--dir", "agent-data"], cwd=tmp_path,
                          input="third\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # Two turns of two items each, and the new input.
    assert done.stdout.strip() == "I have seen 5 items; you said 'third' (3 turns)"


def test_a_graph_waiting_for_a_human_outlives_a_kill(tmp_path):
    """The example graph stops at its approval and waits; the process is
    SIGKILLed there. A new process resumes it from the checkpoint with the
    state it had, and time travel back to the approval takes another
    answer."""
    script = os.path.join(EXAMPLES, "langgraph_graph.py")

    def run(*args):
        done = subprocess.run([sys.executable, script, *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    waiting = subprocess.Popen([sys.executable, script, "start", "refund order 42"], cwd=tmp_path,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert waiting.stdout.readline() == "waiting for a human: approve refund order 42?\n"
    finally:
        waiting.send_signal(signal.SIGKILL)
        waiting.wait(timeout=30)
    assert waiting.returncode == -signal.SIGKILL
    assert run("resume", "yes") == (
        "done: approved; drafted: refund order 42 | reviewed: yes | carried out: refund order 42\n")
    assert run("travel", "no") == (
        "done: declined; drafted: refund order 42 | reviewed: no | not carried out: refund order 42\n")
    steps = run("history").splitlines()
    # Both branches are kept: start, draft, the wait, the yes and its end,
    # the fork, the no and its end.
    assert len(steps) == 8, steps
    assert steps[0].startswith("step 4: next []") and "'reviewed: no'" in steps[0]
