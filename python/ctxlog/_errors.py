"""The exceptions of ctxlog: one class per kind of the engine's error
(the variants of the Rust ``ctxlog::Error``), all under :class:`Error`.

They are defined here, in Python, so that they belong to the ``ctxlog``
module (tracebacks read ``ctxlog.TaskNotFound``), pickle and unpickle like
any exception, and can be caught with the built-in class they resemble
(``except LookupError`` catches the three *NotFound kinds, ``except
ValueError`` catches :class:`InvalidParams` and :class:`ContextRejected`).
The native module raises them by name.
"""

from __future__ import annotations


class Error(Exception):
    """Every error of ctxlog. ``str(e)`` says what went wrong and what to do."""

    __module__ = "ctxlog"


# What the caller asked for.


class InvalidParams(Error, ValueError):
    """An argument is out of range; the message names it and what is accepted."""

    __module__ = "ctxlog"


class ContextRejected(Error, ValueError):
    """The contextId cannot be honoured (empty, too long, expired or deleted)."""

    __module__ = "ctxlog"


class ContextNotFound(Error, LookupError):
    """No context of that id exists for this tenant."""

    __module__ = "ctxlog"


class TaskNotFound(Error, LookupError):
    """No task of that id exists for this tenant."""

    __module__ = "ctxlog"


class UnsupportedOperation(Error):
    """The operation is not allowed on the task in its state (a message to
    a finished task: send a new message in its context instead)."""

    __module__ = "ctxlog"


class TaskNotCancelable(Error):
    """The task is finished and cannot be canceled."""

    __module__ = "ctxlog"


class IdempotencyConflict(Error):
    """A messageId already used in its scope, sent again with other content."""

    __module__ = "ctxlog"


class ContextBusy(Error):
    """The context's single active turn is held by another task."""

    __module__ = "ctxlog"


# The store and its files.


class StoreNotFound(Error, LookupError):
    """There is no store at the path, and the open was not to create one."""

    __module__ = "ctxlog"


class Locked(Error):
    """Another process (or another Store in this one) holds the store open;
    open it with ``read_only=True`` to read beside it."""

    __module__ = "ctxlog"


class ReadOnly(Error):
    """A write to a store opened with ``read_only=True``."""

    __module__ = "ctxlog"


class Io(Error):
    """A file operation failed; the message names the file and the cause."""

    __module__ = "ctxlog"


class Poisoned(Error):
    """An earlier sync failed, so the store refuses writes: close it and
    open it again."""

    __module__ = "ctxlog"


class UnsupportedFormat(Error):
    """The store holds a segment of a format version this build cannot read."""

    __module__ = "ctxlog"


class Corrupt(Error):
    """Bytes on disk fail their checksum or framing before the torn tail;
    ``recovery="skip-corrupt"`` opens what is readable."""

    __module__ = "ctxlog"


class MissingRecords(Error):
    """Acknowledged records are missing from a segment of the store."""

    __module__ = "ctxlog"


class ForeignFile(Error):
    """A file in the store's directory belongs to another store."""

    __module__ = "ctxlog"


KINDS = tuple(
    cls for cls in list(globals().values()) if isinstance(cls, type) and issubclass(cls, Error)
)
