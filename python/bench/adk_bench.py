"""CtxlogSessionService against Google ADK's DatabaseSessionService on
SQLite (the anchor) and its SqliteSessionService, in one run, file-backed,
each with its durable default.

1. ``append_event`` of an agent's reply (text, and an ``output_key``
   state delta) on a session already holding 10 and 1,000 events: p50 and
   p99 of ``--events`` appends each, the services taking turns in rounds
   of 30.
2. ``get_session`` of a session of 1,000 events: whole, and its newest 20
   (``num_recent_events``); p50 of ``--reads`` reads each.
3. ``list_sessions`` of an app of 1,000 sessions of 10 users: one user's
   100, and all; p50 of ``--reads`` lists.

    python adk_bench.py [--events 300] [--reads 50]

Part 1 also times a floor, not a way to use the store: the same event
record appended (``Store.append_message``, one fdatasync) on the event
loop's own thread, blocking it: a durable append with nothing around it.

Durability: CtxlogSessionService's default makes an append durable with
one fdatasync before it returns; the SQLite services commit each call in a
transaction with SQLite's defaults (rollback journal, synchronous=FULL).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
import warnings

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

import ctxlog
from ctxlog.adk import CtxlogSessionService

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import record  # noqa: E402

APP = "bench"
ROUND = 30


def reply(n: int) -> Event:
    return Event(
        invocation_id=f"inv-{n}",
        author="support_agent",
        content=types.Content(
            role="model",
            parts=[types.Part(text=f"Answer {n}: your order left the warehouse today; tracking ZX{n:06}.")],
        ),
        actions=EventActions(state_delta={"last_answer": f"answer {n}"}),
    )


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(p * len(s)))] * 1e3


def services(where: str, tag: str) -> dict[str, object]:
    return {
        "ctxlog": CtxlogSessionService(os.path.join(where, f"ctxlog-{tag}")),
        "database": DatabaseSessionService(f"sqlite+aiosqlite:///{os.path.join(where, f'db-{tag}.db')}"),
        "sqlite": SqliteSessionService(os.path.join(where, f"sqlite-{tag}.db")),
    }


class Floor:
    """The floor: an event's record appended on the calling thread."""

    def __init__(self, where: str) -> None:
        self.store = ctxlog.Store(where)

    async def append_event(self, session: object, event: Event) -> None:
        self.store.append_message("floor", "s", event.model_dump_json(exclude_none=True))

    async def close(self) -> None:
        self.store.close()


async def appends(where: str, size: int, count: int) -> dict[str, list[float]]:
    runs: dict[str, object] = {**services(where, f"a{size}"), "floor": Floor(os.path.join(where, f"floor{size}"))}
    sessions = {}
    for kind, service in runs.items():
        if kind == "floor":
            sessions[kind] = None
            continue
        session = await service.create_session(app_name=APP, user_id="u", session_id="s")
        for n in range(size):
            await service.append_event(session, reply(n))
        sessions[kind] = session
    samples: dict[str, list[float]] = {kind: [] for kind in runs}
    for start in range(0, count, ROUND):
        for kind, service in runs.items():
            for n in range(start, min(count, start + ROUND)):
                event = reply(size + n)
                t = time.perf_counter()
                await service.append_event(sessions[kind], event)
                samples[kind].append(time.perf_counter() - t)
    for service in runs.values():
        await service.close()
    return samples


async def timed(reads: int, call) -> list[float]:
    samples = []
    for _ in range(reads):
        t = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - t)
    return samples


async def gets(where: str, reads: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind, service in services(where, "get").items():
        session = await service.create_session(app_name=APP, user_id="u", session_id="long")
        for n in range(1000):
            await service.append_event(session, reply(n))
        whole = await timed(reads, lambda: service.get_session(app_name=APP, user_id="u", session_id="long"))
        recent = await timed(reads, lambda: service.get_session(
            app_name=APP, user_id="u", session_id="long", config=GetSessionConfig(num_recent_events=20)))
        out[kind] = {"whole": pct(whole, .5), "recent": pct(recent, .5)}
        await service.close()
    return out


async def lists(where: str, reads: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind, service in services(where, "list").items():
        for i in range(1000):
            session = await service.create_session(
                app_name=APP, user_id=f"user{i % 10}", session_id=f"s{i}", state={"topic": f"case {i}"})
            await service.append_event(session, reply(i))
        one = await timed(reads, lambda: service.list_sessions(app_name=APP, user_id="user3"))
        every = await timed(reads, lambda: service.list_sessions(app_name=APP))
        out[kind] = {"one user": pct(one, .5), "all": pct(every, .5)}
        await service.close()
    return out


NAMES = {"ctxlog": "CtxlogSessionService", "database": "DatabaseSessionService", "sqlite": "SqliteSessionService"}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--reads", type=int, default=50)
    args = parser.parse_args()
    quick = args.events < 300
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        print(f"append_event of a reply, {args.events} appends; ms")
        print(f"{'events':>7} {'ctxlog p50':>10} {'p99':>7} {'database p50':>12} {'p99':>7} {'p50 ×':>6} {'p99 ×':>6}"
              f" {'sqlite p50':>10} {'p99':>7} {'p50 ×':>6} {'floor p50':>9} {'over':>5}")
        for size in (10, 1_000):
            s = await appends(tmp, size, args.events)
            m50, m99 = pct(s["ctxlog"], .5), pct(s["ctxlog"], .99)
            d50, d99 = pct(s["database"], .5), pct(s["database"], .99)
            q50, q99 = pct(s["sqlite"], .5), pct(s["sqlite"], .99)
            f50 = pct(s["floor"], .5)
            print(f"{size:>7,} {m50:>10.3f} {m99:>7.3f} {d50:>12.3f} {d99:>7.3f} {d50 / m50:>6.1f} {d99 / m99:>6.1f}"
                  f" {q50:>10.3f} {q99:>7.3f} {q50 / m50:>6.1f} {f50:>9.3f} {m50 / f50:>5.2f}")
            if size == 1_000:
                for kind, p50, p99 in (("ctxlog", m50, m99), ("database", d50, d99), ("sqlite", q50, q99)):
                    record("adk", f"{NAMES[kind]} / append_event, 1,000 events / p50", p50, "ms", quick)
                    record("adk", f"{NAMES[kind]} / append_event, 1,000 events / p99", p99, "ms", quick)
        table(f"get_session of a 1,000-event session, p50 of {args.reads}", "read", "get_session, 1,000 events",
              await gets(tmp, args.reads), quick)
        table(f"list_sessions of an app of 1,000 sessions (10 users), p50 of {args.reads}", "list", "list_sessions",
              await lists(tmp, args.reads), quick)


def table(title: str, column: str, figure: str, timings: dict[str, dict[str, float]], quick: bool) -> None:
    """Prints p50s of each service by row (ms), and records ctxlog's and
    the anchor's."""
    print(f"\n{title}; ms")
    print(f"{column:>8} {'ctxlog':>8} {'database':>9} {'×':>6} {'sqlite':>8} {'×':>6}")
    for what in timings["ctxlog"]:
        c, d, q = timings["ctxlog"][what], timings["database"][what], timings["sqlite"][what]
        print(f"{what:>8} {c:>8.3f} {d:>9.3f} {d / c:>6.1f} {q:>8.3f} {q / c:>6.1f}")
        for kind, value in (("ctxlog", c), ("database", d)):
            record("adk", f"{NAMES[kind]} / {figure}, {what} / p50", value, "ms", quick)


if __name__ == "__main__":
    asyncio.run(main())
