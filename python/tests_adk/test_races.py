"""Many writers on one session at once: every append either lands whole
or is refused as stale, none is lost or doubled, and the state after is
the one the landed events make."""

from __future__ import annotations

import asyncio
import threading

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types

from ctxlog.adk import CtxlogSessionService, StaleSessionError

IDS = {"app_name": "a", "user_id": "u", "session_id": "s"}


def event(writer: int, n: int) -> Event:
    return Event(
        invocation_id=f"w{writer}",
        author="agent",
        content=types.Content(role="model", parts=[types.Part(text=f"{writer}:{n}")]),
        actions=EventActions(state_delta={f"w{writer}": n, "user:last": writer, "app:count": n}),
    )


async def test_copies_racing_on_one_session_land_once_each_or_are_refused(tmp_path):
    # Two services on one store in one process (they share its open) and
    # eight writers, each appending through a copy it read, again and
    # again: a stale copy is read again and the append made again.
    services = [CtxlogSessionService(tmp_path / "store") for _ in range(2)]
    await services[0].create_session(**IDS)
    landed: list[str] = []
    refused = 0

    async def writer(w: int) -> None:
        nonlocal refused
        service = services[w % 2]
        for n in range(10):
            while True:
                session = await service.get_session(**IDS)
                try:
                    await service.append_event(session, event(w, n))
                except StaleSessionError:
                    refused += 1
                    continue
                landed.append(f"{w}:{n}")
                break

    try:
        await asyncio.gather(*(writer(w) for w in range(8)))
        session = await services[1].get_session(**IDS)
        stored = [e.content.parts[0].text for e in session.events]
        assert sorted(stored) == sorted(landed) and len(stored) == 80
        # Each writer's events are in its own order, and the state is what
        # the events, in the order stored, make.
        for w in range(8):
            assert [t for t in stored if t.startswith(f"{w}:")] == [f"{w}:{n}" for n in range(10)]
            assert session.state[f"w{w}"] == 9
        assert session.state["user:last"] == int(stored[-1].split(":")[0])
        assert session.state["app:count"] == int(stored[-1].split(":")[1])
        assert refused > 0, "the writers never overlapped: the test proves nothing"
    finally:
        for service in services:
            await service.close()


async def test_threads_with_loops_of_their_own_share_the_store(tmp_path):
    """A service per thread, each thread its own event loop, all on one
    store: appends to their own sessions and to one shared user's state."""
    errors: list[BaseException] = []

    def run(t: int) -> None:
        async def go() -> None:
            service = CtxlogSessionService(tmp_path / "store")
            ids = {"app_name": "a", "user_id": "shared", "session_id": f"t{t}"}
            session = await service.create_session(**ids)
            for n in range(25):
                await service.append_event(session, event(t, n))
            await service.close()

        try:
            asyncio.run(go())
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    service = CtxlogSessionService(tmp_path / "store")
    try:
        listed = await service.list_sessions(app_name="a", user_id="shared")
        assert sorted(s.id for s in listed.sessions) == [f"t{t}" for t in range(6)]
        for t in range(6):
            session = await service.get_session(app_name="a", user_id="shared", session_id=f"t{t}")
            assert [e.content.parts[0].text for e in session.events] == [f"{t}:{n}" for n in range(25)]
            assert session.state["app:count"] == 24
    finally:
        await service.close()


async def test_a_cancelled_append_leaves_the_session_object_as_the_store(tmp_path):
    """A caller that cancels an append: it may land all the same (the
    store's call runs to its end), and the session object then holds it,
    so the next append on the object goes on; made again, the same event
    is stored once."""
    service = CtxlogSessionService(tmp_path / "store")
    try:
        session = await service.create_session(**IDS)
        for n in range(20):
            made = event(0, n)
            task = asyncio.ensure_future(service.append_event(session, made))
            for _ in range(n % 4):
                await asyncio.sleep(0)  # let it get to different points
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            if n % 2:
                await service.append_event(session, made)  # made again
            stored = await service.get_session(**IDS)
            assert [e.id for e in session.events] == [e.id for e in stored.events]
        await service.append_event(session, event(1, 0))
        stored = await service.get_session(**IDS)
        texts = [e.content.parts[0].text for e in stored.events]
        assert texts[-1] == "1:0" and len(texts) == len(set(texts))
        assert all(f"0:{n}" in texts for n in range(1, 20, 2))
    finally:
        await service.close()
