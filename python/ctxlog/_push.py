"""``CtxlogPushNotificationConfigStore``: a2a-sdk's
``PushNotificationConfigStore`` on ctxlog (exported by ``ctxlog.a2a``).

An a2a-sdk server passes it beside ``CtxlogTaskStore``, on the same store::

    store = ctxlog.Store("agent-data")
    handler = DefaultRequestHandler(
        agent_executor=MyExecutor(),
        task_store=CtxlogTaskStore(store),
        push_config_store=CtxlogPushNotificationConfigStore(store),
        agent_card=card,
    )

What is stored where: the owner of a config (resolved from the request's
``ServerCallContext``, as a2a-sdk's own stores do) is the ctxlog tenant.
A task's configs are the context ``a2a-sdk-push:<task id>`` of that tenant;
each ``set_info`` or ``delete_info`` appends one record to it, durably (the
config in its JSON form, or which one left), and a read replays them. So
that the dispatch path can find every owner's configs of a task, the first
config an owner sets for a task also appends that owner's name to the
context ``owners:<task id>`` of the tenant ``DISPATCH_TENANT``. Answers
equal ``InMemoryPushNotificationConfigStore``'s, call for call (the tests
check it), and outlive the process.
"""

from __future__ import annotations

import json
import os
from typing import Any

from google.protobuf import json_format

from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import OwnerResolver, resolve_user_scope
from a2a.server.tasks.push_notification_config_store import (
    PushNotificationConfigStore,
    normalize_push_notification_config,
)
from a2a.types.a2a_pb2 import TaskPushNotificationConfig

from . import ContextNotFound, Error, Store
from ._workers import Cache, StoreUser, dumps

__all__ = ["CtxlogPushNotificationConfigStore", "PUSH_CONTEXT_PREFIX", "DISPATCH_TENANT"]

#: The ctxlog context of task ``ID``'s configs is ``PUSH_CONTEXT_PREFIX + ID``.
PUSH_CONTEXT_PREFIX = "a2a-sdk-push:"
#: The tenant whose context ``owners:ID`` lists who has configs for task ``ID``.
DISPATCH_TENANT = "ctxlog:a2a-push-dispatch"

#: The version of the records' form; a record names it under ``FORMAT_KEY``.
FORMAT = 1
FORMAT_KEY = "ctxlogPushConfigStore"


def _config_json(config: TaskPushNotificationConfig) -> dict[str, Any]:
    return json_format.MessageToDict(config, preserving_proto_field_name=False)


def _replay(records: list[dict[str, Any]]) -> list[TaskPushNotificationConfig]:
    """A task's configs after its records, as the in-memory store keeps
    them: a set replaces the config of its id and goes last."""
    configs: list[TaskPushNotificationConfig] = []
    for record in records:
        if record.get(FORMAT_KEY) != FORMAT:
            raise Error(f"a push config record of an unknown form: {record!r}")
        if "set" in record:
            config = json_format.ParseDict(record["set"], TaskPushNotificationConfig())
            configs = [c for c in configs if c.id != config.id]
            configs.append(config)
        elif "delete" in record:
            configs = [c for c in configs if c.id != record["delete"]]
        elif record.get("deleteAll"):
            configs = []
        else:
            raise Error(f"a push config record that says nothing: {record!r}")
    return configs


class CtxlogPushNotificationConfigStore(PushNotificationConfigStore, StoreUser):
    """a2a-sdk's ``PushNotificationConfigStore`` on a ctxlog store.

    Args:
        store: the store's directory (opened here, and closed by
            :meth:`close`), or an open :class:`ctxlog.Store` shared with
            the ``CtxlogTaskStore`` (left open).
        owner_resolver: who owns a config, from the request's context (the
            ctxlog tenant); a2a-sdk's default: the authenticated user's name.
        durability: for a directory: ``"sync"`` (default), ``"group"`` or
            ``"buffered"``.
        cache_size: how many tasks' configs are kept in memory.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store,
        owner_resolver: OwnerResolver = resolve_user_scope,
        *,
        durability: str = "sync",
        cache_size: int = 1024,
    ) -> None:
        StoreUser.__init__(self, store, durability, 4, "ctxlog-push-store")
        # (owner, task id): the owner's configs of the task.
        self._cache = Cache(cache_size)
        # Task id: who has configs for it (read on every dispatch).
        self._owners_of = Cache(cache_size)
        self._owner_resolver = owner_resolver

    # PushNotificationConfigStore.

    async def set_info(
        self,
        task_id: str,
        notification_config: TaskPushNotificationConfig,
        context: ServerCallContext,
    ) -> TaskPushNotificationConfig:
        """Stores the config (replacing the task's one of the same id),
        durably; returns it as stored."""
        owner = self._owner_resolver(context)
        return await self._workers.run(self.set_sync, owner, task_id, notification_config)

    async def get_info(self, task_id: str, context: ServerCallContext) -> list[TaskPushNotificationConfig]:
        """The caller's configs of the task, oldest set first."""
        owner = self._owner_resolver(context)
        return await self._workers.run(self.get_sync, owner, task_id)

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        """Every owner's configs of the task, for the dispatch path."""
        return await self._workers.run(self.dispatch_sync, task_id)

    async def delete_info(
        self,
        task_id: str,
        context: ServerCallContext,
        config_id: str | None = None,
    ) -> None:
        """Deletes the caller's config ``config_id`` of the task, or all of
        them when it is ``None``; a missing one is no error."""
        owner = self._owner_resolver(context)
        await self._workers.run(self.delete_sync, owner, task_id, config_id)

    # The same, blocking, for callers outside an event loop.

    def set_sync(
        self, owner: str, task_id: str, config: TaskPushNotificationConfig
    ) -> TaskPushNotificationConfig:
        stored = normalize_push_notification_config(task_id, config)
        key = (owner, task_id)
        with self._cache.stripe(key):
            configs = self._load(key)
            if not configs:
                self._add_owner(owner, task_id)
            self._append(key, {FORMAT_KEY: FORMAT, "set": _config_json(stored)})
            self._cache.put(key, [c for c in configs if c.id != stored.id] + [_copy(stored)])
        return _copy(stored)

    def get_sync(self, owner: str, task_id: str) -> list[TaskPushNotificationConfig]:
        key = (owner, task_id)
        with self._cache.stripe(key):
            return [_copy(c) for c in self._load(key)]

    def dispatch_sync(self, task_id: str) -> list[TaskPushNotificationConfig]:
        found: list[TaskPushNotificationConfig] = []
        for owner in self._owners(task_id):
            found.extend(self.get_sync(owner, task_id))
        return found

    def delete_sync(self, owner: str, task_id: str, config_id: str | None) -> None:
        key = (owner, task_id)
        with self._cache.stripe(key):
            configs = self._load(key)
            if config_id is None:
                if not configs:
                    return
                self._append(key, {FORMAT_KEY: FORMAT, "deleteAll": True})
                self._cache.put(key, [])
                return
            if not any(c.id == config_id for c in configs):
                return
            self._append(key, {FORMAT_KEY: FORMAT, "delete": config_id})
            self._cache.put(key, [c for c in configs if c.id != config_id])

    # Inside.

    def _append(self, key: tuple[str, str], record: dict[str, Any]) -> None:
        owner, task_id = key
        self._store.append_message(owner, PUSH_CONTEXT_PREFIX + task_id, dumps(record))

    def _load(self, key: tuple[str, str]) -> list[TaskPushNotificationConfig]:
        """The task's configs of this owner (the caller holds its stripe)."""
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        owner, task_id = key
        configs = _replay(_records(self._store, owner, PUSH_CONTEXT_PREFIX + task_id))
        self._cache.put(key, configs)
        return configs

    def _owners(self, task_id: str) -> list[str]:
        """Who has set a config for the task, in the order they first did
        (read once, then kept)."""
        owners = self._owners_of.get(task_id)
        if owners is None:
            with self._owners_of.stripe(task_id):
                owners = self._read_owners(task_id)
        return owners

    def _add_owner(self, owner: str, task_id: str) -> None:
        """Lists ``owner`` among those with configs for the task, once."""
        with self._owners_of.stripe(task_id):
            owners = self._read_owners(task_id)
            if owner not in owners:
                self._store.append_message(
                    DISPATCH_TENANT, "owners:" + task_id, dumps({FORMAT_KEY: FORMAT, "owner": owner})
                )
                self._owners_of.put(task_id, owners + [owner])

    def _read_owners(self, task_id: str) -> list[str]:
        """The task's owners, kept or read from the store (the caller holds
        the task's stripe of ``_owners_of``)."""
        owners = self._owners_of.get(task_id)
        if owners is not None:
            return owners
        owners = []
        for record in _records(self._store, DISPATCH_TENANT, "owners:" + task_id):
            owner = record.get("owner")
            if record.get(FORMAT_KEY) != FORMAT or not isinstance(owner, str):
                raise Error(f"a push dispatch record of an unknown form: {record!r}")
            if owner not in owners:
                owners.append(owner)
        self._owners_of.put(task_id, owners)
        return owners


def _records(store: Store, tenant: str, context_id: str) -> list[dict[str, Any]]:
    try:
        history = store.history(tenant, context_id)
    except ContextNotFound:
        return []
    return [json.loads(raw) for _, _, raw in history]


def _copy(config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
    out = TaskPushNotificationConfig()
    out.CopyFrom(config)
    return out
