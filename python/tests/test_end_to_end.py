"""An a2a-sdk server on CtxlogTaskStore (examples/python/a2a_server.py, its
own process),
driven by the a2a-sdk client over JSON-RPC and HTTP+JSON: send, stream,
get, list, cancel; then the server is killed with SIGKILL and started again
on the same directory, and every task is there as it was."""

import contextlib
import os
import signal
import subprocess
import sys
import uuid

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python", "a2a_server.py")


@contextlib.contextmanager
def server(directory):
    """The server process on `directory`, and its URL; stopped (by the pid
    started here) at the end."""
    proc = subprocess.Popen(
        [sys.executable, SERVER, "--dir", directory, "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()  # the server prints its URL once it listens
        if not line.startswith("listening on http://127.0.0.1:"):
            pytest.fail(f"the server did not start: {line!r}, exit {proc.poll()}")
        yield proc, line.split()[-1]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@contextlib.asynccontextmanager
async def client(url, binding, streaming):
    http = httpx.AsyncClient(timeout=30)
    config = ClientConfig(streaming=streaming, httpx_client=http, supported_protocol_bindings=[binding])
    try:
        yield await create_client(url, client_config=config)
    finally:
        await http.aclose()


def message(text, context_id=None):
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if context_id:
        m.context_id = context_id
    return m


async def test_tasks_outlive_a_killed_server(tmp_path):
    directory = str(tmp_path / "store")
    with server(directory) as (proc, url):
        # Streaming over JSON-RPC: the task, then its updates, in order.
        async with client(url, "JSONRPC", streaming=True) as c:
            events = [e async for e in c.send_message(SendMessageRequest(message=message("refund 42")))]
            first = events[0].task
            assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
            assert any(e.HasField("artifact_update") for e in events)
            done = await c.get_task(GetTaskRequest(id=first.id))
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert [p.text for p in done.artifacts[0].parts] == ["part one", "part two"]
            assert done.history[0].parts[0].text == "refund 42"
        # Blocking over HTTP+JSON: a task waiting for input, then canceled.
        async with client(url, "HTTP+JSON", streaming=False) as c:
            [event] = [e async for e in c.send_message(
                SendMessageRequest(message=message("ask me", context_id=done.context_id)))]
            waiting = event.task
            assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            canceled = await c.cancel_task(CancelTaskRequest(id=waiting.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            listed = await c.list_tasks(ListTasksRequest(context_id=done.context_id))
            assert listed.total_size == 2
            before = {t.id: t for t in listed.tasks}
            assert set(before) == {done.id, waiting.id}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL

    with server(directory) as (proc, url):
        async with client(url, "JSONRPC", streaming=False) as c:
            after = await c.list_tasks(ListTasksRequest(context_id=done.context_id))
            assert {t.id: t for t in after.tasks} == before
            assert await c.get_task(GetTaskRequest(id=done.id)) == done
            # The server goes on where it was: a follow-up in the same context.
            [event] = [e async for e in c.send_message(
                SendMessageRequest(message=message("one more", context_id=done.context_id)))]
            assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
            assert (await c.list_tasks(ListTasksRequest(context_id=done.context_id))).total_size == 3
        # A graceful stop closes the store (uvicorn then exits by the signal).
        proc.terminate()
        assert proc.stdout.read().strip() == "store closed"
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
