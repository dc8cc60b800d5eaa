"""``CtxlogSessionService``: Google ADK sessions on ctxlog.

An ADK agent keeps its sessions in ctxlog instead of a database by
changing its session service::

    from google.adk.runners import Runner
    from ctxlog.adk import CtxlogSessionService

    sessions = CtxlogSessionService("agent-data")
    runner = Runner(agent=agent, app_name="my_app", session_service=sessions)

It is a drop-in for ADK's ``DatabaseSessionService``: every method of
``BaseSessionService``, the same answers (checked against
``InMemorySessionService`` and ``DatabaseSessionService`` on SQLite by the
package's tests), and every call that writes is on disk before it
returns (with the default durability), so sessions survive a kill -9.

What is stored where: each user of an app is a ctxlog tenant, named by
the JSON array ``[tenant, app_name, user_id]`` (``tenant`` is ``"adk"`` by
default), and each app one too, ``[tenant, app_name]``; the contextIds in
them are JSON arrays as well:

- ``["session", session_id]`` in the user's tenant: one message per
  change, oldest first: the session's creation, then each event appended.
  A message is a header (JSON, one line: ``o`` its kind, ``t`` its time
  in seconds; for an event its ``id`` and ``hi``, the highest event time
  up to it; and the session's state after it: now and then whole,
  ``state``, else the seq of the message that holds it whole, ``sv``,
  those since whose deltas apply to it, ``dv``, and its own delta, ``d``),
  and for an event a newline and the event's JSON as
  ``Event.model_dump_json(exclude_none=True)`` gives it (as
  ``SqliteSessionService`` keeps it).
- ``["user"]`` in the user's tenant and ``["app"]`` in the app's: the
  user's and the app's state, one message per change, each the whole
  state after it.
- ``["users"]`` in the app's tenant: one message per user, written at the
  user's first session, which ``list_sessions`` without a user reads.

So listing a user's sessions reads that user's contexts only, and
``ctxlog --tenant '["adk","my_app","u1"]' history '["session","s1"]'``
shows a session. ``temp:`` keys are never stored. ``delete_session``
empties the session's context (:meth:`ctxlog.Store.empty_context`), so
its id can be created again, as ADK's services allow.

An event that changes app or user state writes up to three messages, one
sync each, in the order user, app, session, each made and measured before
the first is written: a call the store refuses (an event or a state
above ``ctxlog.MAX_RECORD_BYTES``, 16 MiB) leaves nothing behind. A crash
keeps a prefix of the store's log, so an event read back always has all
its effects; a call cut short by a crash (or by the disk failing under
it) may have applied its app or user part alone (the caller had no
answer, and ADK's state is last-write-wins per key, so the call made
again gives the same state).

A session read by this service carries the seq of its newest message: an
``append_event`` on a copy that another append has overtaken raises ADK's
``StaleSessionError``, as ``DatabaseSessionService`` does; a session
object from elsewhere is checked by its ``last_update_time`` and newest
event. An event equal to the session's newest (the same event appended
again, or a retry of an append that landed) is not stored twice, as
``InMemorySessionService`` skips it. A cancelled ``append_event`` may
land all the same (the store's call runs to its end): the cancellation
waits for it, and the session object holds the event if it landed.

A store that expires idle contexts (``retention_seconds``) is refused: it
would expire an app's own contexts with the idle sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State

try:  # not exported by every google-adk 2.x
    from google.adk.errors._stale_session_error import StaleSessionError
except ImportError:  # pragma: no cover - older google-adk

    class StaleSessionError(ValueError):  # type: ignore[no-redef]
        """The session was changed by another writer since it was read."""


from . import MAX_RECORD_BYTES, ContextNotFound, InvalidParams, Store
from ._workers import StoreUser, Stripes, dumps

__all__ = ["CtxlogSessionService"]

# DatabaseSessionService's words, which callers may look for.
_STALE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)
# A session's writes take turns, as do those of a user's and an app's
# state: a lock per stripe of (store, tenant, context), shared by every
# service in the process. Taken in this order: session, user, app.
_SESSION_LOCKS = Stripes()
_USER_LOCKS = Stripes()
_APP_LOCKS = Stripes()
# What a record of this service may hold: the store's limit, less room
# for the record's key and framing, checked before anything of a call is
# written, so that a refusal leaves nothing of it behind.
_MAX_RECORD = MAX_RECORD_BYTES - 4096
# A session's whole state is written again after at most this many
# records with a delta of it, or once their deltas' bytes pass the whole
# state's (or this many bytes, for a small state).
_CHAIN = 32
_MIN_SNAPSHOT = 4096
# How many contexts one page of the app's list reads (the most a page holds).
_PAGE = 100


def _app_tenant(tenant: str, app_name: str) -> str:
    return dumps([tenant, app_name])


def _user_tenant(tenant: str, app_name: str, user_id: str) -> str:
    return dumps([tenant, app_name, user_id])


def _session_context(session_id: str) -> str:
    return dumps(["session", session_id])


# The contexts of an app's tenant: its state, and the users it has had.
_APP_CONTEXT = dumps(["app"])
_USERS_CONTEXT = dumps(["users"])
# The context of a user's tenant that holds the user's state.
_USER_CONTEXT = dumps(["user"])


def _strip(session_id: str | None) -> str | None:
    return session_id.strip() if session_id else session_id


class _Record:
    """One message of a session's context, its header parsed."""

    __slots__ = ("seq", "head", "body")

    def __init__(self, seq: int, head: dict[str, Any], body: bytes) -> None:
        self.seq = seq
        self.head = head
        self.body = body

    @property
    def time(self) -> float:
        return float(self.head.get("t", 0.0))

    def event(self) -> Event:
        return Event.model_validate_json(self.body)


def _record(seq: int, raw: bytes) -> _Record | None:
    """The message as a record; ``None`` for one this service did not
    write (passed over, as the SQL services pass over what they cannot
    read)."""
    head, _, body = raw.partition(b"\n")
    try:
        parsed = json.loads(head)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or parsed.get("o") not in ("create", "event"):
        return None
    return _Record(seq, parsed, body)


def _fits(what: str, record: bytes | str) -> bytes | str:
    """``record``, if the store takes it; else InvalidParams, naming what."""
    size = len(record.encode() if isinstance(record, str) else record)
    if size > _MAX_RECORD:
        raise InvalidParams(
            f"{what} is {size} bytes as stored, above the {_MAX_RECORD} a record of the store may hold "
            f"(ctxlog.MAX_RECORD_BYTES less its framing); nothing of this call was stored. Keep large "
            f"data in an ADK artifact service and name it in the event or state"
        )
    return record


def _merge(app: dict[str, Any], user: dict[str, Any], session: dict[str, Any]) -> dict[str, Any]:
    merged = dict(session)
    for key, value in app.items():
        merged[State.APP_PREFIX + key] = value
    for key, value in user.items():
        merged[State.USER_PREFIX + key] = value
    return merged


class CtxlogSessionService(BaseSessionService, StoreUser):
    """An ADK ``SessionService`` on a ctxlog store.

    Args:
        store: the store's directory (opened here, closed by :meth:`close`),
            or an open :class:`ctxlog.Store` (left open), shared with the
            other doors under their own tenants.
        tenant: the first part of the ctxlog tenants the sessions are
            kept under (``[tenant, app_name, user_id]``, and
            ``[tenant, app_name]`` for an app's own state).
        durability: for a directory: ``"sync"`` (default: every write is
            on disk before its call returns), ``"group"`` or
            ``"buffered"``.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store,
        *,
        tenant: str = "adk",
        durability: str = "sync",
    ) -> None:
        if isinstance(store, Store) and store.retention_seconds is not None:
            raise InvalidParams(
                "a store with retention_seconds expires idle contexts, and with them an app's own "
                "(its state, its list of users) and idle sessions; open the store without retention"
            )
        StoreUser.__init__(self, store, durability, 4, "ctxlog-adk")
        self._tenant = tenant
        # Locks by the store's directory: every service of this process on
        # one store (they share its one open) takes the same.
        self._where = os.path.realpath(self._store.path)

    async def close(self) -> None:  # type: ignore[override]
        """Stops the service's threads, and closes the store if it opened
        it (as ``DatabaseSessionService.close``, a coroutine). Closing
        twice does nothing."""
        StoreUser.close(self)

    async def __aenter__(self) -> CtxlogSessionService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"CtxlogSessionService({self._store.path!r}, tenant={self._tenant!r})"

    # BaseSessionService.

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        # ADK's clock and ids are context variables of the caller's task
        # (tests set them): read here, on the event loop.
        now = platform_time.get_time()
        session_id = _strip(session_id) or platform_uuid.new_uuid()
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        return await self._workers.run(self._create, app_name, user_id, session_id, deltas, now)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        return await self._workers.run(self._get, app_name, user_id, _strip(session_id), config)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        return await self._workers.run(self._list, app_name, user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await self._workers.run(self._delete, app_name, user_id, _strip(session_id))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        tenant = _user_tenant(self._tenant, app_name, user_id)
        return await self._workers.run(self._snapshot, tenant, _USER_CONTEXT)

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        # As the base class: temp: keys reach the session in memory (the
        # rest of this invocation reads them), never the store.
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        delta = event.actions.state_delta if event.actions and event.actions.state_delta else {}
        deltas = _session_util.extract_json_safe_state_delta(delta)
        body = event.model_dump_json(exclude_none=True).encode()
        marker = getattr(session, "_storage_update_marker", None)
        last_event = session.events[-1].id if session.events else None
        write = self._workers.submit(
            self._append,
            session.app_name,
            session.user_id,
            session.id,
            (marker, session.last_update_time, last_event),
            event,
            deltas,
            body,
        )
        try:
            seq, again = await asyncio.shield(write)
        except asyncio.CancelledError:
            # The store's call runs to its end whatever the caller does:
            # wait for it (an append's time), so that the session object
            # holds the event if it landed and the next append on it goes
            # on, then let the cancellation through.
            while not write.done():
                try:
                    await asyncio.shield(write)
                except asyncio.CancelledError:
                    pass
                except Exception:
                    break
            if not write.cancelled() and write.exception() is None:
                self._landed(session, event, *write.result())
            raise
        return self._landed(session, event, seq, again)

    def _landed(self, session: Session, event: Event, seq: int, again: bool) -> Event:
        """Brings the session object up to date with an event stored."""
        if again and session.events and session.events[-1].id == event.id:
            return event  # appended twice: stored, and in the session, once
        # Stored now; or stored before, but not in this session object (a
        # retry of an append whose answer was lost): the object catches up.
        session.last_update_time = event.timestamp
        session._storage_update_marker = str(seq)
        return self._commit_event_to_session(session, event)

    # The blocking halves, run on the service's threads.

    def _create(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        deltas: dict[str, dict[str, Any]],
        now: float,
    ) -> Session:
        apps = _app_tenant(self._tenant, app_name)
        tenant = _user_tenant(self._tenant, app_name, user_id)
        context = _session_context(session_id)
        with self._locks(tenant, context, apps, bool(deltas["app"])):
            if self._newest(tenant, context) is not None:
                raise AlreadyExistsError(f"Session with id {session_id} already exists.")
            # Every record is made and measured before the first is
            # written: a refusal leaves nothing behind.
            writes = []
            if not self._has_contexts(tenant):
                # The user's first session: the app's list of users names
                # them (before anything of theirs is stored).
                writes.append((apps, _USERS_CONTEXT, dumps({"user": user_id})))
            user, write = self._next_snapshot("the user's state", tenant, _USER_CONTEXT, deltas["user"], now)
            writes += write
            app, write = self._next_snapshot("the app's state", apps, _APP_CONTEXT, deltas["app"], now)
            writes += write
            head = {"o": "create", "t": now, "state": deltas["session"]}
            writes.append((tenant, context, _fits("the session's state", dumps(head))))
            seq = self._write(writes)
        session = Session(
            app_name=app_name,
            user_id=user_id,
            id=session_id,
            state=_merge(app, user, deltas["session"]),
            last_update_time=now,
        )
        session._storage_update_marker = str(seq)
        return session

    def _get(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None,
    ) -> Session | None:
        tenant = _user_tenant(self._tenant, app_name, user_id)
        context = _session_context(session_id)
        after = config.after_timestamp if config is not None else None
        recent = config.num_recent_events if config is not None else None
        records = self._tail(tenant, context, after, recent)
        if not records:
            return None
        newest = records[-1]
        state = self._session_state(tenant, context, newest, records)
        events = [r for r in records if r.head["o"] == "event"]
        # As the SQL services: events by their time (ties in the order
        # they were appended), those at or after `after_timestamp`, the
        # newest `num_recent_events` of them.
        events.sort(key=lambda r: r.time)
        if after is not None:
            events = [r for r in events if r.time >= after]
        if recent is not None:
            events = events[-recent:] if recent else []
        app = self._snapshot(_app_tenant(self._tenant, app_name), _APP_CONTEXT)
        user = self._snapshot(tenant, _USER_CONTEXT)
        session = Session(
            app_name=app_name,
            user_id=user_id,
            id=session_id,
            state=_merge(app, user, state),
            events=[r.event() for r in events],
            last_update_time=newest.time,
        )
        session._storage_update_marker = str(newest.seq)
        return session

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        apps = _app_tenant(self._tenant, app_name)
        app = self._snapshot(apps, _APP_CONTEXT)
        sessions = []
        for user in [user_id] if user_id is not None else self._users(apps):
            tenant = _user_tenant(self._tenant, app_name, user)
            state_of_user: dict[str, Any] | None = None
            for context in self._contexts(tenant):
                try:
                    kind, *ids = json.loads(context)
                except ValueError:
                    continue
                if kind != "session" or len(ids) != 1:
                    continue
                newest = self._newest(tenant, context)
                if newest is None:
                    continue
                if state_of_user is None:
                    state_of_user = self._snapshot(tenant, _USER_CONTEXT)
                state = self._session_state(tenant, context, newest, None)
                sessions.append(
                    Session(
                        app_name=app_name,
                        user_id=user,
                        id=ids[0],
                        state=_merge(app, state_of_user, state),
                        last_update_time=newest.time,
                    )
                )
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        tenant = _user_tenant(self._tenant, app_name, user_id)
        context = _session_context(session_id)
        with self._lock(_SESSION_LOCKS, tenant, context):
            try:
                self._store.empty_context(tenant, context)
            except ContextNotFound:
                pass

    def _append(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        revision: tuple[str | None, float, str | None],
        event: Event,
        deltas: dict[str, dict[str, Any]],
        body: bytes,
    ) -> tuple[int, bool]:
        """Appends the event; returns its seq, and whether it was the
        session's newest event already (then nothing is written)."""
        tenant = _user_tenant(self._tenant, app_name, user_id)
        context = _session_context(session_id)
        timestamp = event.timestamp
        with self._lock(_SESSION_LOCKS, tenant, context):
            newest = self._newest(tenant, context)
            if newest is None:
                raise SessionNotFoundError(f"Session {session_id} not found.")
            # As InMemorySessionService: an event equal to one stored (here:
            # the newest, which a retry or a second call resends) is not
            # stored again; events that only share an id are.
            if newest.head["o"] == "event" and newest.head.get("id") == event.id and newest.body == body:
                return newest.seq, True
            marker, last_update_time, last_event = revision
            if marker is not None:
                if marker != str(newest.seq):
                    raise StaleSessionError(_STALE)
            elif newest.time > last_update_time and not self._matches(newest, last_event):
                # As DatabaseSessionService: a copy from elsewhere (no
                # marker) that is behind the store in time is stale unless
                # its newest event is the store's.
                raise StaleSessionError(_STALE)
            hi = newest.head.get("hi")
            hi = timestamp if not isinstance(hi, (int, float)) else max(hi, timestamp)
            head: dict[str, Any] = {"o": "event", "t": timestamp, "hi": hi, "id": event.id}
            head.update(self._state_fields(tenant, context, newest, deltas["session"]))
            apps = _app_tenant(self._tenant, app_name)
            with self._locks(None, None, apps, bool(deltas["app"]), user=tenant if deltas["user"] else None):
                # User and app state first, then the event: what a crash
                # keeps is a prefix, so a stored event has all its effects.
                # Every record is measured before the first is written.
                writes = []
                if deltas["user"]:
                    writes += self._next_snapshot("the user's state", tenant, _USER_CONTEXT, deltas["user"], timestamp)[1]
                if deltas["app"]:
                    writes += self._next_snapshot("the app's state", apps, _APP_CONTEXT, deltas["app"], timestamp)[1]
                record = dumps(head).encode() + b"\n" + body
                writes.append((tenant, context, _fits("the event", record)))
                return self._write(writes), False

    @staticmethod
    def _matches(newest: _Record, last_event: str | None) -> bool:
        """Whether a session whose newest event is ``last_event`` (``None``:
        no events) is at the store's newest record."""
        if last_event is None:
            return newest.head["o"] == "create"
        return newest.head["o"] == "event" and newest.head.get("id") == last_event

    # Reads and writes of one context.

    def _tail(self, tenant: str, context: str, after: float | None, recent: int | None) -> list[_Record]:
        """The session's records, oldest first: all of them, or a tail that
        holds its newest and every event ``after`` and ``recent`` select.

        Each event's header has ``hi``, the highest event time up to it,
        so every record before one has a time of at most its ``hi``: the
        tail read backwards can stop at a record whose ``hi`` is below
        ``after``, or once it holds ``recent`` events at or above that
        ``hi`` (an earlier event sorts before each of them)."""
        page, before = 16, None
        if recent is not None:
            page = max(page, recent + 2)
        elif after is None:
            page = 0  # all of them
        records: list[_Record] = []
        while True:
            try:
                rows = self._store.history(tenant, context, page or None, before)
            except ContextNotFound:
                return []
            records = [r for seq, _, raw in rows if (r := _record(seq, raw)) is not None] + records
            if not page or len(rows) < page:
                return records  # the whole session
            before = rows[0][0]
            if records and self._tail_holds(records, after, recent):
                return records
            page = min(page * 4, 1024)

    @staticmethod
    def _tail_holds(records: list[_Record], after: float | None, recent: int | None) -> bool:
        """Whether ``records`` (a tail) holds every event selected."""
        first = records[0]
        if first.head["o"] == "create":
            return True  # a session's first record: nothing live before it
        hi = first.head.get("hi")
        if not isinstance(hi, (int, float)):
            return False
        if after is not None and hi < after:
            return True
        if recent is None:
            return False
        floor = hi if after is None else max(hi, after)
        above = sum(1 for r in records[1:] if r.head["o"] == "event" and r.time >= floor)
        return above >= recent

    def _lock(self, stripes: Stripes, tenant: str, context: str) -> threading.Lock:
        return stripes((self._where, tenant, context))

    def _locks(
        self, tenant: str | None, context: str | None, apps: str, app: bool, user: str | None = None
    ) -> contextlib.ExitStack:
        """Takes, in order, the session's lock (``tenant``, ``context``),
        the user's (``user``: their tenant; for a session, its own) and
        the app's (when ``app``): only those a call writes under, so that
        calls on other sessions, or without app state, do not wait."""
        stack = contextlib.ExitStack()
        if tenant is not None and context is not None:
            stack.enter_context(self._lock(_SESSION_LOCKS, tenant, context))
            user = tenant
        if user is not None:
            stack.enter_context(self._lock(_USER_LOCKS, user, _USER_CONTEXT))
        if app:
            stack.enter_context(self._lock(_APP_LOCKS, apps, _APP_CONTEXT))
        return stack

    def _contexts(self, tenant: str) -> list[str]:
        """The ids of the tenant's contexts that hold messages."""
        ids: list[str] = []
        token: str | None = None
        while True:
            try:
                page = self._store.list_contexts(tenant, _PAGE, token)
            except ContextNotFound:
                return ids
            ids += [c["contextId"] for c in page["contexts"] if c["messages"]]
            token = page.get("nextPageToken")
            if not token:
                return ids

    def _has_contexts(self, tenant: str) -> bool:
        try:
            return bool(self._store.list_contexts(tenant, 1)["contexts"])
        except ContextNotFound:
            return False

    def _users(self, apps: str) -> list[str]:
        """The users the app has had sessions of, each once."""
        try:
            rows = self._store.history(apps, _USERS_CONTEXT)
        except ContextNotFound:
            return []
        users: dict[str, None] = {}
        for _, _, raw in rows:
            try:
                user = json.loads(raw).get("user")
            except (ValueError, AttributeError):
                continue
            if isinstance(user, str):
                users[user] = None
        return list(users)

    def _newest(self, tenant: str, context: str) -> _Record | None:
        """The context's newest record (``None``: no session there). The
        newest message is one, unless something else wrote to the context:
        then pages of 16 before it are looked through."""
        before: int | None = None
        page = 1
        while True:
            try:
                rows = self._store.history(tenant, context, page, before)
            except ContextNotFound:
                return None
            for seq, _, raw in reversed(rows):
                record = _record(seq, raw)
                if record is not None:
                    return record
            if len(rows) < page:
                return None
            before, page = rows[0][0], 16

    def _state_fields(
        self, tenant: str, context: str, newest: _Record, delta: dict[str, Any]
    ) -> dict[str, Any]:
        """The header fields that say the session's state after an event
        appended after ``newest`` with the session-scope ``delta``.

        The whole state (``state``) only now and then: otherwise the
        seq of the record that holds it (``sv``), those of the records
        since whose deltas apply to it (``dv``), and the event's own delta
        (``d``). A new whole state is written once the deltas since the
        last reach its size, or ``_CHAIN`` records: the space is a few
        times the deltas' (where writing it at every change would grow as
        the square of the state), and a read of the state folds at most
        ``_CHAIN`` deltas."""
        if "state" in newest.head:
            base, chain = newest.seq, []
            size = newest.head.get("sb")
            if not isinstance(size, int):
                size = len(dumps(newest.head["state"]))
            since = 0
        else:
            base, chain = newest.head.get("sv"), list(newest.head.get("dv") or [])
            size, since = newest.head.get("sb", 0), newest.head.get("db", 0)
            if "d" in newest.head:
                chain.append(newest.seq)
        if not delta:
            fields = {"sv": base, "sb": size, "db": since}
            if chain:
                fields["dv"] = chain
            return fields
        since += len(dumps(delta))
        if len(chain) + 1 > _CHAIN or since > max(size, _MIN_SNAPSHOT):
            state = self._session_state(tenant, context, newest, None)
            state.update(delta)
            return {"state": state, "sb": len(dumps(state))}
        fields = {"sv": base, "sb": size, "db": since, "d": delta}
        if chain:
            fields["dv"] = chain
        return fields

    def _session_state(
        self,
        tenant: str,
        context: str,
        newest: _Record,
        records: list[_Record] | None,
    ) -> dict[str, Any]:
        """The session's own state after ``newest``: the whole state it or
        its ``sv`` names, and the deltas of its ``dv`` and its own ``d``
        applied to it (each found in ``records``, a tail of the session,
        when it is there; read from the store when not)."""
        if "state" in newest.head:
            return dict(newest.head["state"])
        base = self._record_at(tenant, context, newest.head.get("sv"), records)
        state = dict(base.head.get("state", {})) if base is not None else {}
        for seq in newest.head.get("dv") or []:
            record = self._record_at(tenant, context, seq, records)
            if record is not None:
                state.update(record.head.get("d", {}))
        state.update(newest.head.get("d", {}))
        return state

    def _record_at(self, tenant: str, context: str, seq: Any, records: list[_Record] | None) -> _Record | None:
        """The session's record ``seq``: from ``records`` if there, else
        read from the store."""
        if not isinstance(seq, int):
            return None
        for record in reversed(records or []):
            if record.seq == seq:
                return record
        rows = self._store.history(tenant, context, 1, seq + 1)
        if rows and rows[0][0] == seq:
            return _record(seq, rows[0][2])
        return None
        for record in reversed(records or []):
            if record.seq == sv:
                return dict(record.head.get("state", {}))
        rows = self._store.history(tenant, context, 1, sv + 1)
        if rows and rows[0][0] == sv:
            found = _record(sv, rows[0][2])
            if found is not None:
                return dict(found.head.get("state", {}))
        return {}

    def _snapshot(self, tenant: str, context: str) -> dict[str, Any]:
        """The newest whole state kept in an app's or user's context."""
        try:
            rows = self._store.history(tenant, context, 1)
        except ContextNotFound:
            return {}
        if not rows:
            return {}
        try:
            state = json.loads(rows[-1][2]).get("state", {})
        except (ValueError, AttributeError):
            return {}
        return state if isinstance(state, dict) else {}

    def _next_snapshot(
        self, what: str, tenant: str, context: str, delta: dict[str, Any], now: float
    ) -> tuple[dict[str, Any], list[tuple[str, str, bytes | str]]]:
        """An app's or user's state after ``delta``, and the write that
        stores it (none without a delta). The caller holds its lock."""
        state = self._snapshot(tenant, context)
        if not delta:
            return state, []
        state.update(delta)
        return state, [(tenant, context, _fits(what, dumps({"t": now, "state": state})))]

    def _write(self, writes: list[tuple[str, str, bytes | str]]) -> int:
        """Appends each record, in order; returns the last one's seq."""
        seq = 0
        for tenant, context, record in writes:
            seq, _ = self._store.append_message(tenant, context, record)
        return seq
