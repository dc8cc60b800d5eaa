"""Threads that run a store's blocking calls for an event loop, shared by
``ctxlog.a2a``, ``ctxlog.agents`` and ``ctxlog.langgraph``; and the store
and threads an adapter with threads of its own holds."""

from __future__ import annotations

import asyncio
import json
import queue
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from . import Error, Store

__all__ = ["Cache", "StoreUser", "Stripes", "Workers", "dumps"]


class Workers:
    """Threads that run the store's blocking calls for the event loop.

    ``asyncio.to_thread`` does the same through an executor and its futures;
    a queue and the loop's own future take half its time (about 45 µs
    against 85 here), which is a fair part of a save. Started at the first
    call, stopped by :meth:`stop`; calls for different tasks run in
    parallel, since the store releases the GIL."""

    def __init__(self, count: int, name: str) -> None:
        self._count = count
        self._name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stopped = False

    async def run(self, fn: Any, *args: Any) -> Any:
        return await self.submit(fn, *args)

    def submit(self, fn: Any, *args: Any) -> asyncio.Future[Any]:
        """Queues ``fn(*args)`` for a thread; its answer settles the
        future returned (of the running loop), unless that was cancelled."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        with self._lock:
            if self._stopped:
                raise Error(f"{self._name} is closed; make a new one")
            if not self._threads:
                for _ in range(self._count):
                    thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                    thread.start()
                    self._threads.append(thread)
        self._jobs.put((loop, done, fn, args))
        return done

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            loop, done, fn, args = job
            try:
                result, error = fn(*args), None
            except BaseException as e:  # handed to the caller, as to_thread does
                result, error = None, e
            try:
                loop.call_soon_threadsafe(_settle, done, result, error)
            except RuntimeError:
                pass  # the loop was closed meanwhile: nobody waits for it
            # An idle thread holds nothing of the last job (its function
            # may be a method of an object its owner has dropped).
            del job, loop, done, fn, args, result, error

    def stop(self) -> None:
        """Stops the threads once their jobs are done; :meth:`run` raises
        from then on."""
        with self._lock:
            self._stopped = True
            threads, self._threads = self._threads, []
        for _ in threads:
            self._jobs.put(None)


def _settle(done: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if done.cancelled():
        return
    if error is None:
        done.set_result(result)
    else:
        done.set_exception(error)


class StoreUser:
    """A framework adapter's store (opened here from a directory, and then
    closed by :meth:`close`; or an open :class:`ctxlog.Store`, left open)
    and its worker threads."""

    def __init__(self, store: str | os.PathLike[str] | Store, durability: str, workers: int, name: str) -> None:
        if isinstance(store, Store):
            self._store, self._owns_store = store, False
        else:
            self._store, self._owns_store = Store(store, durability=durability), True  # type: ignore[arg-type]
        self._workers = Workers(workers, name)
        # Dropped without close(), the object still stops its threads and
        # closes the store it opened (so its lock is let go) when collected.
        self._release = weakref.finalize(
            self, _release, self._workers, self._store if self._owns_store else None
        )

    @property
    def store(self) -> Store:
        """The ctxlog store this keeps its data in."""
        return self._store

    def close(self) -> None:
        """Stops the worker threads, and closes the store if this object
        opened it. Closing twice does nothing."""
        self._release()


def _release(workers: Workers, store: Store | None) -> None:
    workers.stop()
    if store is not None:
        store.close()


class Stripes:
    """A lock per stripe of keys: ``stripes(key)`` is ``key``'s, so that
    two callers of one key take turns and callers of others mostly do not
    wait."""

    _COUNT = 64

    def __init__(self) -> None:
        self._locks = [threading.Lock() for _ in range(self._COUNT)]

    def __call__(self, key: Hashable) -> threading.Lock:
        return self._locks[hash(key) % self._COUNT]


class Cache:
    """Values recently used, by key (at most ``size``), and a lock per
    stripe of keys, which a caller holds while it reads a key's value from
    the store, changes it and writes it back, so that two callers of one
    key take turns and callers of others do not wait."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("cache_size must be at least 1")
        self._size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.stripe = Stripes()

    def get(self, key: Hashable) -> Any | None:
        """``key``'s value, now the most recently used; ``None`` if not kept."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        """Keeps ``value`` as ``key``'s, dropping the least recently used
        past the size."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def pop(self, key: Hashable) -> None:
        """Forgets ``key``."""
        with self._lock:
            self._items.pop(key, None)


def dumps(record: Any) -> str:
    """A record's JSON as the adapters store it: compact, UTF-8 as is."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)
