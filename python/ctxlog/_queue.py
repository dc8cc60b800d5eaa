"""The write queue of ``ctxlog.langgraph``: records of a context queued
under its lock, then appended together, so that calls on one context that
overlap share one sync.

A caller builds its record from the context as it is in memory, queued
records included, under the context's lock; queues it here with the seq
it predicts for it (the last seq it knows, plus one:
:meth:`WriteQueue.put`) and applies it there with that seq; lets the
context's lock go; and then waits
(:meth:`WriteQueue.wait`) until a flush has made its record durable. One
caller at a time (per stripe of contexts) flushes: it takes every record
queued for the context and appends them with one ``append_messages``, so
one sync. A reader flushes first (:meth:`WriteQueue.flush`, under the
context's lock), so nothing is read before it is durable.

What the queue cannot repair it hands back to its owner (``lost``,
called with the context's id): after a failed flush, the records queued
behind the failed ones were built on records that never landed, so they
fail too, and the owner's copy of the context in memory is dropped, to be
read again from the store; after a flush whose seqs were not those
predicted, the copy is dropped too (the records landed, but the copy's
seqs are wrong). A caller whose copy was dropped while it built its record
is refused (``put`` returns None) and builds it again.

Locks, always taken in this order: the context's (the owner's), a
stripe's flush lock, the stripe's mutex, then whatever ``valid`` and
``lost`` take. A flush never takes a context's lock, so a reader holding
one may flush.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import Store

__all__ = ["DONE", "Ticket", "WriteQueue"]


class Ticket:
    """A queued record's outcome: whether a flush has covered it, and the
    error it failed with, if it did."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = False
        self.error: BaseException | None = None


# The ticket of a record stored at once, not queued: waiting for it
# returns at once (no flush ever changes it).
DONE = Ticket()
DONE.done = True


class _Pending:
    """What is queued for one context: the records, in order, their
    tickets, and the seq predicted for the first of them."""

    __slots__ = ("records", "tickets", "first")

    def __init__(self, first: int) -> None:
        self.records: list[bytes] = []
        self.tickets: list[Ticket] = []
        self.first = first


class _Stripe:
    __slots__ = ("flush", "mutex", "pending")

    def __init__(self) -> None:
        self.flush = threading.Lock()
        self.mutex = threading.Lock()
        self.pending: dict[str, _Pending] = {}


class WriteQueue:
    """The queue of every context of one tenant of `store`; `stripe`
    gives a context's stripe (the owner's lock stripe, so two contexts
    that share a lock share a flush lock too); `lost` drops the owner's
    copy of a context."""

    def __init__(self, store: Store, tenant: str, stripes: int, stripe: Callable[[str], int],
                 lost: Callable[[str], None]) -> None:
        self._store = store
        self._tenant = tenant
        self._stripes = [_Stripe() for _ in range(stripes)]
        self._stripe = stripe
        self._lost = lost

    def put(self, context: str, record: bytes, seq: int, valid: Callable[[], bool]) -> Ticket | None:
        """Queues `record`, predicted to get seq `seq`, if `valid()` says
        the copy it was built on is still the owner's (checked with the
        queue held, so a failed flush cannot come in between); else
        None. The caller holds the context's lock, and applies the record
        to its copy once it is queued."""
        s = self._stripes[self._stripe(context)]
        with s.mutex:
            if not valid():
                return None
            pending = s.pending.get(context)
            if pending is None:
                pending = s.pending[context] = _Pending(seq)
            elif pending.first + len(pending.records) != seq:
                # A seq the queue does not follow from: the owner's copy
                # is wrong. Nothing queued yet is lost; only this call
                # builds again, on a copy read after a flush.
                self._lost(context)
                return None
            ticket = Ticket()
            pending.records.append(record)
            pending.tickets.append(ticket)
            return ticket

    def wait(self, context: str, ticket: Ticket) -> None:
        """Returns once a flush has made `ticket`'s record durable
        (flushing the context if none has yet); raises the error its flush
        failed with. The caller holds no context's lock."""
        if not ticket.done:
            s = self._stripes[self._stripe(context)]
            with s.flush:
                if not ticket.done:
                    self._flush(s, context)
        if ticket.error is not None:
            raise ticket.error

    def flush(self, context: str) -> None:
        """Makes every record queued for `context` durable; raises if that
        fails (and the owner's copy is then dropped)."""
        s = self._stripes[self._stripe(context)]
        with s.flush:
            self._flush(s, context)

    def _flush(self, s: _Stripe, context: str) -> None:
        with s.mutex:
            pending = s.pending.pop(context, None)
        if pending is None:
            return
        try:
            appended = self._store.append_messages(self._tenant, context, pending.records)
        except BaseException as e:
            with s.mutex:
                # Everything queued behind the failed records fails with
                # them, and the copy they were applied to is dropped
                # before another call can queue on it.
                behind = s.pending.pop(context, None)
                self._lost(context)
            for ticket in pending.tickets + (behind.tickets if behind else []):
                ticket.error, ticket.done = e, True  # the error first: `wait` reads `done` unlocked
            raise
        if [seq for seq, _ in appended] != list(range(pending.first, pending.first + len(appended))):
            with s.mutex:
                self._lost(context)
        for ticket in pending.tickets:
            ticket.done = True
