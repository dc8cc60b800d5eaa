"""``CtxlogTaskStore``: a2a-sdk's ``TaskStore`` on ctxlog.

An a2a-sdk server changes one argument::

    from ctxlog.a2a import CtxlogTaskStore

    handler = DefaultRequestHandler(
        agent_executor=MyExecutor(),
        task_store=CtxlogTaskStore("agent-data"),
        agent_card=card,
    )

What is stored where: the owner of a task (resolved from the request's
``ServerCallContext`` as a2a-sdk's own stores do: the authenticated user's
name by default) is the ctxlog tenant, so owners never see each other's
tasks. Each task is a ctxlog context named ``a2a-sdk-task:<task id>``, and
each ``save`` appends one record to it, durably: only what changed since
the task as last saved (the messages added to its history, a new status,
the artifacts added or changed, its metadata), as JSON in the A2A form. A
save that changes nothing appends nothing, so a save costs the size of its
change, not of the task. ``get`` replays a task's records (once; then it is
served from a bounded cache of recently used tasks), ``delete`` appends a
record that ends the task (a later ``save`` of the same id starts it
afresh). The directory is an ordinary ctxlog store: ``ctxlog --tenant
OWNER contexts`` lists the tasks and ``ctxlog --tenant OWNER history
a2a-sdk-task:ID`` shows a task's records.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
from a2a.server.tasks.task_store import TaskStore
from a2a.types import a2a_pb2
from a2a.types.a2a_pb2 import Task
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import (
    ListTasksCursor,
    decode_list_tasks_cursor,
    decode_page_token,
    encode_list_tasks_cursor,
)

from . import ContextNotFound, Error, Store
from ._workers import Cache, StoreUser, dumps

from ._push import CtxlogPushNotificationConfigStore, DISPATCH_TENANT, PUSH_CONTEXT_PREFIX

__all__ = [
    "CtxlogTaskStore",
    "CONTEXT_PREFIX",
    "CtxlogPushNotificationConfigStore",
    "PUSH_CONTEXT_PREFIX",
    "DISPATCH_TENANT",
]

#: The ctxlog context of task ``ID`` is ``CONTEXT_PREFIX + ID``.
CONTEXT_PREFIX = "a2a-sdk-task:"

#: The version of the save records' form; a record names it under ``FORMAT_KEY``.
FORMAT = 1
FORMAT_KEY = "ctxlogTaskStore"

# The fields of a Task a save record carries apart; every other field (the
# id and contextId, and any the protocol adds) travels as one object.
_APART = ("history", "artifacts", "status", "metadata")


# Messages whose JSON form is their own (a string, a number, a bare
# value): protobuf's JSON printer writes them.
_WELL_KNOWN = frozenset(
    "google.protobuf." + n
    for n in ("Any", "Duration", "Empty", "FieldMask", "ListValue", "Struct", "Timestamp", "Value")
)
# Scalar types whose JSON form is the Python value itself (64-bit integers
# are strings in JSON, floats have NaN and infinities, bytes are base64:
# those go to protobuf's printer).
_PLAIN = frozenset(
    (
        FieldDescriptor.TYPE_STRING,
        FieldDescriptor.TYPE_BOOL,
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_SFIXED32,
    )
)


def _dump(message: Any) -> dict[str, Any]:
    """``json_format.MessageToDict(message)``, the same dict, written here
    for the fields A2A messages have (strings, enums, nested messages) and
    left to protobuf's pure-Python printer for the rest: a save encodes its
    new messages, and the printer alone took a fifth of a save's time."""
    if message.DESCRIPTOR.full_name in _WELL_KNOWN:
        return json_format.MessageToDict(message)
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        kind = field.type
        if field.is_extension:
            return json_format.MessageToDict(message)
        if kind == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                return json_format.MessageToDict(message)
            out[field.json_name] = [_dump(v) for v in value] if field.is_repeated else _dump(value)
        elif kind == FieldDescriptor.TYPE_ENUM:
            names = field.enum_type.values_by_number
            numbers = value if field.is_repeated else [value]
            if any(n not in names for n in numbers):
                return json_format.MessageToDict(message)
            named = [names[n].name for n in numbers]
            out[field.json_name] = named if field.is_repeated else named[0]
        elif kind in _PLAIN:
            out[field.json_name] = list(value) if field.is_repeated else value
        else:
            return json_format.MessageToDict(message)
    return out


def _rest(task: Task) -> Task:
    """The task without the fields a record carries apart (built field by
    field, so that its history is not copied)."""
    rest = Task()
    for field, value in task.ListFields():
        if field.name in _APART:
            continue
        if field.message_type is None:
            if field.is_repeated:
                getattr(rest, field.name).extend(value)
            else:
                setattr(rest, field.name, value)
        elif field.is_repeated:
            getattr(rest, field.name).extend(value)
        else:
            getattr(rest, field.name).CopyFrom(value)
    return rest


def _differs(new: Task, old: Task, field: str) -> bool:
    return new.HasField(field) != old.HasField(field) or getattr(new, field) != getattr(old, field)


def _common_prefix(old: Any, new: Any) -> int:
    """How many leading elements two repeated fields share."""
    n = min(len(old), len(new))
    for i in range(n):
        if old[i] != new[i]:
            return i
    return n


def _kept_history(old: Any, new: Any, check: bool) -> int:
    """How many leading messages of the old history the new one keeps.

    Unless ``check``, a history is taken to grow at its end only, as
    a2a-sdk's task manager writes it: when the new one is at least as long
    and ends the old part with the same message, the old part is taken as
    kept without comparing every message (which would make a save cost the
    task's length). Otherwise, and with ``check``, messages are compared
    from the start."""
    if not check and len(new) >= len(old) and (not old or new[len(old) - 1] == old[-1]):
        return len(old)
    return _common_prefix(old, new)


def _delta(old: Task | None, new: Task, check_history: bool = True) -> dict[str, Any] | None:
    """The record that turns ``old`` (``None``: no task) into ``new``, or
    ``None`` when they are equal."""
    record: dict[str, Any] = {}
    if old is None:
        record["new"] = True
        old = Task()
    rest = _rest(new)
    if "new" in record or rest != _rest(old):
        record["task"] = _dump(rest)
    for field in ("status", "metadata"):
        if _differs(new, old, field):
            record[field] = _dump(getattr(new, field)) if new.HasField(field) else None
    keep = _kept_history(old.history, new.history, check_history)
    if keep != len(old.history) or keep != len(new.history):
        record["history"] = {"from": keep, "add": [_dump(m) for m in new.history[keep:]]}
    changed = {
        str(i): _dump(a)
        for i, a in enumerate(new.artifacts)
        if i >= len(old.artifacts) or a != old.artifacts[i]
    }
    if changed or len(new.artifacts) != len(old.artifacts):
        record["artifacts"] = {"len": len(new.artifacts), "set": changed}
    return record or None


def _set_message(task: Task, field: str, value: dict[str, Any] | None) -> None:
    task.ClearField(field)
    if value is not None:
        getattr(task, field).SetInParent()
        json_format.ParseDict(value, getattr(task, field))


def _apply(state: Task | None, record: dict[str, Any]) -> Task | None:
    """The task after one record (``state`` is changed in place)."""
    version = record.get(FORMAT_KEY)
    if version != FORMAT:
        raise Error(f"a task record of form {version!r}; this ctxlog reads form {FORMAT}")
    if record.get("deleted"):
        return None
    task = Task() if state is None or record.get("new") else state
    if "task" in record:
        for field in Task.DESCRIPTOR.fields:
            if field.name not in _APART:
                task.ClearField(field.name)
        json_format.ParseDict(record["task"], task)
    for field in ("status", "metadata"):
        if field in record:
            _set_message(task, field, record[field])
    if "history" in record:
        history = record["history"]
        del task.history[history["from"] :]
        for message in history["add"]:
            json_format.ParseDict(message, task.history.add())
    if "artifacts" in record:
        artifacts = record["artifacts"]
        del task.artifacts[artifacts["len"] :]
        while len(task.artifacts) < artifacts["len"]:
            task.artifacts.add()
        for i, artifact in artifacts["set"].items():
            task.artifacts[int(i)].Clear()
            json_format.ParseDict(artifact, task.artifacts[int(i)])
    return task


def _update(old: Task, new: Task, record: dict[str, Any]) -> None:
    """Makes the cached ``old`` equal to ``new`` by the parts ``record`` (its
    delta) says changed: what the diff found is not compared again, and
    the kept messages and artifacts are not copied."""
    if "history" in record:
        keep = record["history"]["from"]
        del old.history[keep:]
        old.history.extend(new.history[keep:])
    if "artifacts" in record:
        del old.artifacts[len(new.artifacts) :]
        for i in sorted(int(i) for i in record["artifacts"]["set"]):
            if i < len(old.artifacts):
                old.artifacts[i].CopyFrom(new.artifacts[i])
            else:
                old.artifacts.add().CopyFrom(new.artifacts[i])
    for field in ("status", "metadata"):
        if field in record:
            if new.HasField(field):
                getattr(old, field).CopyFrom(getattr(new, field))
            else:
                old.ClearField(field)
    if "task" in record:
        for field in Task.DESCRIPTOR.fields:
            if field.name not in _APART:
                old.ClearField(field.name)
        old.MergeFrom(_rest(new))


def _sort_key(task: Task) -> tuple[bool, int, str]:
    """a2a-sdk's ``ListTasks`` order key: (has timestamp, timestamp, id), descending."""
    has = task.HasField("status") and task.status.HasField("timestamp")
    return (has, task.status.timestamp.ToNanoseconds() if has else 0, task.id)


class _Summary:
    """What a listing needs of a task without reading it."""

    __slots__ = ("context_id", "state", "key")

    def __init__(self, task: Task) -> None:
        self.context_id = task.context_id
        self.state = task.status.state
        self.key = _sort_key(task)


class _Listing:
    """An owner's tasks by id, with their summaries; complete once read
    from the store."""

    __slots__ = ("tasks", "complete")

    def __init__(self) -> None:
        self.tasks: dict[str, _Summary] = {}
        self.complete = False


class CtxlogTaskStore(TaskStore, StoreUser):
    """a2a-sdk's ``TaskStore`` on a ctxlog store.

    Args:
        store: the store's directory (opened here, and closed by
            :meth:`close`), or an open :class:`ctxlog.Store` the agent
            shares (left open).
        owner_resolver: who owns a task, from the request's context (the
            ctxlog tenant); a2a-sdk's default: the authenticated user's name.
        durability: for a directory: ``"sync"`` (default: each save is on
            disk before it returns, one fdatasync), ``"group"`` or
            ``"buffered"``.
        cache_size: how many recently used tasks are kept in memory, so
            that a save finds the task it changes without reading it back.
        check_history: compare every message of a task's history at each
            save, for agents that edit earlier messages in place. Off by
            default: a history is taken to grow at its end, as a2a-sdk
            writes it (one that shrank, or whose last saved message
            changed, is still compared from the start), so that a save
            costs its change and not the task's length.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store,
        owner_resolver: OwnerResolver = resolve_user_scope,
        *,
        durability: str = "sync",
        cache_size: int = 1024,
        check_history: bool = False,
    ) -> None:
        StoreUser.__init__(self, store, durability, 8, "ctxlog-task-store")
        self._cache = Cache(cache_size)
        self._owner_resolver = owner_resolver
        self._check_history = check_history
        self._lock = threading.Lock()  # the listings
        # Per owner, once listed: every task's summary, kept up to date.
        self._listed: dict[str, _Listing] = {}
        self._building = threading.Lock()

    # TaskStore.

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Saves the task: appends what changed since it was last saved."""
        owner = self._owner_resolver(context)
        await self._workers.run(self.save_sync, owner, task)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task as last saved, or ``None``."""
        owner = self._owner_resolver(context)
        return await self._workers.run(self.get_sync, owner, task_id)

    async def list(
        self, params: a2a_pb2.ListTasksRequest, context: ServerCallContext
    ) -> a2a_pb2.ListTasksResponse:
        """The owner's tasks, as a2a-sdk lists them: filtered by context,
        state and status time; newest status first (then by id); a page of
        ``page_size`` (default 50) after the ``page_token``."""
        owner = self._owner_resolver(context)
        return await self._workers.run(self.list_sync, owner, params)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Ends the task; a missing one is no error."""
        owner = self._owner_resolver(context)
        await self._workers.run(self.delete_sync, owner, task_id)

    # The same, blocking, for callers outside an event loop.

    def save_sync(self, owner: str, task: Task) -> None:
        key = (owner, task.id)
        with self._cache.stripe(key):
            old = self._load(key)
            delta = _delta(old, task, self._check_history)
            if delta is None:
                return
            record = {FORMAT_KEY: FORMAT, **delta}
            self._append(key, record)
            if old is None:
                cached = Task()
                cached.CopyFrom(task)
            else:
                _update(old, task, delta)
                cached = old
            self._cache.put(key, cached)
            with self._lock:
                listing = self._listed.get(owner)
                if listing is not None:
                    listing.tasks[task.id] = _Summary(cached)

    def get_sync(self, owner: str, task_id: str) -> Task | None:
        key = (owner, task_id)
        with self._cache.stripe(key):
            task = self._load(key)
            if task is None:
                return None
            out = Task()
            out.CopyFrom(task)
            return out

    def delete_sync(self, owner: str, task_id: str) -> None:
        key = (owner, task_id)
        with self._cache.stripe(key):
            if self._load(key) is None:
                return
            self._append(key, {FORMAT_KEY: FORMAT, "deleted": True})
            self._cache.pop(key)
            with self._lock:
                listing = self._listed.get(owner)
                if listing is not None:
                    listing.tasks.pop(task_id, None)

    def list_sync(self, owner: str, params: a2a_pb2.ListTasksRequest) -> a2a_pb2.ListTasksResponse:
        chosen = [
            (s.key, task_id)
            for task_id, s in self._summaries(owner)
            if (not params.context_id or s.context_id == params.context_id)
            and (not params.status or s.state == params.status)
            and (
                not params.HasField("status_timestamp_after")
                or (s.key[0] and s.key[1] >= params.status_timestamp_after.ToNanoseconds())
            )
        ]
        chosen.sort(reverse=True)
        total = len(chosen)
        start = 0
        if params.page_token:
            cursor = decode_list_tasks_cursor(params.page_token)
            if cursor is None:
                first = decode_page_token(params.page_token)
                start = next((i for i, (_, t) in enumerate(chosen) if t == first), -1)
                if start < 0:
                    raise InvalidParamsError(f"Invalid page token: {params.page_token}")
            else:
                after = cursor.sort_key()
                start = next((i for i, (k, _) in enumerate(chosen) if k < after), total)
        page_size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        end = start + page_size
        page = chosen[start:end]
        next_token = None
        if end < total:
            (has, ts, last), _ = chosen[end - 1]
            next_token = encode_list_tasks_cursor(
                ListTasksCursor(timestamp_ns=ts if has else None, task_id=last)
            )
        tasks = [t for t in (self.get_sync(owner, task_id) for _, task_id in page) if t is not None]
        return a2a_pb2.ListTasksResponse(
            next_page_token=next_token, tasks=tasks, total_size=total, page_size=page_size
        )

    # Inside.

    def _append(self, key: tuple[str, str], record: dict[str, Any]) -> None:
        owner, task_id = key
        self._store.append_message(owner, CONTEXT_PREFIX + task_id, dumps(record))

    def _load(self, key: tuple[str, str]) -> Task | None:
        """The task as last saved (the caller holds its stripe)."""
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        task = self._read(*key)
        if task is not None:
            self._cache.put(key, task)
        return task

    def _read(self, owner: str, task_id: str) -> Task | None:
        """The task, replayed from its records."""
        try:
            records = self._store.history(owner, CONTEXT_PREFIX + task_id)
        except ContextNotFound:
            return None
        task: Task | None = None
        for _, _, raw in records:
            task = _apply(task, json.loads(raw))
        return task

    def _summaries(self, owner: str) -> Iterable[tuple[str, _Summary]]:
        """Every task of the owner with its summary: read from the store the
        first time, then kept up to date by saves and deletes."""
        with self._lock:
            listing = self._listed.get(owner)
            if listing is not None and listing.complete:
                return list(listing.tasks.items())
        with self._building:
            with self._lock:
                listing = self._listed.setdefault(owner, _Listing())
            if not listing.complete:
                self._read_listing(owner, listing)
        with self._lock:
            return list(listing.tasks.items())

    def _read_listing(self, owner: str, listing: _Listing) -> None:
        """Fills a listing from the store. Saves and deletes meanwhile
        update it too; each task is read under its stripe, so whichever
        of the two comes last writes the task's latest summary."""
        token = None
        while True:
            page = self._store.list_contexts(owner, 100, token)
            for c in page["contexts"]:
                context_id = c["contextId"]
                if not context_id.startswith(CONTEXT_PREFIX):
                    continue
                task_id = context_id[len(CONTEXT_PREFIX) :]
                with self._cache.stripe((owner, task_id)):
                    task = self._load((owner, task_id))
                    with self._lock:
                        if task is None:
                            listing.tasks.pop(task_id, None)
                        else:
                            listing.tasks[task_id] = _Summary(task)
            token = page["nextPageToken"]
            if not token:
                break
        with self._lock:
            listing.complete = True
