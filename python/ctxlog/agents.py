"""``CtxlogSession``: an OpenAI Agents SDK session on ctxlog.

An agent's conversation is kept by ctxlog instead of SQLite by changing
one line::

    from agents import Agent, Runner
    from ctxlog.agents import CtxlogSession

    session = CtxlogSession("conversation_123", "agent-data")
    result = await Runner.run(agent, "Hello", session=session)

What is stored where: a session is a ctxlog context (its id the session
id) of the tenant ``tenant`` (``"agents"`` by default), and each item is
one message of it, the item's JSON as given. ``add_items`` appends a
turn's items with one sync: they are on disk when it returns (with the
default durability). ``get_items(limit)`` reads only the newest ``limit``
items; ``pop_item`` and ``clear_session`` are durable records too
(``Store.pop_message``, ``Store.empty_context``), and the session id stays
usable after a clear. ``ctxlog --tenant agents history conversation_123``
shows a session.

Sessions of one directory share one open store in a process (a store is
opened by one process at a time), closed when the last of them is; pass
an open :class:`ctxlog.Store` to share it with other users, such as a
``CtxlogTaskStore``, under their own tenants.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings, resolve_session_limit

from . import ContextNotFound, Store
from ._workers import Workers

__all__ = ["CtxlogSession"]

# The store's blocking calls run on these threads (the store releases the
# GIL, so they run in parallel), never on the event loop.
_workers = Workers(4, "ctxlog-agents")


class _Opened:
    """A store opened for sessions by directory, and how many use it."""

    __slots__ = ("store", "users")

    def __init__(self, store: Store) -> None:
        self.store = store
        self.users = 0


_opened: dict[str, _Opened] = {}
_opened_lock = threading.Lock()


def _acquire(path: str | os.PathLike[str], durability: str) -> tuple[str, Store]:
    key = os.path.realpath(path)
    with _opened_lock:
        opened = _opened.get(key)
        if opened is None:
            opened = _opened[key] = _Opened(Store(path, durability=durability))
        opened.users += 1
        return key, opened.store


def _release(key: str) -> None:
    with _opened_lock:
        opened = _opened.get(key)
        if opened is None:
            return
        opened.users -= 1
        if opened.users == 0:
            del _opened[key]
            opened.store.close()


_UNREADABLE = object()


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return _UNREADABLE


class CtxlogSession(SessionABC):
    """An OpenAI Agents SDK ``Session`` on a ctxlog store.

    Args:
        session_id: the conversation's id (the ctxlog context).
        store: the store's directory (opened here, shared with the other
            sessions of this process on the same directory, and closed by
            :meth:`close` of the last of them), or an open
            :class:`ctxlog.Store` (left open).
        tenant: the ctxlog tenant the sessions are kept under.
        durability: for a directory: ``"sync"`` (default: ``add_items`` is
            on disk before it returns), ``"group"`` or ``"buffered"``.
        session_settings: the SDK's settings (``limit``: how many items
            ``get_items()`` gives by default).
    """

    def __init__(
        self,
        session_id: str,
        store: str | os.PathLike[str] | Store,
        *,
        tenant: str = "agents",
        durability: str = "sync",
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = session_settings or SessionSettings()
        self._tenant = tenant
        if isinstance(store, Store):
            self._store, self._key = store, None
        else:
            self._key, self._store = _acquire(store, durability)
        self._closed = False

    @property
    def store(self) -> Store:
        """The ctxlog store the session is in."""
        return self._store

    def close(self) -> None:
        """Closes the store if this session opened it and no other session
        of this process still uses it. Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._key is not None:
            _release(self._key)

    def __enter__(self) -> CtxlogSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CtxlogSession({self.session_id!r}, {self._store.path!r}, tenant={self._tenant!r})"

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items, oldest first: the newest ``limit`` of them
        (``None``: the settings' limit, else all), read without the older
        ones."""
        n = resolve_session_limit(limit, self.session_settings)
        if n is not None and n < 0:
            n = None  # as SQLiteSession: a negative limit is no limit
        if n == 0:
            return []
        return await _workers.run(self._items, n)

    async def add_items(self, items: list[Any]) -> None:
        """Appends ``items`` in order, with one sync: durable when this
        returns. A crash before that keeps a prefix of them at most."""
        self._check_open()
        if not items:
            return
        raws = [json.dumps(item) for item in items]
        await _workers.run(self._store.append_messages, self._tenant, self.session_id, raws)

    async def pop_item(self) -> Any | None:
        """Takes the newest item out of the session, durably, and returns
        it (``None`` when the session is empty)."""
        self._check_open()
        return await _workers.run(self._pop)

    async def clear_session(self) -> None:
        """Takes every item out of the session, durably; the session id
        stays usable."""
        self._check_open()
        await _workers.run(self._clear)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"session {self.session_id!r} is closed")

    def _items(self, n: int | None) -> list[Any]:
        # A message that is not JSON (written to the context by other
        # means) is passed over, as SQLiteSession passes over a row that
        # does not parse: the read widens until it has `n` items.
        window = n
        while True:
            try:
                rows = self._store.history(self._tenant, self.session_id, window)
            except ContextNotFound:
                return []
            items = [item for _, _, raw in rows if (item := _parse(raw)) is not _UNREADABLE]
            if n is None or len(items) >= n or len(rows) < window:
                return items if n is None else items[-n:]
            window *= 2

    def _pop(self) -> Any | None:
        while True:
            try:
                popped = self._store.pop_message(self._tenant, self.session_id)
            except ContextNotFound:
                return None
            if popped is None:
                return None
            item = _parse(popped[2])
            if item is not _UNREADABLE:
                return item
            # Not an item: taken out all the same, as SQLiteSession does.

    def _clear(self) -> None:
        try:
            self._store.empty_context(self._tenant, self.session_id)
        except ContextNotFound:
            pass
