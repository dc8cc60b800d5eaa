"""Type stubs of the native module (python/src/lib.rs); use it through
the ``ctxlog`` package, which parses the JSON it returns."""

__version__: str
MAX_RECORD_BYTES: int

class Store:
    def __init__(
        self,
        path: str,
        *,
        durability: str = "sync",
        create: bool = True,
        read_only: bool = False,
        recovery: str = "strict",
        retention_seconds: float | None = None,
        lock_wait_seconds: float = 0.5,
    ) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str: ...
    def receive_message(
        self, tenant: str, message: bytes | str, message_ids: str = "idempotent"
    ) -> str: ...
    def apply_event(self, tenant: str, event: bytes | str) -> tuple[str, int]: ...
    def cancel_task(self, tenant: str, task_id: str) -> str: ...
    def get_task(
        self,
        tenant: str,
        task_id: str,
        history_length: int | None = None,
        include_artifacts: bool = True,
    ) -> str: ...
    def list_tasks(
        self,
        tenant: str,
        context_id: str | None = None,
        status: str | None = None,
        status_timestamp_after_ms: int | None = None,
        page_size: int | None = None,
        page_token: str | None = None,
        history_length: int | None = None,
        include_artifacts: bool = False,
    ) -> str: ...
    def events_since(self, tenant: str, task_id: str, after: int = 0) -> str: ...
    def append_message(self, tenant: str, context_id: str, raw: bytes | str) -> tuple[int, int]: ...
    def append_messages(
        self, tenant: str, context_id: str, raws: list[bytes | str]
    ) -> list[tuple[int, int]]: ...
    def pop_message(self, tenant: str, context_id: str) -> tuple[int, int, bytes] | None: ...
    def empty_context(self, tenant: str, context_id: str) -> int: ...
    def last_messages(
        self,
        tenant: str,
        context_id: str,
        n: int | None = None,
        before: int | None = None,
        head: int | None = None,
    ) -> list[tuple[int, int, bytes]]: ...
    def render_history(
        self,
        tenant: str,
        context_id: str,
        before: int | None = None,
        max_bytes: int = 16384,
        max_messages: int = 50,
        include_artifacts: bool = False,
    ) -> str: ...
    def list_contexts(self, tenant: str, page_size: int = 50, page_token: str | None = None) -> str: ...
    def delete_context(self, tenant: str, context_id: str) -> None: ...
    def stats(self) -> str: ...
    def open_report(self) -> str: ...
    def compact(self) -> str: ...
    def sync(self) -> None: ...

def verify(path: str, read_only: bool = False) -> str: ...
