"""ctxlog-server driven by the official Python client (a2a-sdk), over
JSON-RPC and over HTTP+JSON: every test runs on both bindings."""

import asyncio
import contextlib
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
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError

import strict
from conftest import TOKENS

pytestmark = pytest.mark.asyncio(loop_scope="function")

BINDINGS = ["JSONRPC", "HTTP+JSON"]


@contextlib.asynccontextmanager
async def client(server, binding, tenant="alice", streaming=True, polling=False):
    """An a2a-sdk client of `binding`, authenticated as `tenant`."""
    http = httpx.AsyncClient(
        headers={"Authorization": f"Bearer {TOKENS[tenant]}"},
        timeout=30,
        # Every answer that is not a stream, parsed the strict way.
        event_hooks={"response": [strict.httpx_hook]},
    )
    config = ClientConfig(
        streaming=streaming,
        polling=polling,
        httpx_client=http,
        supported_protocol_bindings=[binding],
    )
    try:
        yield await create_client(server, client_config=config)
    finally:
        await http.aclose()


def message(text, context_id=None, task_id=None, message_id=None):
    m = Message(
        message_id=message_id or str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
    )
    if context_id:
        m.context_id = context_id
    if task_id:
        m.task_id = task_id
    return m


async def events_of(c, request):
    return [e async for e in c.send_message(request)]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_blocking_send_get_with_history_length(server, binding):
    async with client(server, binding, streaming=False) as c:
        [event] = await events_of(c, SendMessageRequest(message=message("plain work")))
        task = event.task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert task.status.message.parts[0].text == "done: plain work"
        got = await c.get_task(GetTaskRequest(id=task.id, history_length=1))
        assert len(got.history) == 1
        assert got.history[0].role == Role.ROLE_AGENT
        full = await c.get_task(GetTaskRequest(id=task.id))
        assert [m.parts[0].text for m in full.history] == ["plain work", "done: plain work"]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_streaming_send_sends_the_task_then_its_updates_in_order(server, binding):
    async with client(server, binding) as c:
        events = await events_of(c, SendMessageRequest(message=message("chunks please")))
        assert events[0].HasField("task")
        kinds = [e.WhichOneof("payload") for e in events[1:]]
        assert kinds[-1] == "status_update"
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        assert "artifact_update" in kinds
        task = await c.get_task(GetTaskRequest(id=events[0].task.id))
        [report] = task.artifacts
        texts = [p.text for p in report.parts if p.HasField("text")]
        assert texts == ["part one", "part two"]
        assert len(report.parts) == 3


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_direct_reply_is_a_message(server, binding):
    async with client(server, binding, streaming=False) as c:
        [event] = await events_of(c, SendMessageRequest(message=message("hello there")))
        assert event.HasField("message")
        assert event.message.parts[0].text == "hi! you said: hello there"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_pages_with_cursors(server, binding):
    async with client(server, binding, streaming=False) as c:
        context = f"list-{binding}-{uuid.uuid4()}"
        sent = []
        for i in range(5):
            [e] = await events_of(c, SendMessageRequest(message=message(f"item {i}", context_id=context)))
            sent.append(e.task.id)
        seen, token, pages = [], "", 0
        while True:
            page = await c.list_tasks(ListTasksRequest(context_id=context, page_size=2, page_token=token))
            assert page.total_size == 5
            seen += [t.id for t in page.tasks]
            pages += 1
            token = page.next_page_token
            if not token:
                break
            assert pages < 10
        assert pages == 3
        assert sorted(seen) == sorted(sent)
        assert seen == list(reversed(sent)) or len(set(seen)) == 5


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_a_running_task(server, binding):
    async with client(server, binding, streaming=False, polling=True) as c:
        [event] = await events_of(c, SendMessageRequest(message=message("slow one")))
        task = event.task
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
        canceled = await c.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        got = await c.get_task(GetTaskRequest(id=task.id))
        assert got.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(UnsupportedOperationError):
            await events_of(c, SendMessageRequest(message=message("more", task_id=task.id)))


@pytest.mark.parametrize("binding", BINDINGS)
async def test_two_subscribers_see_the_same_events(server, binding):
    async with client(server, binding, streaming=False, polling=True) as c, client(
        server, binding
    ) as a, client(server, binding) as b:
        [event] = await events_of(c, SendMessageRequest(message=message("chunks for two")))
        task_id = event.task.id

        async def follow(x):
            return [e async for e in x.subscribe(SubscribeToTaskRequest(id=task_id))]

        first, second = await asyncio.gather(follow(a), follow(b))
        assert first[0].HasField("task") and second[0].HasField("task")
        assert first[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        # Whatever each saw in its snapshot, the updates after it agree.
        tail = lambda events: [e.SerializeToString() for e in events[1:]]
        shorter, longer = sorted([tail(first), tail(second)], key=len)
        assert longer[len(longer) - len(shorter):] == shorter


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_resent_message_id_gets_the_same_task_without_a_second_turn(server, binding):
    async with client(server, binding, streaming=False) as c:
        mid = str(uuid.uuid4())
        [first] = await events_of(c, SendMessageRequest(message=message("once only", message_id=mid)))
        [again] = await events_of(c, SendMessageRequest(message=message("once only", message_id=mid)))
        assert again.task.id == first.task.id
        assert len(again.task.history) == len(first.task.history) == 2


@pytest.mark.parametrize("binding", BINDINGS)
async def test_tenants_never_see_each_others_tasks(server, binding):
    async with client(server, binding, "alice", streaming=False) as alice, client(
        server, binding, "bob", streaming=False
    ) as bob:
        context = f"private-{uuid.uuid4()}"
        [e] = await events_of(alice, SendMessageRequest(message=message("alice's secret", context_id=context)))
        with pytest.raises(TaskNotFoundError):
            await bob.get_task(GetTaskRequest(id=e.task.id))
        with pytest.raises(TaskNotFoundError):
            await bob.cancel_task(CancelTaskRequest(id=e.task.id))
        mine = await bob.list_tasks(ListTasksRequest(context_id=context))
        assert mine.total_size == 0 and len(mine.tasks) == 0
        theirs = await alice.list_tasks(ListTasksRequest(context_id=context))
        assert [t.id for t in theirs.tasks] == [e.task.id]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_interrupted_task_takes_the_follow_up(server, binding):
    async with client(server, binding, streaming=False) as c:
        [e] = await events_of(c, SendMessageRequest(message=message("a question")))
        assert e.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        [f] = await events_of(c, SendMessageRequest(message=message("the blue one", task_id=e.task.id)))
        assert f.task.id == e.task.id
        assert f.task.status.state == TaskState.TASK_STATE_COMPLETED
        with pytest.raises(TaskNotFoundError):
            await c.get_task(GetTaskRequest(id="no-such-task"))
