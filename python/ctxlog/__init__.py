"""ctxlog for Python: the conversation-history engine of A2A agents.

A directory on disk is the store. ``Store(path)`` opens it (creating it if
needed); one process writes it at a time, others may read it with
``read_only=True``. Every call that touches the disk releases the GIL, and
one ``Store`` is shared by all the threads of an agent.

A2A objects go in as JSON (``bytes`` or ``str``) and come back as the
parsed JSON of what was stored, in the A2A v1.0 form::

    import ctxlog

    with ctxlog.Store("agent-data") as store:
        receipt = store.receive_message("acme", '{"messageId": "m1", '
            '"role": "ROLE_USER", "parts": [{"text": "hello"}]}')
        print(store.render_history("acme", receipt["contextId"]))

Wherever a call takes JSON, it takes a dict too. Errors raise a subclass
of :class:`ctxlog.Error` named after the engine's error kind
(``TaskNotFound``, ``InvalidParams``, ``Locked``, ...); they pickle, and
the not-found kinds are also ``LookupError``, the argument kinds
``ValueError``.

``ctxlog.a2a.CtxlogTaskStore`` is a drop-in ``TaskStore`` for a2a-sdk
servers (install the ``a2a`` extra).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Literal

from . import _native
from ._errors import (
    ContextBusy,
    ContextNotFound,
    ContextRejected,
    Corrupt,
    Error,
    ForeignFile,
    IdempotencyConflict,
    InvalidParams,
    Io,
    Locked,
    MissingRecords,
    Poisoned,
    ReadOnly,
    StoreNotFound,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedFormat,
    UnsupportedOperation,
)

__version__: str = _native.__version__
"""The version of the package (and of the engine it is built on)."""

MAX_RECORD_BYTES: int = _native.MAX_RECORD_BYTES
"""The most bytes one record may hold (16 MiB): a message, with its
context's key and framing (a few dozen bytes), is refused above it."""

__all__ = [
    "__version__",
    "MAX_RECORD_BYTES",
    "Store",
    "verify",
    "Error",
    "ContextBusy",
    "ContextNotFound",
    "ContextRejected",
    "Corrupt",
    "ForeignFile",
    "IdempotencyConflict",
    "InvalidParams",
    "Io",
    "Locked",
    "MissingRecords",
    "Poisoned",
    "ReadOnly",
    "StoreNotFound",
    "TaskNotCancelable",
    "TaskNotFound",
    "UnsupportedFormat",
    "UnsupportedOperation",
]

Json = dict[str, Any]
Text = bytes | str
# Where the store takes JSON: a dict, or its text.
JsonIn = Json | Text


# The stores this process has open to write, by their directory's real
# path: a second ``Store(path)`` shares the first's (the engine locks a
# store to one open at a time; SQLite lets a process open as many
# connections to a file as it likes, and callers expect the same).
_OPEN: dict[str, list[Any]] = {}
_OPEN_LOCK = threading.Lock()


class _Closed:
    """What a closed handle holds: every call raises as a closed store's."""

    closed = True

    def __init__(self, path: str) -> None:
        self.path = path

    def __getattr__(self, name: str) -> Any:
        def closed(*_args: Any, **_kwargs: Any) -> Any:
            raise Error("the store is closed; open it again with ctxlog.Store(path)")

        return closed

    def close(self) -> None:
        pass


class Store:
    """A ctxlog store in the directory ``path``.

    One process may open a store any number of times: every ``Store`` of
    one directory (to write) shares one open store, with the settings of
    the first (a later one that asks for others raises
    :class:`InvalidParams`), which is closed when the last of them is.

    Args:
        path: the store's directory.
        durability: when a write returns: ``"sync"`` after its fdatasync
            (the default), ``"group"`` sharing fdatasyncs with concurrent
            writers, ``"buffered"`` once in the OS's cache.
        create: create the store if the directory holds none (otherwise
            :class:`StoreNotFound`).
        read_only: read beside another process that writes the store: no
            lock taken, nothing written; writes raise :class:`ReadOnly`.
        recovery: ``"strict"`` refuses to open a damaged store;
            ``"skip-corrupt"`` opens with what is readable and reports
            what it skipped (:meth:`open_report`).
        retention_seconds: contexts idle this long count as expired.
        lock_wait_seconds: how long the open waits for another holder of
            the store to let it go before it raises :class:`Locked` (the
            GIL is released meanwhile).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Literal["sync", "group", "buffered"] = "sync",
        create: bool = True,
        read_only: bool = False,
        recovery: Literal["strict", "skip-corrupt"] = "strict",
        retention_seconds: float | None = None,
        lock_wait_seconds: float = 0.5,
    ) -> None:
        def open_native() -> Any:
            return _native.Store(
                os.fspath(path),
                durability=durability,
                create=create,
                read_only=read_only,
                recovery=recovery,
                retention_seconds=retention_seconds,
                lock_wait_seconds=lock_wait_seconds,
            )

        self._key: str | None = None
        self._retention = retention_seconds
        if read_only:
            # Unlocked: as many as asked for, each its own.
            self._s = open_native()
            return
        key = os.path.realpath(os.fspath(path))
        settings = (durability, recovery, retention_seconds)
        with _OPEN_LOCK:
            held = _OPEN.get(key)
            if held is not None and not held[0].closed:
                if held[2] != settings:
                    raise InvalidParams(
                        f"{key} is open in this process already with durability, recovery "
                        f"and retention {held[2]!r}; open it with the same settings (or "
                        f"close the other Store first)"
                    )
                held[1] += 1
                self._s, self._key = held[0], key
                return
            self._s = open_native()
            _OPEN[key] = [self._s, 1, settings]
            self._key = key

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<ctxlog.Store {str(self.path)!r} {state}>"

    @property
    def path(self) -> str:
        """The store's directory."""
        return str(self._s.path)

    @property
    def retention_seconds(self) -> float | None:
        """How long a context may stay idle before it counts as expired
        (``None``: never)."""
        return self._retention

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._s.closed

    def close(self) -> None:
        """Writes a checkpoint, syncs and releases the store (once every
        ``Store`` of this process on its directory is closed); calling it
        again does nothing."""
        native, key = self._s, self._key
        if isinstance(native, _Closed):
            return
        self._s = _Closed(str(native.path))
        if key is None:
            native.close()
            return
        with _OPEN_LOCK:
            held = _OPEN.get(key)
            if held is not None and held[0] is native:
                held[1] -= 1
                if held[1] > 0:
                    return
                del _OPEN[key]
        native.close()

    # The A2A task model.

    def receive_message(
        self, tenant: str, message: JsonIn, message_ids: str = "idempotent"
    ) -> Json:
        """Saves an inbound A2A Message (a dict, or its JSON) under the A2A rules, before
        the agent works on it: no ids opens a new context and task, a
        ``contextId`` alone a new task in it, a ``taskId`` joins that task.
        With ``message_ids="idempotent"`` (the default) a resent
        ``messageId`` (in the context the message names, or its task's, or
        in the tenant for a message that names neither) stores nothing and
        returns the first receipt with ``duplicate`` true; with
        ``"labels"`` every message is new, whatever its ``messageId``.

        Returns ``{"contextId", "taskId", "seq", "duplicate", "newContext",
        "newTask", "event"}``.
        """
        return json.loads(self._s.receive_message(tenant, _text(message), message_ids))

    def apply_event(self, tenant: str, event: JsonIn) -> tuple[str, int]:
        """Applies an A2A StreamResponse (a dict, or its JSON) holding a
        ``statusUpdate`` or an ``artifactUpdate``; returns (taskId, its
        event number)."""
        return self._s.apply_event(tenant, _text(event))

    def update_status(self, tenant: str, status_update: JsonIn) -> tuple[str, int]:
        """Applies a TaskStatusUpdateEvent (a dict, or its JSON)."""
        return self.apply_event(tenant, _wrap("statusUpdate", status_update))

    def add_artifact(self, tenant: str, artifact_update: JsonIn) -> tuple[str, int]:
        """Applies a TaskArtifactUpdateEvent (a dict, or its JSON)."""
        return self.apply_event(tenant, _wrap("artifactUpdate", artifact_update))

    def cancel_task(self, tenant: str, task_id: str) -> Json:
        """Cancels a task that is not finished; returns the Task."""
        return json.loads(self._s.cancel_task(tenant, task_id))

    def get_task(
        self,
        tenant: str,
        task_id: str,
        history_length: int | None = None,
        include_artifacts: bool = True,
    ) -> Json:
        """The Task: its status, history (the last ``history_length``
        messages, all by default) and artifacts."""
        return json.loads(self._s.get_task(tenant, task_id, history_length, include_artifacts))

    def list_tasks(
        self,
        tenant: str,
        *,
        context_id: str | None = None,
        status: str | None = None,
        status_timestamp_after_ms: int | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
        history_length: int | None = None,
        include_artifacts: bool = False,
    ) -> Json:
        """A page of the tenant's tasks, newest status first (an A2A
        ListTasksResponse: ``tasks``, ``nextPageToken``, ``pageSize``,
        ``totalSize``). ``status`` is a state name (``TASK_STATE_WORKING``)."""
        return json.loads(
            self._s.list_tasks(
                tenant,
                context_id,
                status,
                status_timestamp_after_ms,
                page_size,
                page_token,
                history_length,
                include_artifacts,
            )
        )

    def events_since(self, tenant: str, task_id: str, after: int = 0) -> list[Json]:
        """The task's events after event number ``after`` (StreamResponse
        objects, each with its ``seq``, from 1)."""
        return json.loads(self._s.events_since(tenant, task_id, after))

    # Raw messages and histories.

    def append_message(self, tenant: str, context_id: str, raw: JsonIn) -> tuple[int, int]:
        """Saves ``raw`` byte for byte as a message of the context (outside
        the task model), durably; returns (seq, timestamp in ms). A dict is
        stored as its JSON."""
        return self._s.append_message(tenant, context_id, _text(raw))

    def append_messages(self, tenant: str, context_id: str, raws: list[JsonIn]) -> list[tuple[int, int]]:
        """Saves each of ``raws`` as :meth:`append_message` does, in order,
        with one sync for all; returns (seq, timestamp in ms) of each. A
        crash before it returns keeps at most a prefix of them."""
        return self._s.append_messages(tenant, context_id, [_text(raw) for raw in raws])

    def pop_message(self, tenant: str, context_id: str) -> tuple[int, int, bytes] | None:
        """Takes the newest message out of the context's history, durably,
        and returns it as (seq, timestamp in ms, the bytes as stored), or
        ``None`` when the history is empty. Only in a context without
        tasks; the context keeps its id."""
        return self._s.pop_message(tenant, context_id)

    def empty_context(self, tenant: str, context_id: str) -> int:
        """Takes every message out of the context's history, durably;
        returns how many. The context keeps its id: the next
        :meth:`append_message` continues it. Only in a context without
        tasks."""
        return self._s.empty_context(tenant, context_id)

    def history(
        self,
        tenant: str,
        context_id: str,
        n: int | None = None,
        before: int | None = None,
        head: int | None = None,
    ) -> list[tuple[int, int, bytes]]:
        """The context's last ``n`` messages (all by default), oldest first,
        as (seq, timestamp in ms, the bytes as stored); with ``before``,
        only those of a seq below it (a page read backwards); with
        ``head``, only the first ``head`` bytes of each."""
        return self._s.last_messages(tenant, context_id, n, before, head)

    def render_history(
        self,
        tenant: str,
        context_id: str,
        before: int | None = None,
        max_bytes: int = 16384,
        max_messages: int = 50,
        include_artifacts: bool = False,
    ) -> str:
        """The context's history for a prompt, inside the injection-guard
        frame that no stored text can close or forge. ``before`` leaves out
        the message being processed (its ``seq``) and what came after."""
        return self._s.render_history(
            tenant, context_id, before, max_bytes, max_messages, include_artifacts
        )

    def list_contexts(self, tenant: str, page_size: int = 50, page_token: str | None = None) -> Json:
        """A page of the tenant's contexts, oldest first activity first, in
        the form ``ctxlog contexts`` prints: ``{"contexts": [{"contextId",
        "key", "firstActivity", "lastActivity", "messages", "tasks"}],
        "nextPageToken"}``, times in ISO 8601 (UTC), the token ``""`` on
        the last page (and ``""`` or ``None`` asks for the first)."""
        return json.loads(self._s.list_contexts(tenant, page_size, page_token))

    def delete_context(self, tenant: str, context_id: str) -> None:
        """Deletes a context with its tasks and messages, durably; its id
        stays refused. Deleting it again does nothing."""
        self._s.delete_context(tenant, context_id)

    # The store.

    def stats(self) -> Json:
        """Contexts, tasks, messages, segments, bytes on disk, live bytes."""
        return json.loads(self._s.stats())

    def open_report(self) -> Json:
        """What the open found and did (a torn tail cut, damage skipped...)."""
        return json.loads(self._s.open_report())

    def compact(self) -> Json:
        """Rewrites the log without deleted and expired contexts."""
        return json.loads(self._s.compact())

    def sync(self) -> None:
        """Makes every write so far durable (for ``"buffered"``)."""
        self._s.sync()


def verify(path: str | os.PathLike[str], read_only: bool = False) -> Json:
    """A full checksum scan of the store at ``path`` that changes nothing:
    ``{"clean", "segments", "records", "bytes", "damage"}``. With
    ``read_only``, it runs beside a process that writes the store."""
    return json.loads(_native.verify(os.fspath(path), read_only))


def _text(value: JsonIn) -> Text:
    """JSON as the native module takes it: text as given, a dict dumped."""
    if isinstance(value, (bytes, str)):
        return value
    if isinstance(value, dict):
        return json.dumps(value)
    raise TypeError(f"expected a dict, or JSON as str or bytes; got {type(value).__name__}")


def _wrap(key: str, event: JsonIn) -> str:
    if isinstance(event, (bytes, str)):
        text = event.decode() if isinstance(event, bytes) else event
        return '{"' + key + '":' + text + "}"
    return json.dumps({key: event})
