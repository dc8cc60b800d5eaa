"""CtxlogSession against the OpenAI Agents SDK's SQLiteSession, in one run,
file-backed, each with its durable default.

1. ``add_items`` of one turn (3 items: the user's input, a tool call's
   output, the reply) on a session already holding 10, 1,000 and 10,000
   items: p50 and p99 of ``--turns`` turns each, the stores taking turns
   in rounds of 30.
2. ``get_items(limit=20)`` on ``--sessions`` sessions of 100 items, each
   session read once in a random order: p50 and p99, warm and after a
   reopen.

    python session_bench.py [--turns 300] [--sessions 10000]

Part 1 also times a floor, not a way to use the store: the same append
(``Store.append_messages`` of the turn's JSON, one fdatasync) called on
the event loop's own thread, blocking it, which is what a durable turn
costs here with no hand-off to a thread at all.

Durability: CtxlogSession's default ("sync") makes a turn durable with one
fdatasync before ``add_items`` returns; SQLiteSession commits in WAL mode
with Python's default synchronous=FULL, one fsync of the WAL per commit.
The sessions of part 2 are filled through each store's own API (ctxlog's
with durability "buffered" and a sync at the end; SQLite's in one
transaction per session), then read with the defaults.
"""

import argparse
import asyncio
import json
import os
import random
import sys
import statistics
import tempfile
import time

from agents.memory import SQLiteSession

import ctxlog
from ctxlog.agents import CtxlogSession

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import record  # noqa: E402


def turn(n: int) -> list[dict]:
    return [
        {"role": "user", "content": f"Question {n}: where is my order? It was due on Monday."},
        {"type": "function_call_output", "call_id": f"call_{n}", "output": '{"status": "shipped"}'},
        {"role": "assistant", "content": f"Answer {n}: it left the warehouse today; tracking ZX{n:06}."},
    ]


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(p * len(s)))] * 1e3


async def timed(fn, *args) -> float:
    t = time.perf_counter()
    await fn(*args)
    return time.perf_counter() - t


async def fill(session, items: int) -> None:
    for start in range(0, items, 300):
        await session.add_items([turn(n)[n % 3] for n in range(start, min(items, start + 300))])


class Floor:
    """The floor: a turn appended on the calling thread (blocking it)."""

    def __init__(self, where: str) -> None:
        self.store = ctxlog.Store(where)

    async def add_items(self, items: list[dict]) -> None:
        self.store.append_messages("agents", "s", [json.dumps(item) for item in items])

    def close(self) -> None:
        self.store.close()


# The turns of part 1 are timed in rounds of this many per session,
# taking turns, so that the three meet the machine in the same state (it
# drifts, and one process's timings can differ from the next's by half).
ROUND = 30


async def adds(where: str, size: int, turns: int) -> dict[str, list[float]]:
    sessions = {"ctxlog": CtxlogSession("s", os.path.join(where, f"c{size}")),
                "sqlite": SQLiteSession("s", os.path.join(where, f"s{size}.db")),
                "floor": Floor(os.path.join(where, f"f{size}"))}
    samples: dict[str, list[float]] = {kind: [] for kind in sessions}
    for session in sessions.values():
        await fill(session, size)
    for start in range(0, turns, ROUND):
        for kind, session in sessions.items():
            samples[kind] += [await timed(session.add_items, turn(n)) for n in range(start, min(turns, start + ROUND))]
    for session in sessions.values():
        session.close()
    return samples


def fill_ctxlog(where: str, sessions: int) -> None:
    with ctxlog.Store(where, durability="buffered") as store:
        for i in range(sessions):
            store.append_messages("agents", f"s{i}", [json.dumps(turn(n)[n % 3]) for n in range(100)])
        store.sync()


async def fill_sqlite(where: str, sessions: int) -> None:
    for i in range(sessions):
        session = SQLiteSession(f"s{i}", where)
        await session.add_items([turn(n)[n % 3] for n in range(100)])
        session.close()


# Sessions open at once while reading: each SQLiteSession holds its own
# connection (three files in WAL mode), so 10,000 at once would pass the
# open-files limit.
OPEN_AT_ONCE = 2000


async def reads(kind: str, where: str, order: list[int]) -> list[float]:
    """Each session object is made first (SQLite's opens its connection
    then), so that only ``get_items`` is timed; ``OPEN_AT_ONCE`` at a
    time, in the order given."""
    store = ctxlog.Store(where) if kind == "ctxlog" else None
    samples = []
    for at in range(0, len(order), OPEN_AT_ONCE):
        batch = order[at:at + OPEN_AT_ONCE]
        if store is not None:
            sessions = {i: CtxlogSession(f"s{i}", store) for i in batch}
        else:
            sessions = {i: SQLiteSession(f"s{i}", where) for i in batch}
        for session in sessions.values():
            if store is None:
                await session.get_items(0)  # opens the connection, reads nothing
        samples += [await timed(sessions[i].get_items, 20) for i in batch]
        for session in sessions.values():
            session.close()
    if store is not None:
        store.close()
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"add_items of one turn (3 items), {args.turns} turns; ms")
        print(
            f"{'session size':>12} {'ctxlog p50':>10} {'p99':>7} {'sqlite p50':>10} {'p99':>7} {'p50 ×':>6} {'p99 ×':>6}"
            f" {'floor p50':>9} {'p99':>7} {'p50 ×':>6} {'p99 ×':>6}"
        )
        for size in (10, 1_000, 10_000):
            timings = await adds(tmp, size, args.turns)
            mine, theirs, floor = timings["ctxlog"], timings["sqlite"], timings["floor"]
            m50, m99, t50, t99 = pct(mine, .5), pct(mine, .99), pct(theirs, .5), pct(theirs, .99)
            f50, f99 = pct(floor, .5), pct(floor, .99)
            print(
                f"{size:>12,} {m50:>10.3f} {m99:>7.3f} {t50:>10.3f} {t99:>7.3f} {t50 / m50:>6.1f} {t99 / m99:>6.1f}"
                f" {f50:>9.3f} {f99:>7.3f} {t50 / f50:>6.1f} {t99 / f99:>6.1f}"
            )
            if size == 1_000:
                quick = args.turns < 300
                for store, p50, p99 in (("CtxlogSession", m50, m99), ("SQLiteSession", t50, t99)):
                    record("session", f"{store} / add_items, 1,000 items / p50", p50, "ms", quick)
                    record("session", f"{store} / add_items, 1,000 items / p99", p99, "ms", quick)
        mine_dir, theirs_db = os.path.join(tmp, "reads"), os.path.join(tmp, "reads.db")
        fill_ctxlog(mine_dir, args.sessions)
        await fill_sqlite(theirs_db, args.sessions)
        order = list(range(args.sessions))
        random.Random(7).shuffle(order)
        print(f"\nget_items(limit=20) on {args.sessions:,} sessions of 100 items; ms")
        print(f"{'pass':>12} {'ctxlog p50':>10} {'p99':>7} {'sqlite p50':>10} {'p99':>7} {'p50 ×':>6} {'p99 ×':>6}")
        for label in ("first open", "reopened"):
            mine = await reads("ctxlog", mine_dir, order)
            theirs = await reads("sqlite", theirs_db, order)
            m50, m99, t50, t99 = pct(mine, .5), pct(mine, .99), pct(theirs, .5), pct(theirs, .99)
            print(f"{label:>12} {m50:>10.3f} {m99:>7.3f} {t50:>10.3f} {t99:>7.3f} {t50 / m50:>6.1f} {t99 / m99:>6.1f}")


if __name__ == "__main__":
    asyncio.run(main())
