"""A LangGraph thread as ``ctxlog.langgraph`` keeps it in memory: what its
records, replayed in order, say it holds (checkpoints by namespace and id,
their pending writes, the run ids, the marks a tail read needs), and which
checkpoints' bytes are kept. The saver builds one per thread it reads and
applies each record it writes to it."""

from __future__ import annotations

import bisect
from typing import Any, NamedTuple

# Of the checkpoints a thread writes, the bytes kept in memory: the newest
# of each namespace's, and of the `_KEPT - 1` below it as many as fit in
# `_KEPT_BYTES` together, newest first, so that a `list(limit=10)` of
# small checkpoints reads nothing from the store. The rest are read from
# the store when asked for.
_KEPT = 10
_KEPT_BYTES = 16 * 1024


class _Checkpoint:
    __slots__ = ("parent", "type", "data", "metadata", "seq", "first")

    def __init__(self, parent: str | None, type_: str, data: bytes | None, metadata: Any, seq: int,
                 first: int) -> None:
        self.parent = parent
        self.type = type_
        # The serialized checkpoint; kept for the newest few of its
        # namespace only (`_KEPT`), the others read from the store when
        # asked for.
        self.data = data
        self.metadata = metadata
        self.seq = seq
        # The seq of the first record that named its id (of those read).
        self.first = first


# A pending write: task id, channel, type, value bytes, task path.
_Write = tuple[str, str, str, bytes, str]


class _Base(NamedTuple):
    """What a tail of a thread holds of one namespace: read back over its
    newest `count` puts, each the top when put, and the first records
    naming their ids, so it holds every live id from the oldest of them
    up, and all the records naming each of those puts' ids (`sure`) and
    every id above the oldest's `hi`: the complete ones."""

    hi: str
    sure: frozenset[str]
    count: int


class _Thread:
    """What a thread holds, as its records replayed say."""

    __slots__ = ("checkpoints", "order", "writes", "unread", "runs", "hi", "first", "whole", "base", "last")

    def __init__(self, whole: bool = True, base: dict[str, _Base] | None = None) -> None:
        # namespace -> checkpoint id -> checkpoint; and the ids, ascending.
        self.checkpoints: dict[str, dict[str, _Checkpoint]] = {}
        self.order: dict[str, list[str]] = {}
        # (namespace, checkpoint id) -> (task id, idx) -> write, once read.
        self.writes: dict[tuple[str, str], dict[tuple[str, int], _Write]] = {}
        # (namespace, checkpoint id) -> the seqs of its writes records not
        # read yet (a thread read back holds only its records' headers):
        # read, in order, when the checkpoint is first asked for.
        self.unread: dict[tuple[str, str], list[int]] = {}
        # The run ids whose checkpoints the thread holds.
        self.runs: set[str] = set()
        # namespace -> the highest checkpoint id a record of it has named;
        # (namespace, checkpoint id) -> the seq of the first record naming
        # it, for ids named but not live (writes before their put, drops).
        self.hi: dict[str, str] = {}
        self.first: dict[tuple[str, str], int] = {}
        # Built from every record of the thread; else from a tail of it,
        # holding of each namespace in `base` what that says.
        self.whole = whole
        self.base = base or {}
        # The seq of the newest record applied (queued ones included);
        # None if none was (the next one's seq is not known).
        self.last: int | None = None

    def complete(self, ns: str, cid: str) -> bool:
        """Whether every record naming checkpoint `cid` is among those
        this was built from (or added since)."""
        if self.whole:
            return True
        base = self.base.get(ns)
        return base is not None and (cid in base.sure or cid > base.hi)

    def newest(self, ns: str, limit: int | None, filter: dict[str, Any] | None,
               before: str | None = None, only: str | None = None) -> list[str] | None:
        """The ids of the `limit` (None: all) newest checkpoints of `ns`
        below `before` that match `filter` (and are `only`, if given),
        newest first, if this holds all of them and all of each (always,
        when whole); else None."""
        ids = self.order.get(ns, [])
        end = bisect.bisect_left(ids, before) if before else len(ids)
        if not filter and not only:
            # Every id matches: the newest `limit` below `before`.
            out = ids[max(end - limit, 0) if limit is not None else 0:end][::-1]
            if not self.whole and not all(self.complete(ns, cid) for cid in out):
                return None
            return out if self.whole or len(out) == limit else None
        out = []
        for i in range(end, 0, -1):
            cid = ids[i - 1]
            if len(out) == limit:
                break
            if not self.complete(ns, cid):
                # Below what the tail holds: ids it does not have may
                # come before this one.
                return None
            if only and cid != only:
                continue
            metadata = self.checkpoints[ns][cid].metadata
            if not filter or all(_metadata_at(metadata, k) == v for k, v in filter.items()):
                out.append(cid)
        return out if self.whole or len(out) == limit else None

    def latest(self, ns: str) -> str | None:
        """The highest live checkpoint id of `ns` here: the thread's, if
        this is whole or holds it complete (a complete id is at or above
        the oldest of the tail's top puts, and every live id from there
        up is here)."""
        ids = self.order.get(ns)
        return ids[-1] if ids else None

    def marks(self, ns: str, cid: str) -> dict[str, Any]:
        """The header fields of a put of `cid` in `ns` (its latest known,
        and `cid` complete)."""
        latest, hi = self.latest(ns), self.hi.get(ns)
        marks: dict[str, Any] = {"top": latest is None or cid >= latest,
                                 "hi": cid if hi is None or cid > hi else hi}
        c = self.checkpoints.get(ns, {}).get(cid)
        since = c.first if c is not None else self.first.get((ns, cid))
        if since is not None:
            marks["since"] = since
        return marks

    def name(self, seq: int, ns: str, cid: str) -> None:
        """Notes that the record of seq `seq` named `cid` of `ns`."""
        if cid not in self.checkpoints.get(ns, ()):
            self.first.setdefault((ns, cid), seq)
        hi = self.hi.get(ns)
        if hi is None or cid > hi:
            self.hi[ns] = cid

    def apply_record(self, seq: int, record: dict[str, Any], body: bytes, whole: bool = True) -> None:
        """Applies a record already parsed: its header and its bytes."""
        if self.last is None or seq > self.last:
            self.last = seq
        op = record.get("o")
        if op == "put":
            ns, cid, metadata = record["ns"], record["id"], record["metadata"]
            by_id = self.checkpoints.setdefault(ns, {})
            ids = self.order.setdefault(ns, [])
            old = by_id.get(cid)
            if old is None:
                bisect.insort(ids, cid)
                first = self.first.pop((ns, cid), seq)
            else:
                first = old.first
            by_id[cid] = _Checkpoint(record["parent"], record["type"], body if whole else None, metadata, seq, first)
            self.name(seq, ns, cid)
            hi = record.get("hi")
            if isinstance(hi, str) and hi > self.hi[ns]:
                self.hi[ns] = hi
            if ids[-1] != cid:
                by_id[cid].data = None
            if whole:  # (read back, no checkpoint holds bytes to trim)
                self.trim(by_id, ids)
            if isinstance(metadata, dict) and isinstance(metadata.get("run_id"), str):
                self.runs.add(metadata["run_id"])
        elif op == "writes":
            key = (record["ns"], record["id"])
            self.name(seq, *key)
            if not whole or key in self.unread:
                self.unread.setdefault(key, []).append(seq)
            else:
                self.apply_writes(record, body)
        elif op == "drop":
            for ns, cid in record["checkpoints"]:
                self.name(seq, ns, cid)
                c = self.checkpoints.get(ns, {}).pop(cid, None)
                if c is not None:
                    self.first.setdefault((ns, cid), c.first)
                    ids = self.order[ns]
                    del ids[bisect.bisect_left(ids, cid)]
                self.writes.pop((ns, cid), None)
                self.unread.pop((ns, cid), None)

    @staticmethod
    def trim(by_id: dict[str, _Checkpoint], ids: list[str]) -> None:
        """Keeps bytes for a namespace's newest checkpoint and for those
        of the `_KEPT - 1` below it that fit in `_KEPT_BYTES`, newest
        first. A put moves an id by one place at most, so the one just
        past the `_KEPT` newest is the only one beyond them that can hold
        bytes."""
        if len(ids) > _KEPT:
            by_id[ids[-_KEPT - 1]].data = None
        left = _KEPT_BYTES
        for cid in reversed(ids[-_KEPT:-1]):
            c = by_id[cid]
            if c.data is not None:
                left -= len(c.data)
                if left < 0:
                    c.data = None

    def apply_writes(self, record: dict[str, Any], body: bytes) -> None:
        stored = self.writes.setdefault((record["ns"], record["id"]), {})
        replace = record["replace"]
        at = 0
        for idx, channel, type_, size in record["writes"]:
            key = (record["task"], idx)
            value, at = body[at:at + size], at + size
            if key in stored and not replace:
                continue
            stored[key] = (record["task"], channel, type_, value, record["path"])


_MISSING = object()


def _metadata_at(metadata: dict[str, Any], key: str) -> Any:
    """The value a metadata filter's `key` names: the member of that name,
    or, if there is none, the nested member its dotted path names
    (`"user.access-level"` is `metadata["user"]["access-level"]`), as
    SqliteSaver reads a filter key as a JSON path. `None` if neither is
    there (a filter for `None` then matches, as a missing JSON member
    compares equal to null in SqliteSaver)."""
    if key in metadata:
        return metadata[key]
    value: Any = metadata
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part, _MISSING)
        if value is _MISSING:
            return None
    return value
