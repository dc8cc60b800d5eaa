"""CtxlogSaver against LangGraph's SqliteSaver, in one run, file-backed,
each with its durable default.

1. A 3-node StateGraph (a conversation state that grows by a message per
   node) invoked ``--steps`` times on one thread: p50/p99 of each ``put``
   and ``put_writes`` the graph makes and of each whole invoke, and the
   bytes on disk at the end.
2. ``get_tuple`` of the latest checkpoint of that thread (1,000 calls),
   warm; and as the first call after a reopen, 20 reopens, and so is
   ``list(limit=10)`` as ``get_state_history`` calls it (ctxlog then reads
   the thread's tail).
3. ``list(limit=10)`` on threads of 10 and of ``--checkpoints``
   checkpoints (500 calls each, the two savers taking turns in rounds of
   50).

    python checkpointer_bench.py [--steps 200] [--checkpoints 10000]
    python checkpointer_bench.py --breakdown [--steps 200]

``--breakdown`` runs the graph of 1. on CtxlogSaver alone and splits its
writes' time: how long each call waited for the thread's lock (held by
another call of the same thread, from LangGraph's background threads),
how long it then waited for its queued record to be durable, and how long
each append to the store took (with its sync); and counts how many
records each append of the thread carried.

Durability: CtxlogSaver's default ("sync") makes each put and put_writes
durable with one fdatasync before it returns; SqliteSaver commits in WAL
mode with Python's default synchronous=FULL, one fsync of the WAL per
commit. Ratios are SQLite's time over ctxlog's.
"""

import argparse
import operator
import os
import sqlite3
import sys
import tempfile
import threading
import time
from typing import Annotated, TypedDict

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from ctxlog.langgraph import CtxlogSaver

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from figures import record  # noqa: E402


# Reopens, each timing one first call.
REOPENS = 20


class State(TypedDict):
    messages: Annotated[list[str], operator.add]


def node(name: str):
    def run(state: State) -> dict:
        return {"messages": [f"{name}: step {len(state['messages'])}, the order left the warehouse today"]}
    return run


def build(saver):
    g = StateGraph(State)
    for name in "abc":
        g.add_node(name, node(name))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=saver)


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(p * len(s)))] * 1e3


def timing(obj, name: str, into: list[float]) -> None:
    """Times every call of obj.name into `into`."""
    inner = getattr(obj, name)

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - t)
    setattr(obj, name, timed)


def disk_bytes(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return sum(os.path.getsize(p) for p in (path, path + "-wal", path + "-shm") if os.path.exists(p))


def open_saver(kind: str, where: str):
    if kind == "ctxlog":
        return CtxlogSaver(where)
    saver = SqliteSaver(sqlite3.connect(where, check_same_thread=False))
    saver.setup()
    return saver


def close(saver) -> None:
    if isinstance(saver, CtxlogSaver):
        saver.close()
    else:
        saver.conn.close()


def graph_run(kind: str, where: str, steps: int) -> dict:
    saver = open_saver(kind, where)
    puts: list[float] = []
    writes: list[float] = []
    timing(saver, "put", puts)
    timing(saver, "put_writes", writes)
    app = build(saver)
    config = {"configurable": {"thread_id": "conversation"}}
    invokes = []
    for _ in range(steps):
        t = time.perf_counter()
        app.invoke({"messages": ["user: where is my order?"]}, config)
        invokes.append(time.perf_counter() - t)
    gets = []
    for _ in range(1000):
        t = time.perf_counter()
        saver.get_tuple(config)
        gets.append(time.perf_counter() - t)
    close(saver)
    firsts: dict[str, list[float]] = {"first get": [], "first list": []}
    # The config get_state_history hands the saver: with the namespace.
    history = {"configurable": {**config["configurable"], "checkpoint_ns": ""}}
    for name, call in (("first get", lambda s: s.get_tuple(config)),
                       ("first list", lambda s: list(s.list(history, limit=10)))):
        for _ in range(REOPENS):
            saver = open_saver(kind, where)
            t = time.perf_counter()
            call(saver)
            firsts[name].append(time.perf_counter() - t)
            close(saver)
    return {"put": puts, "put_writes": writes, "invoke": invokes, "get": gets, **firsts,
            "bytes": disk_bytes(where), "checkpoints": len(puts)}


def breakdown(where: str, steps: int) -> tuple[dict[str, list[float]], list[int], list[int]]:
    """The graph of `graph_run` on CtxlogSaver, timing its lock waits,
    its waits for its queued records and its store appends beside its
    puts and put_writes; for each write, how many other writes were in
    flight when it began (one thread); and the records of each append of
    the thread."""
    saver = CtxlogSaver(where)
    out: dict[str, list[float]] = {"put": [], "put_writes": [], "lock wait": [], "durable wait": [],
                                   "store append": []}
    timing(saver, "put", out["put"])
    timing(saver, "put_writes", out["put_writes"])
    others: list[int] = []
    in_flight = 0
    flight_lock = threading.Lock()

    def counted(name: str) -> None:
        inner = getattr(saver, name)

        def call(*args, **kwargs):
            nonlocal in_flight
            with flight_lock:
                others.append(in_flight)
                in_flight += 1
            try:
                return inner(*args, **kwargs)
            finally:
                with flight_lock:
                    in_flight -= 1
        setattr(saver, name, call)
    counted("put")
    counted("put_writes")
    timing(saver._queue, "wait", out["durable wait"])
    batches: list[int] = []
    append = saver.store.append_messages

    def counted_append(tenant, context, raws):
        batches.append(len(raws))
        return append(tenant, context, raws)
    saver.store.append_messages = counted_append
    timing(saver.store, "append_messages", out["store append"])
    timing(saver.store, "append_message", out["store append"])
    locks = saver._lock

    class Timed:
        def __init__(self, lock) -> None:
            self.lock = lock

        def __enter__(self) -> None:
            t = time.perf_counter()
            self.lock.acquire()
            out["lock wait"].append(time.perf_counter() - t)

        def __exit__(self, *exc) -> None:
            self.lock.release()

    saver._lock = lambda thread_id: Timed(locks(thread_id))
    app = build(saver)
    config = {"configurable": {"thread_id": "conversation"}}
    for _ in range(steps):
        app.invoke({"messages": ["user: where is my order?"]}, config)
    close(saver)
    return out, others, batches


def lists(where: str, sizes: list[int]) -> dict[str, dict[int, list[float]]]:
    """`list(limit=10)` on threads of each size, on both savers: 500 calls
    each, in rounds of 50 taking turns, so that both meet the machine in
    the same state (it drifts, and runs of a process differ by half)."""
    savers = {kind: open_saver(kind, os.path.join(where, name))
              for kind, name in (("ctxlog", "ctxlog-lists"), ("sqlite", "lists.db"))}
    out: dict[str, dict[int, list[float]]] = {kind: {} for kind in savers}
    for size in sizes:
        config = {"configurable": {"thread_id": f"thread-{size}", "checkpoint_ns": ""}}
        for saver in savers.values():
            parent = dict(config)
            for step in range(size):
                checkpoint = empty_checkpoint()
                checkpoint["id"] = str(uuid6(clock_seq=-1))
                checkpoint["channel_values"] = {"messages": [f"message {step}"]}
                parent = saver.put(parent, checkpoint, {"source": "loop", "step": step}, {})
        for _ in range(10):
            for kind, saver in savers.items():
                samples = out[kind].setdefault(size, [])
                for _ in range(50):
                    t = time.perf_counter()
                    list(saver.list(config, limit=10))
                    samples.append(time.perf_counter() - t)
    for saver in savers.values():
        close(saver)
    return out


def row(label: str, mine: list[float], theirs: list[float]) -> None:
    m50, m99, t50, t99 = pct(mine, .5), pct(mine, .99), pct(theirs, .5), pct(theirs, .99)
    print(f"{label:>24} {m50:>10.3f} {m99:>7.3f} {t50:>10.3f} {t99:>7.3f} {t50 / m50:>6.1f} {t99 / m99:>6.1f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoints", type=int, default=10_000)
    parser.add_argument("--breakdown", action="store_true")
    args = parser.parse_args()
    if args.breakdown:
        with tempfile.TemporaryDirectory() as tmp:
            parts, others, batches = breakdown(os.path.join(tmp, "ctxlog"), args.steps)
        print(f"CtxlogSaver, a 3-node graph, {args.steps} invokes on one thread; ms")
        print(f"{'':>24} {'calls':>6} {'p50':>7} {'p90':>7} {'p99':>7}")
        for label, samples in parts.items():
            print(f"{label:>24} {len(samples):>6} {pct(samples, .5):>7.3f} {pct(samples, .9):>7.3f} "
                  f"{pct(samples, .99):>7.3f}")
        counts = [sum(1 for n in others if n == k) for k in (0, 1)] + [sum(1 for n in others if n >= 2)]
        print(f"writes that began with 0, 1, 2 or more others of the thread in flight: "
              f"{counts[0]}, {counts[1]}, {counts[2]}")
        print(f"appends of the thread's records: {len(batches)} for {sum(batches)} records "
              f"({sum(1 for b in batches if b > 1)} of two or more)")
        return
    header = f"{'':>24} {'ctxlog p50':>10} {'p99':>7} {'sqlite p50':>10} {'p99':>7} {'p50 ×':>6} {'p99 ×':>6}"
    with tempfile.TemporaryDirectory() as tmp:
        mine = graph_run("ctxlog", os.path.join(tmp, "ctxlog"), args.steps)
        theirs = graph_run("sqlite", os.path.join(tmp, "graph.db"), args.steps)
        print(f"a 3-node graph, {args.steps} invokes on one thread ({mine['checkpoints']} checkpoints); ms")
        print(header)
        labels = {"get": "get_tuple (latest)", "invoke": "whole invoke", "first get": "get_tuple, 1st, reopened",
                  "first list": "list, 1st, reopened"}
        for key in ("put", "put_writes", "invoke", "get", "first get", "first list"):
            row(labels.get(key, key), mine[key], theirs[key])
            if key in ("put", "put_writes", "invoke"):
                quick = args.steps < 200
                label = labels.get(key, key)
                record("checkpointer", f"CtxlogSaver / {label} p50", pct(mine[key], .5), "ms", quick)
                record("checkpointer", f"SqliteSaver / {label} p50", pct(theirs[key], .5), "ms", quick)
        print(f"{'bytes on disk':>24} {mine['bytes']:>10,} {'':>7} {theirs['bytes']:>10,}")
        listed = lists(tmp, [10, args.checkpoints])
        print(f"\nlist(limit=10), 500 calls each, in turns; ms")
        print(header)
        for size in listed["ctxlog"]:
            row(f"thread of {size:,}", listed["ctxlog"][size], listed["sqlite"][size])


if __name__ == "__main__":
    main()
