"""CtxlogTaskStore against a2a-sdk's DatabaseTaskStore (SQLite, aiosqlite)
and InMemoryTaskStore, through the TaskStore interface, in one run.

After a 20-turn warm-up task on each store, one task driven for 200 turns
(a user message in, an agent reply, a status change per turn, then
``save``): the time and the bytes written of the
saves around turns 10, 100 and 200 (the median of the ten saves ending
there), and the whole task's time; then 1,000 tasks of 5 turns each.

    python task_store_bench.py [--turns 200] [--tasks 1000]

A fourth row is a floor, not a way to use the store: the same ctxlog
store's ``save_sync`` called on the event loop's own thread, which
blocks the loop for the whole save and its fdatasync. It is what a
durable save costs here with no hand-off at all; ``save``, which keeps
the loop free, pays two thread wake-ups more.

Durability: ctxlog's default ("sync") makes each save durable with one
fdatasync of its segment before ``save`` returns; SQLite (SQLAlchemy's
defaults: rollback journal, synchronous=FULL) fsyncs its journal and its
database file at every commit. Bytes written are what the process passed
to write(2) during the save (/proc/self/io ``wchar``), so they count the
SQLite journal and database pages, and ctxlog's record.
"""

import argparse
import asyncio
import os
import sys
import statistics
import tempfile
import time

from a2a.server.context import ServerCallContext
from a2a.server.tasks import DatabaseTaskStore, InMemoryTaskStore
from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState, TaskStatus

from ctxlog.a2a import CtxlogTaskStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import record  # noqa: E402


def written() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def turn(task: Task, n: int) -> None:
    """One turn: a question in, an answer out, the status moved on."""
    task.history.append(
        Message(message_id=f"{task.id}-u{n}", role=Role.ROLE_USER,
                parts=[Part(text=f"Question {n}: where is my order? It was due on Monday.")])
    )
    task.history.append(
        Message(message_id=f"{task.id}-a{n}", role=Role.ROLE_AGENT,
                parts=[Part(text=f"Answer {n}: it left the warehouse today; tracking number ZX{n:06}.")])
    )
    task.status.state = TaskState.TASK_STATE_INPUT_REQUIRED if n % 2 else TaskState.TASK_STATE_WORKING
    task.status.timestamp.GetCurrentTime()


class Blocking:
    """The floor: a CtxlogTaskStore's saves made on the calling thread."""

    def __init__(self, store: CtxlogTaskStore) -> None:
        self.store = store

    async def save(self, task: Task, context: ServerCallContext) -> None:
        self.store.save_sync(self.store._owner_resolver(context), task)


async def long_task(store, turns: int, context: ServerCallContext, task_id: str = "long"):
    task = Task(id=task_id, context_id="case", status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
    times, sizes = [], []
    start = time.perf_counter()
    for n in range(1, turns + 1):
        turn(task, n)
        before, t0 = written(), time.perf_counter()
        await store.save(task, context)
        times.append(time.perf_counter() - t0)
        sizes.append(written() - before)
    total = time.perf_counter() - start
    return times, sizes, total


async def many_tasks(store, tasks: int, context: ServerCallContext) -> float:
    start = time.perf_counter()
    for i in range(tasks):
        task = Task(id=f"t{i}", context_id=f"c{i % 50}", status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
        for n in range(1, 6):
            turn(task, n)
            await store.save(task, context)
    return time.perf_counter() - start


def around(values, at: int) -> float:
    """The median of the ten values ending at turn ``at``."""
    return statistics.median(values[max(0, at - 10) : at])


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=1000)
    args = parser.parse_args()
    context = ServerCallContext()
    marks = [m for m in (10, 100, 200) if m <= args.turns]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        from sqlalchemy.ext.asyncio import create_async_engine

        def stores():
            return {
                "ctxlog (sync)": CtxlogTaskStore(os.path.join(tmp, "ctxlog")),
                "SQLite (DatabaseTaskStore)": DatabaseTaskStore(
                    create_async_engine(f"sqlite+aiosqlite:///{os.path.join(tmp, 'a2a.db')}")
                ),
                "InMemoryTaskStore": InMemoryTaskStore(),
                "floor: ctxlog, blocking the loop": Blocking(CtxlogTaskStore(os.path.join(tmp, "floor"))),
            }

        made = stores()
        for name, store in made.items():
            # Warm up each store's code paths, connection and thread pool
            # on a task of its own first.
            await long_task(store, 20, context, task_id="warm-up")
            rows[name] = await long_task(store, args.turns, context)
        many = {}
        for name, store in made.items():
            many[name] = await many_tasks(store, args.tasks, context)
        made["ctxlog (sync)"].close()
        made["floor: ctxlog, blocking the loop"].store.close()
        await made["SQLite (DatabaseTaskStore)"].engine.dispose()

    print(f"One task, {args.turns} turns, a save per turn (median of the ten saves up to each turn):\n")
    head = " | ".join(f"save {m}: ms, bytes" for m in marks)
    print(f"| store | {head} | save {marks[-1]} / save {marks[0]} | whole task, s |")
    print("|---|" + "---|" * (len(marks) + 2))
    for name, (times, sizes, total) in rows.items():
        cells = " | ".join(f"{around(times, m) * 1e3:.3f}, {around(sizes, m):,.0f}" for m in marks)
        flat = around(times, marks[-1]) / around(times, marks[0])
        print(f"| {name} | {cells} | {flat:.2f}x | {total:.3f} |")
        quick = args.turns < 200
        record("task_store", f"{name} / save {marks[-1]}", around(times, marks[-1]) * 1e3, "ms", quick)
        record("task_store", f"{name} / whole task of {args.turns} turns", total, "s", quick)
    sqlite_total = rows["SQLite (DatabaseTaskStore)"][2]
    print(f"\nWhole task, SQLite / ctxlog: {sqlite_total / rows['ctxlog (sync)'][2]:.1f}x")
    floor_total = rows["floor: ctxlog, blocking the loop"][2]
    print(f"Whole task, SQLite / the floor (no hand-off): {sqlite_total / floor_total:.1f}x")
    print(f"\n{args.tasks} tasks of 5 turns:\n")
    print("| store | total, s | per save, ms |")
    print("|---|---|---|")
    for name, seconds in many.items():
        print(f"| {name} | {seconds:.2f} | {seconds / (args.tasks * 5) * 1e3:.3f} |")
    print(f"\n1,000 tasks, SQLite / ctxlog: {many['SQLite (DatabaseTaskStore)'] / many['ctxlog (sync)']:.1f}x")


if __name__ == "__main__":
    asyncio.run(main())
