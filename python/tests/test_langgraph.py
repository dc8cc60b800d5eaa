"""ctxlog.langgraph: LangGraph's own conformance suite for checkpointers
(every base and extended capability) and a differential test against
SqliteSaver (the example graph killed while it waits for a human:
test_examples.py)."""

import asyncio
import os
import sys
import tempfile

import sqlite3

import pytest
from hypothesis import given, settings, strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.sqlite import SqliteSaver

import ctxlog._threads
import ctxlog.langgraph
from ctxlog.langgraph import AsyncCtxlogSaver, CtxlogSaver



@pytest.mark.parametrize("saver_class", [CtxlogSaver, AsyncCtxlogSaver])
def test_the_conformance_suite_passes_every_capability(saver_class):
    @checkpointer_test(name=saver_class.__name__)
    async def ctxlog_saver():
        with tempfile.TemporaryDirectory() as where:
            saver = saver_class(where)
            yield saver
            saver.close()

    report = asyncio.run(validate(ctxlog_saver))
    failures = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert report.passed_all_base(), failures
    assert report.passed_all(), failures
    assert report.conformance_level() == "FULL", report.conformance_level()
    assert all(r.tests_passed > 0 and r.tests_failed == 0 for r in report.results.values())


THREADS = ["t1", "t2"]
NAMESPACES = ["", "child:1"]
put = st.tuples(st.just("put"), st.sampled_from(THREADS), st.sampled_from(NAMESPACES),
              st.fixed_dictionaries({"source": st.sampled_from(["input", "loop", "update"]),
                                     "step": st.integers(-1, 3),
                                     "run_id": st.sampled_from(["r1", "r2"])}),
              st.dictionaries(st.sampled_from(["messages", "count"]), st.integers(-2**63, 2**63 - 1) | st.text(max_size=5),
                              max_size=2),
              # Mostly a new id; else an id put before or, below 0, the
              # last one only writes named (if any).
              st.none() | st.none() | st.integers(-1, 5))
writes = st.tuples(st.just("writes"), st.sampled_from(THREADS), st.sampled_from(NAMESPACES), st.integers(-1, 5),
              st.lists(st.tuples(st.sampled_from(["a", "b", "__error__", "__interrupt__"]),
                                 st.integers(-2**63, 2**63 - 1) | st.text(max_size=5)), max_size=3),
              st.sampled_from(["task-1", "task-2"]), st.sampled_from(["", "~__pregel_pull, node"]))
op = st.one_of(
    put, put, put, writes, writes,
    st.tuples(st.just("get"), st.sampled_from(THREADS), st.sampled_from(NAMESPACES), st.integers(-1, 5)),
    st.tuples(st.just("list"), st.sampled_from(THREADS), st.sampled_from(NAMESPACES + [None]),
              st.one_of(st.none(), st.none(), st.just({"source": "loop"}), st.just({"step": 1}),
                        st.just({"run_id": "r2"})),
              st.one_of(st.none(), st.integers(-1, 4)), st.one_of(st.none(), st.integers(-2, 3))),
    st.tuples(st.just("delete"), st.sampled_from(THREADS)),
    st.tuples(st.just("reopen"),),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(op, min_size=20, max_size=80))
def test_every_answer_equals_sqlite_savers(tmp_path_factory, ops):
    where = tmp_path_factory.mktemp("savers")
    made: dict[tuple[str, str], list[str]] = {}
    # Ids writes were given that no put has had yet.
    unput: dict[tuple[str, str], list[str]] = {}

    def open_both():
        conn = sqlite3.connect(str(where / "sqlite.db"), check_same_thread=False)
        # One thread in memory at a time: every switch reads a thread back.
        return CtxlogSaver(where / "ctxlog", cache_size=1), SqliteSaver(conn), conn

    def config(thread, ns, cid=None):
        c = {"configurable": {"thread_id": thread}}
        if ns is not None:
            c["configurable"]["checkpoint_ns"] = ns
        if cid is not None:
            c["configurable"]["checkpoint_id"] = cid
        return c

    def pick(thread, ns, i):
        ids = made.get((thread, ns), [])
        if i < 0 or not ids:
            return str(uuid6(clock_seq=-1))  # no such checkpoint
        return ids[i % len(ids)]

    mine, theirs, conn = open_both()
    # Threads read back from a tail of one record and up, so these short
    # threads are read from their tails too.
    first_page = ctxlog.langgraph._FIRST_PAGE
    ctxlog.langgraph._FIRST_PAGE = 1
    # Bytes kept for the newest 3 (within 600 bytes), so that these short
    # threads are listed partly from memory and partly from the store.
    kept = ctxlog._threads._KEPT, ctxlog._threads._KEPT_BYTES
    ctxlog._threads._KEPT, ctxlog._threads._KEPT_BYTES = 3, 600
    try:
        for step in ops:
            name = step[0]
            if name == "put":
                _, thread, ns, metadata, values, again = step
                ids = made.setdefault((thread, ns), [])
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = values
                if again is None:
                    checkpoint["id"] = str(uuid6(clock_seq=-1))
                elif again < 0 and unput.get((thread, ns)):
                    checkpoint["id"] = unput[(thread, ns)].pop()
                else:
                    checkpoint["id"] = pick(thread, ns, again)
                parent = config(thread, ns, ids[-1] if ids else None)
                assert mine.put(parent, checkpoint, metadata, {}) == theirs.put(parent, checkpoint, metadata, {})
                if checkpoint["id"] not in ids:
                    ids.append(checkpoint["id"])
                # Bytes are kept for the newest few only.
                held = mine._threads.get(thread)
                if held is not None and ns in held.order:
                    newest = held.order[ns][-3:]
                    assert all(cid in newest for cid, c in held.checkpoints[ns].items() if c.data is not None)
            elif name == "writes":
                _, thread, ns, i, writes, task, path = step
                if not made.get((thread, ns)):
                    continue
                target = config(thread, ns, pick(thread, ns, i))
                if i < 0:
                    unput.setdefault((thread, ns), []).append(target["configurable"]["checkpoint_id"])
                mine.put_writes(target, writes, task, path)
                theirs.put_writes(target, writes, task, path)
            elif name == "get":
                _, thread, ns, i = step
                target = config(thread, ns, None if i == 5 else pick(thread, ns, i))
                assert mine.get_tuple(target) == theirs.get_tuple(target)
            elif name == "list":
                _, thread, ns, where_, before, limit = step
                before_cfg = None if before is None else config(thread, ns, pick(thread, ns or "", before))
                args = dict(filter=where_, before=before_cfg, limit=limit)
                assert list(mine.list(config(thread, ns), **args)) == list(theirs.list(config(thread, ns), **args))
            elif name == "delete":
                mine.delete_thread(step[1])
                theirs.delete_thread(step[1])
                for key in [k for k in made if k[0] == step[1]]:
                    del made[key]
                for key in [k for k in unput if k[0] == step[1]]:
                    del unput[key]
            else:
                mine.close()
                conn.close()
                mine, theirs, conn = open_both()
        for thread in THREADS:
            assert list(mine.list(config(thread, None))) == list(theirs.list(config(thread, None)))
    finally:
        ctxlog.langgraph._FIRST_PAGE = first_page
        ctxlog._threads._KEPT, ctxlog._threads._KEPT_BYTES = kept
        mine.close()
        conn.close()


def test_rewritten_writes_keep_or_replace_as_sqlite_does(tmp_path):
    """A task's second write at the same place is ignored, unless the
    batch holds only the special channels (errors, interrupts), which
    replace: SqliteSaver's rule, kept across a reopen."""
    conn = sqlite3.connect(str(tmp_path / "sqlite.db"), check_same_thread=False)
    theirs = SqliteSaver(conn)
    mine = CtxlogSaver(tmp_path / "ctxlog")
    cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for saver in (mine, theirs):
        at = saver.put(cfg, empty_checkpoint(), {"source": "loop"}, {})
        saver.put_writes(at, [("a", 1), ("__error__", "first")], "task", "")
        saver.put_writes(at, [("a", 2), ("__error__", "ignored")], "task", "")
        saver.put_writes(at, [("__interrupt__", "x"), ("__error__", "replaced")], "task", "")
    mine.close()
    mine = CtxlogSaver(tmp_path / "ctxlog")
    got = mine.get_tuple(cfg).pending_writes
    assert got == theirs.get_tuple(cfg).pending_writes
    assert ("task", "a", 1) in got and ("task", "__error__", "replaced") in got
    mine.close()
    conn.close()


def test_listing_every_thread_and_a_dotted_filter_answer_as_sqlite_saver(tmp_path):
    """`list(None)` (every thread; its sync and async forms) walks the
    store's threads in pages it accepts, however many there are, and a
    dotted filter key names a nested metadata member, as SqliteSaver
    reads it as a JSON path."""
    conn = sqlite3.connect(str(tmp_path / "sqlite.db"), check_same_thread=False)
    theirs = SqliteSaver(conn)
    mine = CtxlogSaver(tmp_path / "ctxlog")
    for saver in (mine, theirs):
        for t in range(130):
            cfg = {"configurable": {"thread_id": f"t{t}", "checkpoint_ns": ""}}
            meta = {"source": "loop", "user": {"access-level": "admin" if t % 7 == 0 else "user"}}
            saver.put(cfg, empty_checkpoint(), meta, {})
    def ids(saver, **kw):
        return sorted(c.config["configurable"]["thread_id"] for c in saver.list(None, **kw))
    assert ids(mine) == ids(theirs)
    assert len(ids(mine)) == 130
    admins = ids(mine, filter={"user.access-level": "admin"})
    assert admins == ids(theirs, filter={"user.access-level": "admin"})
    assert len(admins) == 19
    assert ids(mine, filter={"source": "loop"}) == ids(theirs, filter={"source": "loop"})

    mine.close()

    async def listed():
        saver = AsyncCtxlogSaver(tmp_path / "ctxlog")
        try:
            return [c async for c in saver.alist(None)]
        finally:
            saver.close()
    assert len(asyncio.run(listed())) == 130
    conn.close()


def test_a_thread_read_back_answers_as_before(tmp_path):
    """Read back in a new saver (headers first, checkpoints' bytes and
    writes when asked for), a thread answers exactly as it did: a header
    longer than what is read first, writes added after the read back and
    drops included."""
    saver = CtxlogSaver(tmp_path)
    cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    at = cfg
    for step in range(12):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": [f"message {i}" for i in range(step)]}
        metadata = {"source": "loop", "step": step, "note": "x" * (3000 if step == 5 else 10)}
        at = saver.put(at, checkpoint, metadata, {})
        saver.put_writes(at, [("a", step), ("b", f"value {step}")], f"task-{step % 3}", "")
    before = list(saver.list(cfg))
    saver.close()

    saver = CtxlogSaver(tmp_path)
    assert list(saver.list(cfg)) == before
    # Writes added to a checkpoint whose writes were not read yet keep
    # their order after the earlier ones.
    oldest = before[-1].config
    saver.put_writes(oldest, [("a", "late")], "task-0", "")
    got = saver.get_tuple(oldest).pending_writes
    assert got == [("task-0", "a", 0), ("task-0", "b", "value 0")]  # ("a", idx 0) kept, as SQLite keeps it
    saver.put_writes(oldest, [("c", "new")], "task-9", "")
    assert saver.get_tuple(oldest).pending_writes[-1] == ("task-9", "c", "new")
    saver.close()

    saver = CtxlogSaver(tmp_path)
    saver.prune(["t"])
    [latest] = list(saver.list(cfg))
    assert latest == before[0]
    saver.close()
    saver = CtxlogSaver(tmp_path)
    assert list(saver.list(cfg)) == [before[0]]
    assert saver.get_tuple(oldest) is None
    saver.close()


def _checkpoint(cid=None, step=0):
    checkpoint = empty_checkpoint()
    checkpoint["id"] = cid or str(uuid6(clock_seq=-1))
    checkpoint["channel_values"] = {"messages": [f"message {step}"]}
    return checkpoint


def _count_heads(saver, heads=True):
    """A list the saver's store adds each record to whose header alone it
    reads (a thread read back), from now on; or with `heads` False, each
    record it reads whole."""
    history, counted_reads = saver._store.history, []

    def counted(*args, **kwargs):
        page = history(*args, **kwargs)
        if (kwargs.get("head") is not None) == heads:
            counted_reads.extend(page)
        return page

    saver._store.history = counted
    return counted_reads


def _read_back(where, config, call=None):
    """get_tuple(config) (or `call(saver, config)`) from a new saver,
    first as its first call, then after a list of all namespaces, which
    reads the whole thread; and how many records' headers the first call
    read."""
    call = call or (lambda saver, config: saver.get_tuple(config))
    saver = CtxlogSaver(where)
    heads = _count_heads(saver)
    first = call(saver, config)
    saver.close()
    saver = CtxlogSaver(where)
    list(saver.list({"configurable": {"thread_id": config["configurable"]["thread_id"]}}))
    whole = call(saver, config)
    saver.close()
    return first, whole, len(heads)


def test_a_graphs_first_read_of_a_thread_reads_its_tail_only(tmp_path):
    """After a restart, a graph's first call (get_tuple of the latest)
    reads a few of the thread's newest records, not all of them, and
    answers as a read of the whole thread does; so do the calls after it,
    and what they write reads back the same way."""
    saver = CtxlogSaver(tmp_path)
    at = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for step in range(300):
        # As a graph does: writes to the checkpoint, and to the next one
        # before it is put.
        nxt = str(uuid6(clock_seq=-1))
        if step:
            saver.put_writes(at, [("a", step)], "task", "")
        saver.put_writes({"configurable": {**at["configurable"], "checkpoint_id": nxt}}, [("b", step)], "next", "")
        at = saver.put(at, _checkpoint(nxt, step), {"source": "loop", "step": step}, {})
    saver.close()
    latest = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    first, whole, heads = _read_back(tmp_path, latest)
    assert first == whole and first.config == at
    assert first.pending_writes == [("next", "b", 299)]
    assert heads <= 2, heads
    # A new put written from that tail, and its writes, are what the next
    # reader sees; the writer reads nothing more to write them, or to
    # answer after them.
    saver = CtxlogSaver(tmp_path)
    heads = _count_heads(saver)
    saver.get_tuple(latest)
    saver.put_writes(at, [("a", 299)], "task", "")
    at = saver.put(at, _checkpoint(step=300), {"source": "loop", "step": 300}, {})
    saver.put_writes(at, [("a", 300)], "task", "")
    assert saver.get_tuple(latest).config == at and len(heads) <= 2, len(heads)
    saver.close()
    first, whole, heads = _read_back(tmp_path, latest)
    assert first == whole and first.config == at and first.pending_writes == [("task", "a", 300)]
    assert heads <= 2, heads
    # The newest ten, from the tail too; filtered, from the tail if it
    # holds ten that match, else from the whole thread.
    def newest(filter=None):
        return lambda saver, config: list(saver.list(config, limit=10, filter=filter))
    first, whole, heads = _read_back(tmp_path, latest, newest())
    assert first == whole and [t.metadata["step"] for t in first] == list(range(300, 290, -1))
    assert heads <= 100, heads  # pages of 20 and 80
    first, whole, heads = _read_back(tmp_path, latest, lambda saver, config: [
        saver.get_tuple(config), *newest()(saver, config)])  # the tail read again, deeper
    assert first == whole and heads <= 2 + 100, heads
    first, whole, heads = _read_back(tmp_path, latest, newest({"source": "loop"}))
    assert first == whole and len(first) == 10 and heads <= 100, heads
    first, whole, heads = _read_back(tmp_path, latest, newest({"step": 7}))
    assert first == whole and [t.metadata["step"] for t in first] == [7] and heads > 900, heads
    # An older checkpoint, named, is read from the whole thread.
    old = {"configurable": {**latest["configurable"], **first[0].config["configurable"]}}
    first, whole, heads = _read_back(tmp_path, old)
    assert first == whole and first.pending_writes == [("next", "b", 7), ("task", "a", 8)]
    assert heads > 900, heads


@pytest.mark.parametrize("size, read", [(100, 0), (20_000, 9)])
def test_the_newest_small_checkpoints_are_listed_from_memory(tmp_path, size, read):
    """list(limit=10) of checkpoints of `size` bytes reads `read` of them
    from the store: none while the ten fit in the bytes kept, all but the
    newest when they do not; either way, what a reopened saver lists. The
    bytes kept stay within their bound."""
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    saver = CtxlogSaver(tmp_path)
    at = config
    for step in range(30):
        checkpoint = _checkpoint(step=step)
        checkpoint["channel_values"]["blob"] = "x" * size
        at = saver.put(at, checkpoint, {"source": "loop", "step": step}, {})
    kept = [c.data for c in saver._threads["t"].checkpoints[""].values() if c.data is not None]
    assert sum(map(len, kept)) <= size + 1024 + ctxlog._threads._KEPT_BYTES
    assert len(kept) == (10 if read == 0 else 1)
    reads = _count_heads(saver, heads=False)
    listed = list(saver.list(config, limit=10))
    assert [t.metadata["step"] for t in listed] == list(range(29, 19, -1))
    assert len(reads) == read, len(reads)
    saver.close()
    with CtxlogSaver(tmp_path) as reopened:
        assert list(reopened.list(config, limit=10)) == listed


def test_a_tail_that_cannot_answer_is_read_whole(tmp_path):
    """Each way a thread's newest records can mislead a reader of its tail
    alone answers as a read of the whole thread does, and as it should:
    writes before their checkpoint's put, an id put again, ids put out of
    order, a drop of the newest, an id named before the newest put and put
    after it from a tail, a filter's match below the tail, a copy onto a
    thread with newer checkpoints."""
    def cfg(thread, cid=None):
        c = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if cid:
            c["configurable"]["checkpoint_id"] = cid
        return c

    def pad(saver, at, n=10):  # so what came before is not in a short tail
        for step in range(n):
            saver.put_writes(at, [("pad", step)], f"pad-{step}", "")

    saver = CtxlogSaver(tmp_path)
    # Writes long before the put of their checkpoint, the newest, which
    # is put again later.
    before = saver.put(cfg("early"), _checkpoint(), {}, {})
    early = str(uuid6(clock_seq=-1))
    saver.put_writes(cfg("early", early), [("a", "early")], "task", "")
    pad(saver, before, 60)
    pad(saver, saver.put(cfg("early"), _checkpoint(early), {}, {}))
    saver.put(cfg("early"), _checkpoint(early, step=1), {}, {})
    # A checkpoint with writes, put again under a newer one.
    again = saver.put(cfg("again"), _checkpoint(step=1), {}, {})
    saver.put_writes(again, [("a", "kept")], "task", "")
    pad(saver, again)
    saver.put(cfg("again"), _checkpoint(again["configurable"]["checkpoint_id"], step=99), {}, {})
    saver.put(cfg("again"), _checkpoint(), {}, {})
    # An older id put after a newer one.
    older, newer = str(uuid6(clock_seq=-1)), str(uuid6(clock_seq=-1))
    pad(saver, saver.put(cfg("order"), _checkpoint(newer, step=2), {"step": 2}, {}))
    saver.put(cfg("order"), _checkpoint(older, step=1), {"step": 1}, {})
    # The newest dropped (its run deleted), an older id put between.
    older = str(uuid6(clock_seq=-1))
    top = saver.put(cfg("dropped"), _checkpoint(step=0), {"run_id": "r1", "step": 0}, {})
    pad(saver, top)
    newest = str(uuid6(clock_seq=-1))
    saver.put_writes(cfg("dropped", newest), [("a", 1)], "task", "")
    saver.put(cfg("dropped"), _checkpoint(older, step=1), {"run_id": "r1", "step": 1}, {})
    saver.put(cfg("dropped"), _checkpoint(newest, step=2), {"run_id": "r2", "step": 2}, {})
    saver.delete_for_runs(["r2"])
    # An id named before the newest put, and put after it by a saver that
    # read the thread's tail.
    first_put = saver.put(cfg("named"), _checkpoint(), {}, {})
    newest, named = str(uuid6(clock_seq=-1)), str(uuid6(clock_seq=-1))
    saver.put_writes(cfg("named", named), [("a", "named")], "task", "")
    pad(saver, first_put)
    saver.put(cfg("named"), _checkpoint(newest), {}, {})
    # A match for a filter far below the newest puts, none between.
    sparse = saver.put(cfg("sparse"), _checkpoint(step=0), {"pick": True}, {})
    pad(saver, sparse, 100)
    for step in (1, 2, 3):
        saver.put(cfg("sparse"), _checkpoint(step=step), {"pick": step == 3}, {})
    # A copy of an older thread onto one with newer checkpoints.
    saver.put(cfg("source"), _checkpoint(step=0), {"step": 0}, {})
    pad(saver, saver.put(cfg("target"), _checkpoint(step=1), {"step": 1}, {}))
    saver.copy_thread("source", "target")
    saver.close()
    saver = CtxlogSaver(tmp_path)
    saver.get_tuple(cfg("named"))
    saver.put(cfg("named"), _checkpoint(named), {}, {})
    saver.close()

    first, whole, _ = _read_back(tmp_path, cfg("early"))
    assert first == whole and ("task", "a", "early") in first.pending_writes
    first, whole, _ = _read_back(tmp_path, cfg("again", again["configurable"]["checkpoint_id"]))
    assert first == whole and ("task", "a", "kept") in first.pending_writes
    assert first.checkpoint["channel_values"] == {"messages": ["message 99"]}
    first, whole, _ = _read_back(tmp_path, cfg("order"))
    assert first == whole and first.metadata["step"] == 2
    first, whole, _ = _read_back(tmp_path, cfg("dropped"))
    assert first == whole and first.metadata["step"] == 0
    first, whole, _ = _read_back(tmp_path, cfg("named"))
    assert first == whole and first.pending_writes == [("task", "a", "named")]
    first, whole, _ = _read_back(tmp_path, cfg("target"))
    assert first == whole and first.metadata["step"] == 1
    first, whole, heads = _read_back(tmp_path, cfg("sparse"), lambda saver, config: list(
        saver.list(config, limit=3, filter={"pick": True})))
    assert first == whole and [t.metadata for t in first] == [{"pick": True}] * 2 and heads > 100, heads
    # And so does a listing of the newest few, as a first call.
    for thread in ["early", "again", "order", "dropped", "named", "sparse", "target"]:
        for limit in (1, 3):
            first, whole, _ = _read_back(tmp_path, cfg(thread), lambda saver, config: list(
                saver.list(config, limit=limit)))
            assert first == whole, (thread, limit)


def test_one_store_serves_tasks_sessions_and_graphs(tmp_path):
    """One open store shared by an a2a-sdk TaskStore, an Agents SDK session
    and a LangGraph checkpointer: each under its own tenant, none sees the
    others' data, and closing them leaves the store open."""
    import ctxlog
    from a2a.types.a2a_pb2 import Task, TaskState, TaskStatus
    from ctxlog.a2a import CtxlogTaskStore
    from ctxlog.agents import CtxlogSession

    from conftest import as_owner

    async def run():
        with ctxlog.Store(tmp_path) as store:
            tasks = CtxlogTaskStore(store)
            session = CtxlogSession("same-id", store)
            saver = CtxlogSaver(store)
            await tasks.save(Task(id="same-id", context_id="c",
                                  status=TaskStatus(state=TaskState.TASK_STATE_WORKING)), as_owner("alice"))
            await session.add_items([{"role": "user", "content": "hello"}])
            cfg = {"configurable": {"thread_id": "same-id", "checkpoint_ns": ""}}
            await saver.aput(cfg, empty_checkpoint(), {"source": "input", "step": -1}, {})
            assert (await tasks.get("same-id", as_owner("alice"))).status.state == TaskState.TASK_STATE_WORKING
            assert await session.get_items() == [{"role": "user", "content": "hello"}]
            assert len([t async for t in saver.alist(cfg)]) == 1
            for user in (tasks, session, saver):
                user.close()
            assert not store.closed
            tenants = {c for c in ("agents", "langgraph") if store.list_contexts(c)["contexts"]}
            assert tenants == {"agents", "langgraph"}

    asyncio.run(run())
