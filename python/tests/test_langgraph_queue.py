"""ctxlog.langgraph's write queue: writes to a thread that overlap share
one sync, a failed flush fails every write queued behind it and nothing of
them stays in memory, a thread written by someone else meanwhile is read
again, and writes from many threads at once all land, as a reopened
saver reads them, also after a SIGKILL in the middle of them."""

import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

from ctxlog.langgraph import CtxlogSaver
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

# How long a test waits for another thread before it fails.
TIMEOUT = 30


def _put(saver, thread_id, step):
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=-1))
    checkpoint["channel_values"] = {"messages": [f"message {step}"]}
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return saver.put(config, checkpoint, {"source": "loop", "step": step}, {})


def _pending(saver, config):
    found = saver.get_tuple(config)
    return sorted((task, channel, value) for task, channel, value in found.pending_writes)


class _Held:
    """Holds the saver's first append of a batch in the store until
    `release` is set, once `waiting` writes have queued; records the
    number of records of each append."""

    def __init__(self, saver, waiting, fail=False):
        self.batches = []
        self.release = threading.Event()
        self.queued = threading.Event()
        self._entered = 0
        self._mutex = threading.Lock()
        append, wait = saver._store.append_messages, saver._queue.wait

        def appending(tenant, context, raws):
            first = not self.batches
            self.batches.append(len(raws))
            if first:
                assert self.release.wait(TIMEOUT)
                if fail:
                    raise OSError("the disk is full")
            return append(tenant, context, raws)

        def waiting_for(context, ticket):
            with self._mutex:
                self._entered += 1
                if self._entered == waiting:
                    self.queued.set()
            return wait(context, ticket)

        saver._store.append_messages = appending
        saver._queue.wait = waiting_for


def _held_writes(saver, config, tasks, fail=False):
    """put_writes of each task from a thread of its own, all queued while
    the first append is held, then let go: the appends' sizes and the
    calls' errors."""
    held = _Held(saver, len(tasks), fail)
    errors = {}

    def write(task):
        try:
            saver.put_writes(config, [("messages", f"from {task}")], task)
        except OSError as e:
            errors[task] = e

    threads = [threading.Thread(target=write, args=(task,)) for task in tasks]
    for t in threads:
        t.start()
    # All queued: the first flushes (and is held), the others wait.
    assert held.queued.wait(TIMEOUT)
    held.release.set()
    for t in threads:
        t.join(TIMEOUT)
    return held.batches, errors


def _reopened_agrees(saver, where, config, expected):
    assert _pending(saver, config) == expected
    saver.close()
    with CtxlogSaver(where) as reopened:
        assert _pending(reopened, config) == expected


def test_writes_that_overlap_share_one_append(tmp_path):
    where = str(tmp_path / "store")
    saver = CtxlogSaver(where)
    config = _put(saver, "t", 0)
    batches, errors = _held_writes(saver, config, ["a", "b", "c"])
    assert not errors
    assert sorted(batches) == [1, 2]
    _reopened_agrees(saver, where, config, [(task, "messages", f"from {task}") for task in "abc"])


def test_a_failed_flush_fails_every_write_queued_behind_it(tmp_path):
    where = str(tmp_path / "store")
    saver = CtxlogSaver(where)
    config = _put(saver, "t", 0)
    saver.put_writes(config, [("messages", "before")], "z")
    batches, errors = _held_writes(saver, config, ["a", "b", "c"], fail=True)
    # The first failed, and the two queued behind it were built on it.
    assert sorted(errors) == ["a", "b", "c"]
    assert all("the disk is full" in str(e) for e in errors.values())
    assert batches == [1]
    # Nothing of them is seen, and the thread takes writes again.
    assert _pending(saver, config) == [("z", "messages", "before")]
    saver.put_writes(config, [("messages", "after")], "y")
    _reopened_agrees(saver, where, config, [("y", "messages", "after"), ("z", "messages", "before")])


def test_a_thread_written_by_another_saver_is_read_again(tmp_path):
    # Two savers on one tenant break the rule the docs give; the seqs a
    # flush gets then tell the first that its copy is wrong.
    where = str(tmp_path / "store")
    saver = CtxlogSaver(where)
    config = _put(saver, "t", 0)
    saver.put_writes(config, [("messages", "one")], "a")
    other = CtxlogSaver(saver.store)
    other.put_writes(config, [("messages", "two")], "b")
    saver.put_writes(config, [("messages", "three")], "c")
    expected = [("a", "messages", "one"), ("b", "messages", "two"), ("c", "messages", "three")]
    assert _pending(saver, config) == expected
    later = _put(saver, "t", 1)
    assert saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}).config == later
    _reopened_agrees(saver, where, config, expected)


@pytest.mark.parametrize("cache_size", [1, 1024])
def test_writes_from_many_threads_all_land(tmp_path, cache_size):
    # Eight writers over three threads of the graph (a cache of one
    # thread drops copies with writes still queued), each a put and then
    # writes to it; a reader lists meanwhile.
    where = str(tmp_path / "store")
    saver = CtxlogSaver(where, cache_size=cache_size)
    errors = []

    def writer(n):
        try:
            for step in range(20):
                config = _put(saver, f"t{(n + step) % 3}", step)
                saver.put_writes(config, [("messages", f"{n}/{step}")], f"task-{n}")
                list(saver.list(config, limit=3))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not errors

    def everything(s):
        return {thread: [(c.config, c.metadata, sorted(c.pending_writes))
                         for c in s.list({"configurable": {"thread_id": thread}})]
                for thread in ("t0", "t1", "t2")}

    seen = everything(saver)
    assert sum(len(v) for v in seen.values()) == 8 * 20
    assert sum(len(w) for v in seen.values() for _, _, w in v) == 8 * 20
    saver.close()
    with CtxlogSaver(where) as reopened:
        assert everything(reopened) == seen


# Eight threads writing to one checkpoint of one thread, each write
# acknowledged on stdout once put_writes returned.
_WRITER = """
import sys, threading
from langgraph.checkpoint.base import empty_checkpoint
from ctxlog.langgraph import CtxlogSaver

saver = CtxlogSaver(sys.argv[1])
checkpoint = empty_checkpoint()
checkpoint["id"] = "1"
config = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint, {}, {})
said = threading.Lock()

def write(n):
    for step in range(100_000):
        saver.put_writes(config, [("messages", step)], f"{n}/{step}")
        with said:
            sys.stdout.write(f"{n}/{step}\\n")
            sys.stdout.flush()

for n in range(8):
    threading.Thread(target=write, args=(n,)).start()
"""


def test_every_acknowledged_write_outlives_a_kill(tmp_path):
    # Killed once 400 writes were acknowledged, in the middle of others;
    # each acknowledged one is read back by a new process.
    where = str(tmp_path / "store")
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, where], stdout=subprocess.PIPE, text=True)
    acked = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(acked) < 400:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([writer.stdout], [], [], left)[0], "the writer stalled"
            line = writer.stdout.readline()
            assert line, "the writer died"
            acked.append(line.strip())
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=TIMEOUT)
    # What it said before it died was acknowledged too.
    acked.extend(line.strip() for line in writer.stdout.read().splitlines())
    writer.stdout.close()
    assert writer.returncode == -signal.SIGKILL
    with CtxlogSaver(where) as reopened:
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "1"}}
        stored = {task for task, _, _ in reopened.get_tuple(config).pending_writes}
    missing = [task for task in acked if task not in stored]
    assert not missing, missing[:10]
