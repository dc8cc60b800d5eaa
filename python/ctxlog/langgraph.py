"""``CtxlogSaver`` and ``AsyncCtxlogSaver``: LangGraph checkpointers on ctxlog.

A graph keeps its steps in ctxlog instead of SQLite by changing its
checkpointer::

    from ctxlog.langgraph import CtxlogSaver

    with CtxlogSaver("agent-data") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "thread-1"}})

What is stored where: a thread is a ctxlog context (its id the thread id)
of the tenant ``tenant`` (``"langgraph"`` by default). Every change is one
message of it, a JSON object, durable before the call returns: ``put`` a
checkpoint (its namespace, id, parent, the checkpoint as the serializer
gives it, its metadata), ``put_writes`` a task's writes, ``delete_for_runs``
and ``prune`` a record of the checkpoints they remove. ``delete_thread``
empties the context (``Store.empty_context``): the thread id stays
usable. ``copy_thread`` appends the source's live records to the target
with one sync. Which threads a run wrote to is kept under the tenant
``tenant + "\\0runs"``, one context per run id, so ``delete_for_runs`` reads
only those threads.

A thread is read from the store once, on its first use in a process, and
then kept in memory (the most recently used ``cache_size`` threads), so
``get_tuple`` and ``list`` never read the store again: ``list(limit=10)``
costs the same on a thread of 10 or 10,000 checkpoints. Writes to a thread
take turns under a lock per thread: each builds its record from the thread
in memory, applies it there, queues it and lets the lock go, then waits
until it is durable; whoever flushes first appends every record queued for
the thread with one sync, so writes that overlap (LangGraph makes them from
several threads at once) share it. A read flushes first, so it sees nothing
that is not on disk (``ctxlog._queue`` says how a failed flush is undone).

A graph's first call on a thread is ``get_tuple`` of its latest checkpoint,
then writes; ``get_state_history`` lists the newest few: for those, only
the thread's newest records are read (its tail, read backwards over the
namespace's newest ``put`` or few), not all of them.
Each ``put`` header says what that takes: whether its id is the highest
live one (``top``), where the first record naming its id is (``since``,
when writes for it came before it), and the highest id the namespace's
records have named (``hi``: a higher id was first named after this put).
A tail from a top put's ``since`` holds all of that checkpoint, and of
every one of a higher id than its ``hi``, and so the latest; a tail over
the newest n top puts holds the newest n. Anything else (``list`` with
``before``, no namespace or no limit, an older checkpoint, a record
written before these fields) reads the whole thread.

The serializer is LangGraph's own (``JsonPlusSerializer``, or the one
passed in), so whatever a graph can checkpoint round-trips. Metadata is
kept as JSON, as ``SqliteSaver`` keeps it.
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    SerializerProtocol,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

from . import ContextNotFound, Store
from ._queue import DONE, Ticket, WriteQueue
from ._threads import _Base, _Thread, _Write
from ._workers import StoreUser

__all__ = ["CtxlogSaver", "AsyncCtxlogSaver"]

_STRIPES = 64
# The records read by the first page when a thread's tail is read
# backwards, for each put wanted: a graph writes about two records a
# checkpoint (its put, right after the writes naming it first). Each page
# after reads four times as many as the one before it, up to `_MAX_PAGE`.
_FIRST_PAGE = 2
_MAX_PAGE = 1024
# The fields of a put's header that say what a tail of the thread holds.
_MARKS = ("top", "hi", "since")
# The bytes of each record read when a thread is read back: its header
# (the bytes after it are read when asked for).
_HEAD = 1024
def _copy(value: Any) -> Any:
    """A deep copy of a value JSON gave (dicts, lists and scalars): a
    fifth of what a JSON round trip costs."""
    if type(value) is dict:
        return {k: _copy(v) if type(v) in _NESTED else v for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) if type(v) in _NESTED else v for v in value]
    return value


_NESTED = (dict, list)


# A record as it is built: its header and the bytes after it.
_Record = tuple[dict[str, Any], bytes]


def _dump(record: _Record) -> bytes:
    head, body = record
    return json.dumps(head, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" + body


def _put_record(ns: str, cid: str, parent: str | None, type_: str, data: bytes, metadata: Any) -> _Record:
    return {"o": "put", "ns": ns, "id": cid, "parent": parent, "type": type_, "metadata": metadata}, data


def _drop_record(gone: list[list[str]]) -> _Record:
    return {"o": "drop", "checkpoints": gone}, b""


def _writes_record(ns: str, cid: str, task: str, path: str, replace: bool,
                   writes: list[tuple[int, str, str, bytes]]) -> _Record:
    head = {"o": "writes", "ns": ns, "id": cid, "task": task, "path": path, "replace": replace,
            "writes": [[idx, channel, type_, len(data)] for idx, channel, type_, data in writes]}
    return head, b"".join(data for _, _, _, data in writes)


class CtxlogSaver(BaseCheckpointSaver[str], StoreUser):
    """A LangGraph checkpointer on a ctxlog store, with every capability:
    ``put``, ``put_writes``, ``get_tuple``, ``list``, ``delete_thread``,
    ``delete_for_runs``, ``copy_thread``, ``prune``, each also async
    (``a``-prefixed; run on worker threads, never on the event loop).

    Args:
        store: the store's directory (opened here, and closed by
            :meth:`close`), or an open :class:`ctxlog.Store` (left open).
        serde: the serializer (LangGraph's ``JsonPlusSerializer`` by default).
        tenant: the ctxlog tenant the threads are kept under; this saver
            must be its only writer (another saver on the store needs
            another tenant), since it keeps the threads in memory.
        durability: for a directory: ``"sync"`` (default: every change is
            on disk before the call returns), ``"group"`` or ``"buffered"``.
        cache_size: how many threads are kept in memory once read (each
            with its index and, of each namespace, the newest
            checkpoint's bytes and up to 16 KiB of the nine below it).
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store,
        *,
        serde: SerializerProtocol | None = None,
        tenant: str = "langgraph",
        durability: str = "sync",
        cache_size: int = 1024,
    ) -> None:
        super().__init__(serde=serde)
        if cache_size < 1:
            raise ValueError("cache_size must be at least 1")
        StoreUser.__init__(self, store, durability, 8, "ctxlog-langgraph")
        self._tenant = tenant
        self._runs_tenant = tenant + "\0runs"
        self._cache_size = cache_size
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._stripes = [threading.RLock() for _ in range(_STRIPES)]
        self._queue = WriteQueue(self._store, tenant, _STRIPES, self._stripe, self._drop)

    def __enter__(self) -> CtxlogSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> CtxlogSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # Threads in memory.

    @staticmethod
    def _stripe(thread_id: str) -> int:
        return hash(thread_id) % _STRIPES

    def _lock(self, thread_id: str) -> threading.RLock:
        return self._stripes[self._stripe(thread_id)]

    def _drop(self, thread_id: str) -> None:
        """Forgets the thread's copy in memory: the next use reads it."""
        with self._cache_lock:
            self._threads.pop(thread_id, None)

    def _cached(self, thread_id: str, thread: _Thread) -> bool:
        with self._cache_lock:
            return self._threads.get(thread_id) is thread

    def _thread(self, thread_id: str, ns: str | None = None, count: int = 1) -> _Thread:
        """The thread, read from the store on first use (the caller holds
        its lock): whole, or with `ns` given, perhaps only a tail of it
        back over that namespace's newest `count` puts (see `_tail`)."""
        with self._cache_lock:
            cached = self._threads.get(thread_id)
            if cached is not None:
                self._threads.move_to_end(thread_id)
                if cached.whole or (ns is not None and ns in cached.base and cached.base[ns].count >= count):
                    return cached
        # What is queued is read back with the rest.
        self._queue.flush(thread_id)
        thread = None
        if ns is not None:
            wanted = {n: b.count for n, b in cached.base.items()} if cached else {}
            wanted[ns] = max(count, wanted.get(ns, 1))
            thread = self._tail(thread_id, wanted)
        if thread is None:
            thread = _Thread()
            for seq, record in self._heads(thread_id, None, None):
                thread.apply_record(seq, record, b"", whole=False)
        with self._cache_lock:
            self._threads[thread_id] = thread
            while len(self._threads) > self._cache_size:
                self._threads.popitem(last=False)
        return thread

    def _known(self, thread_id: str, ns: str, cid: str | None) -> tuple[_Thread, str | None]:
        """The thread, holding all of checkpoint `cid` of `ns` or (None)
        of its latest, and that checkpoint's id (None if it has none):
        from the thread's tail if that holds it, else whole (the caller
        holds the thread's lock)."""
        thread = self._thread(thread_id, ns)
        found = cid or thread.latest(ns)
        if not thread.whole and (found is None or not thread.complete(ns, found)):
            thread = self._thread(thread_id)
            found = cid or thread.latest(ns)
        return thread, found

    def _heads(self, thread_id: str, n: int | None, before: int | None) -> list[tuple[int, dict[str, Any]]]:
        """The headers of the thread's last `n` records before seq
        `before` (all with None), oldest first."""
        try:
            page = self._store.history(self._tenant, thread_id, n, before=before, head=_HEAD)
        except ContextNotFound:
            return []
        out = []
        for seq, _, head in page:
            if b"\n" not in head:  # a header longer than what was read
                head = self._record(thread_id, seq)
            out.append((seq, json.loads(head.partition(b"\n")[0])))
        return out

    def _tail(self, thread_id: str, wanted: dict[str, int]) -> _Thread | None:
        """The thread built from its newest records back over the newest
        `wanted[ns]` puts of each namespace `ns` and the first record
        naming each of their checkpoints (their `since`), if each such put
        was the top; None if one was not (or says nothing: written before
        these fields), since then the tail cannot know the latest: the
        caller reads the whole thread instead."""
        pages: list[list[tuple[int, dict[str, Any]]]] = []
        tops: dict[str, list[tuple[str, str]]] = {ns: [] for ns in wanted}
        left, floor, before = dict(wanted), None, None
        n = min(_FIRST_PAGE * max(wanted.values()), _MAX_PAGE)
        while True:
            page = self._heads(thread_id, n, before)
            for seq, record in reversed(page):
                ns = record.get("ns")
                if record.get("o") == "put" and ns in left:
                    since, hi = record.get("since", seq), record.get("hi")
                    if record.get("top") is not True or not isinstance(hi, str) or not isinstance(since, int):
                        return None
                    tops[ns].append((record["id"], hi))
                    left[ns] -= 1
                    if not left[ns]:
                        del left[ns]
                    floor = since if floor is None else min(floor, since)
            pages.append(page)
            if len(page) < n:
                # The thread's start: all of it is here.
                thread = _Thread()
                break
            before, n = page[0][0], min(4 * n, _MAX_PAGE)
            if not left and floor is not None and before <= floor:
                thread = _Thread(False, {ns: _Base(found[-1][1], frozenset(c for c, _ in found), len(found))
                                         for ns, found in tops.items()})
                break
        for page in reversed(pages):
            for seq, record in page:
                thread.apply_record(seq, record, b"", whole=False)
        return thread

    def _append(self, thread_id: str, thread: _Thread, records: list[_Record]) -> None:
        """Stores `records` durably, after what is queued, then applies
        them as built (the caller holds the thread's lock)."""
        if not records:
            return
        self._queue.flush(thread_id)
        appended = self._store.append_messages(self._tenant, thread_id, [_dump(r) for r in records])
        for (seq, _), (head, body) in zip(appended, records):
            thread.apply_record(seq, head, body)

    def _write(self, thread_id: str, build: Callable[[], tuple[_Thread, _Record]]) -> None:
        """Stores the record `build` makes (under the thread's lock, from
        the thread it returns), durably: queued, and waited for once the
        lock is let go (see `_enqueue`); built again and appended at once
        if the queue refused it."""
        with self._lock(thread_id):
            ticket = self._enqueue(thread_id, *build())
            if ticket is None:
                thread, record = build()
                self._append(thread_id, thread, [record])
                ticket = DONE
        self._queue.wait(thread_id, ticket)

    def _enqueue(self, thread_id: str, thread: _Thread, record: _Record) -> Ticket | None:
        """Queues `record` and applies it with the seq it will get (the
        caller holds the thread's lock); or, when that seq is not known,
        stores it now (the ticket is done). None if the queue refused it:
        `thread` is no longer the copy in memory."""
        if thread.last is None:
            self._append(thread_id, thread, [record])
            return DONE
        seq = thread.last + 1
        ticket = self._queue.put(thread_id, _dump(record), seq, lambda: self._cached(thread_id, thread))
        if ticket is not None:
            thread.apply_record(seq, *record)
        return ticket

    def _note_runs(self, thread_id: str, thread: _Thread, run_ids: set[str]) -> None:
        """Lists the thread under each run it has no checkpoint of yet
        (the caller holds its lock), before the records that give it one:
        a run listed with no checkpoint of it is harmless, the other way
        round is not."""
        for run_id in sorted(run_ids - thread.runs):
            self._store.append_message(self._runs_tenant, run_id, thread_id)

    def _record(self, thread_id: str, seq: int) -> bytes:
        """The whole record of seq `seq` (the caller holds the thread's
        lock, so it cannot be taken out meanwhile)."""
        [(found, _, raw)] = self._store.history(self._tenant, thread_id, 1, seq + 1)
        if found != seq:
            raise RuntimeError(f"the record of seq {seq} of thread {thread_id!r} is gone")
        return raw

    def _entry(self, thread_id: str, thread: _Thread, ns: str, cid: str) -> tuple[Any, ...]:
        """What a tuple of the checkpoint is made of (the caller holds the
        thread's lock): its bytes kept, or read from its record, and its
        writes, read first if they were not."""
        c = thread.checkpoints[ns][cid]
        data = c.data
        if data is None:
            data = self._record(thread_id, c.seq).partition(b"\n")[2]
        key = (ns, cid)
        if key in thread.unread:
            for seq in thread.unread.pop(key):
                head, _, body = self._record(thread_id, seq).partition(b"\n")
                thread.apply_writes(json.loads(head), body)
        writes: list[_Write] = []
        stored = thread.writes.get(key)
        if stored:
            ordered = sorted(stored.items(), key=lambda kv: writes_sort_key(kv[1][4], kv[0][0], kv[0][1]))
            writes = [w for _, w in ordered]
        return thread_id, ns, cid, c.parent, c.type, data, c.metadata, writes

    # The sync interface.

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id = str(config["configurable"]["thread_id"])
        ns = config["configurable"].get("checkpoint_ns", "")
        with self._lock(thread_id):
            self._queue.flush(thread_id)
            thread, cid = self._known(thread_id, ns, get_checkpoint_id(config))
            if cid is None or cid not in thread.checkpoints.get(ns, {}):
                return None
            entry = self._entry(thread_id, thread, ns, cid)
        return self._tuple(*entry)

    def _tuple(self, thread_id: str, ns: str, cid: str, parent_id: str | None, type_: str, data: bytes,
               metadata: Any, writes: list[_Write]) -> CheckpointTuple:
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}
        parent = ({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}}
                  if parent_id else None)
        return CheckpointTuple(
            config,  # type: ignore[arg-type]
            self.serde.loads_typed((type_, data)),
            _copy(metadata),  # a copy the caller may change
            parent,  # type: ignore[arg-type]
            [(task, channel, self.serde.loads_typed((t, value))) for task, channel, t, value, _ in writes],
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by id), of one thread (and namespace,
        if the config names one), or of every thread for ``None``."""
        if config is not None:
            thread_ids = [str(config["configurable"]["thread_id"])]
            ns_wanted = config["configurable"].get("checkpoint_ns")
            cid_wanted = get_checkpoint_id(config)
        else:
            thread_ids, ns_wanted, cid_wanted = self._all_threads(), None, None
        if limit is not None and limit < 0:
            limit = None  # as SqliteSaver (SQLite's LIMIT -1): no limit
        before_id = get_checkpoint_id(before) if before else None
        found: list[tuple[Any, ...]] = []
        for thread_id in thread_ids:
            with self._lock(thread_id):
                self._queue.flush(thread_id)
                if (ns_wanted is not None and limit is not None and 0 < limit <= _MAX_PAGE
                        and not before_id and not cid_wanted):
                    # The newest few of one namespace: from the thread's
                    # tail, if that holds them.
                    thread = self._thread(thread_id, ns_wanted, limit)
                    newest = thread.newest(ns_wanted, limit, filter)
                    if newest is not None:
                        found.extend(self._entry(thread_id, thread, ns_wanted, cid) for cid in newest)
                        continue
                thread = self._thread(thread_id)
                # Newest first across the namespaces asked for (whole, so
                # `newest` has every answer).
                candidates = [(cid, ns) for ns in thread.order if ns_wanted in (None, ns)
                              for cid in thread.newest(ns, limit, filter, before_id, cid_wanted) or ()]
                candidates.sort(reverse=True)
                if limit is not None:
                    candidates = candidates[:limit]
                found.extend(self._entry(thread_id, thread, ns, cid) for cid, ns in candidates)
        if config is None:
            found.sort(key=lambda f: f[2], reverse=True)
        if limit is not None:
            found = found[:limit]
        for entry in found:
            yield self._tuple(*entry)

    def _all_threads(self) -> list[str]:
        ids, token = [], None
        while True:
            # The engine's largest page (100): a larger one is refused.
            page = self._store.list_contexts(self._tenant, 100, token)
            ids.extend(c["contextId"] for c in page["contexts"])
            token = page["nextPageToken"]
            if not token:
                return ids

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id = str(config["configurable"]["thread_id"])
        ns = config["configurable"].get("checkpoint_ns", "")
        type_, data = self.serde.dumps_typed(checkpoint)
        meta = json.loads(json.dumps(get_checkpoint_metadata(config, metadata), ensure_ascii=False))
        head, _ = _put_record(ns, checkpoint["id"], config["configurable"].get("checkpoint_id"), type_, data, meta)
        run_id = meta.get("run_id") if isinstance(meta, dict) else None

        def build() -> tuple[_Thread, _Record]:
            thread, _ = self._known(thread_id, ns, None)
            if not thread.complete(ns, checkpoint["id"]):
                thread = self._thread(thread_id)
            if isinstance(run_id, str):
                self._note_runs(thread_id, thread, {run_id})
            return thread, ({**head, **thread.marks(ns, checkpoint["id"])}, data)

        self._write(thread_id, build)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if not writes:
            return
        thread_id = str(config["configurable"]["thread_id"])
        ns = config["configurable"].get("checkpoint_ns", "")
        cid = config["configurable"]["checkpoint_id"]
        # As SqliteSaver: writes to the special channels only replace what
        # the task wrote before; any other batch keeps what is there.
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        encoded = [(WRITES_IDX_MAP.get(channel, idx), channel, *self.serde.dumps_typed(value))
                   for idx, (channel, value) in enumerate(writes)]
        record = _writes_record(ns, cid, task_id, task_path, replace, encoded)
        self._write(thread_id, lambda: (self._thread(thread_id, ns), record))

    def delete_thread(self, thread_id: str) -> None:
        thread_id = str(thread_id)
        with self._lock(thread_id):
            self._queue.flush(thread_id)
            try:
                self._store.empty_context(self._tenant, thread_id)
            except ContextNotFound:
                pass
            with self._cache_lock:
                self._threads[thread_id] = _Thread()

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = set(run_ids)
        threads: set[str] = set()
        for run_id in wanted:
            try:
                threads.update(raw.decode() for _, _, raw in self._store.history(self._runs_tenant, run_id))
            except ContextNotFound:
                pass
        for thread_id in sorted(threads):
            with self._lock(thread_id):
                thread = self._thread(thread_id)
                gone = [[ns, cid] for ns, by_id in thread.checkpoints.items() for cid, c in by_id.items()
                        if c.metadata.get("run_id") in wanted]
                if gone:
                    self._append(thread_id, thread, [_drop_record(gone)])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """The target thread gets the source's records, as they are, in
        order (one sync): replayed, they give it what the source holds."""
        source, target = str(source_thread_id), str(target_thread_id)
        if source == target:
            return
        with self._lock(source):
            self._queue.flush(source)
            try:
                raws = [raw.partition(b"\n") for _, _, raw in self._store.history(self._tenant, source)]
                # What a put's marks say of the source is not true of the
                # target: dropped, so a read of the target's tail reads it
                # whole until its next put.
                records = [({k: v for k, v in json.loads(head).items() if k not in _MARKS}, body)
                           for head, _, body in raws]
            except ContextNotFound:
                return
            runs = self._thread(source).runs
        with self._lock(target):
            thread = self._thread(target)
            self._note_runs(target, thread, runs)
            self._append(target, thread, records)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            thread_id = str(thread_id)
            with self._lock(thread_id):
                thread = self._thread(thread_id)
                gone = [[ns, cid] for ns, ids in thread.order.items() for cid in ids[:-1]]
                if gone:
                    self._append(thread_id, thread, [_drop_record(gone)])

    def get_next_version(self, current: str | None, channel: None) -> str:
        """As SqliteSaver: a zero-padded counter and a random tail."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # The async interface: the same calls on worker threads.

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._workers.run(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await self._workers.run(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for tup in found:
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._workers.run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._workers.run(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._workers.run(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._workers.run(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._workers.run(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._workers.run(lambda: self.prune(thread_ids, strategy=strategy))


class AsyncCtxlogSaver(CtxlogSaver):
    """The checkpointer for async graphs (``ainvoke``, ``astream``): the
    same as :class:`CtxlogSaver`, whose async methods already run the
    store's calls on worker threads. Named as LangGraph names its savers
    (``SqliteSaver``, ``AsyncSqliteSaver``), so either import works."""
