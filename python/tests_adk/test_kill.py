"""Sessions survive kill -9: a process writing through
``CtxlogSessionService`` is SIGKILLed at a random point, again and again,
and what it was told was stored is read back whole.

``CTXLOG_ADK_KILLS`` sets the rounds (5 by default; the long run in
docs/python.md uses 200)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from ctxlog.adk import CtxlogSessionService

from child import APP, SESSION, USER

CHILD = Path(__file__).with_name("child.py")
ROUNDS = int(os.environ.get("CTXLOG_ADK_KILLS", "5"))
# How long a child may take to acknowledge what the test waits for.
DEADLINE = 60.0


def run_until(args: list[str], lines: int) -> list[str]:
    """Starts the child, reads ``lines`` lines of its output, SIGKILLs it
    and returns every line it printed (it may have gone on meanwhile)."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    out = []
    deadline = time.monotonic() + DEADLINE
    try:
        assert child.stdout is not None
        while len(out) < lines:
            assert time.monotonic() < deadline, f"the child acknowledged {len(out)} of {lines} in {DEADLINE}s"
            line = child.stdout.readline()
            assert line, f"the child ended after {len(out)} lines (exit {child.poll()})"
            out.append(line.strip())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=DEADLINE)
    assert child.stdout is not None
    out += [line.strip() for line in child.stdout.read().splitlines()]
    child.stdout.close()
    return out


async def test_every_acknowledged_event_survives_kill_9(tmp_path):
    store = str(tmp_path / "store")
    rng = random.Random(1)
    acked = 0
    for _ in range(ROUNDS):
        lines = run_until(["events", store, "1000000"], rng.randrange(1, 40))
        acked = int(lines[-1].split()[1])
        service = CtxlogSessionService(store)
        try:
            session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
            assert session is not None
            count = len(session.events)
            # The kill may land after a write and before its line.
            assert count in (acked, acked + 1)
            texts = [e.content.parts[0].text for e in session.events]
            assert texts == [f"event {n}" for n in range(1, count + 1)]
            # A stored event has all its effects; app and user state are
            # written before it, so they may hold the next one's too.
            assert session.state["n"] == count
            assert session.state["user:n"] in (count, count + 1)
            assert session.state["app:n"] in (count, count + 1)
            assert (await service.get_user_state(app_name=APP, user_id=USER))["n"] == session.state["user:n"]
        finally:
            await service.close()
    assert acked > 0


async def test_an_agent_killed_mid_conversation_resumes_from_its_session(tmp_path):
    store = str(tmp_path / "store")
    rng = random.Random(2)
    turns = 0
    for _ in range(max(1, ROUNDS // 2)):
        lines = run_until(["agent", store, "1000000"], rng.randrange(1, 6))
        # Each answer counts the user messages the model was shown: the
        # session's whole conversation, the turns before the kill included.
        for line in lines:
            turn, answer = line.split(": ")
            assert answer == f"seen {turn.split()[1]}"
        assert int(lines[0].split()[1].rstrip(":")) in (turns + 1, turns + 2)
        turns = int(lines[-1].split()[1].rstrip(":"))
    service = CtxlogSessionService(store)
    try:
        session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
        # Every answer stored counts the questions stored before it (a
        # question cut off by a kill stays, unanswered, as in any ADK
        # session whose run was cut).
        users = 0
        for event in session.events:
            if event.author == "user":
                users += 1
            else:
                assert event.content.parts[0].text == f"seen {users}"
        assert users in (turns, turns + 1)
    finally:
        await service.close()
