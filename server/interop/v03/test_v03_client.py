"""ctxlog-server driven by a2a-sdk 0.3.26's client, over v0.3's JSON-RPC
and HTTP+JSON bindings (every answer and event checked strictly as it
arrives, strict03.py), and a task shared with a2a-sdk 1.3.0's client."""

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    GetTaskPushNotificationConfigParams,
    Message,
    Part,
    PushNotificationConfig,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskIdParams,
    TaskPushNotificationConfig,
    TaskQueryParams,
    TaskState,
    TaskStatusUpdateEvent,
    TextPart,
)

import strict03
from conftest import TOKEN

pytestmark = pytest.mark.asyncio(loop_scope="function")

BINDINGS = ["JSONRPC", "HTTP+JSON"]
HERE = os.path.dirname(os.path.abspath(__file__))


def http_client():
    return httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30,
                             transport=strict03.Checking())


@contextlib.asynccontextmanager
async def client(url, binding, streaming=True, polling=False):
    """A 0.3.26 client of `binding`, from the card as it resolves it."""
    async with http_client() as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        config = ClientConfig(httpx_client=http, supported_transports=[binding],
                              streaming=streaming, polling=polling)
        yield ClientFactory(config).create(card)


def message(text, task_id=None, context_id=None, message_id=None):
    return Message(message_id=message_id or str(uuid.uuid4()), role=Role.user,
                   parts=[Part(root=TextPart(text=text))], task_id=task_id, context_id=context_id)


def text_of(m):
    return m.parts[0].root.text


async def events(c, m):
    return [e async for e in c.send_message(m)]


async def test_the_card_serves_both_versions(server):
    async with http_client() as http:
        card = await A2ACardResolver(http, server.url).get_agent_card()
        assert card.url == server.url + "/" and card.preferred_transport == "JSONRPC"
        assert {i.transport for i in card.additional_interfaces} == {"JSONRPC", "HTTP+JSON"}
        assert card.capabilities.streaming
        raw = (await http.get(server.url + "/.well-known/agent-card.json")).json()
        versions = {(i["protocolBinding"], i["protocolVersion"]) for i in raw["supportedInterfaces"]}
        assert versions == {(b, v) for b in ("JSONRPC", "HTTP+JSON") for v in ("1.0", "0.3")}
        assert raw["securitySchemes"]["bearer"]["type"] == "http"
        v1 = (await http.get(server.url + "/.well-known/agent-card.json",
                             headers={"A2A-Version": "1.0"})).json()
        assert "url" not in v1 and "httpAuthSecurityScheme" in v1["securitySchemes"]["bearer"]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_send_get_and_a_direct_reply(server, binding):
    async with client(server.url, binding, streaming=False) as c:
        [(task, _)] = await events(c, message("plain work"))
        assert task.status.state == TaskState.completed
        assert text_of(task.status.message) == "done: plain work"
        assert task.history[0].role == Role.user and text_of(task.history[0]) == "plain work"
        got = await c.get_task(TaskQueryParams(id=task.id, history_length=1))
        assert len(got.history) == 1 and got.history[0].role == Role.agent
        [reply] = await events(c, message("hello there"))
        assert isinstance(reply, Message) and reply.role == Role.agent
        assert text_of(reply) == "hi! you said: hello there"
    assert strict03.checked["bodies"] >= 3


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_stream_carries_kinds_and_final(server, binding):
    before = strict03.checked["events"]
    async with client(server.url, binding) as c:
        got = await events(c, message("chunks please"))
    updates = [u for _, u in got if u is not None]
    assert isinstance(got[0][0], Task) and got[0][1] is None
    statuses = [u for u in updates if isinstance(u, TaskStatusUpdateEvent)]
    artifacts = [u for u in updates if isinstance(u, TaskArtifactUpdateEvent)]
    assert [s.final for s in statuses] == [False] * (len(statuses) - 1) + [True]
    assert statuses[-1].status.state == TaskState.completed
    assert len(artifacts) == 3 and artifacts[-1].last_chunk
    task = got[-1][0]
    assert [p.root.text for p in task.artifacts[0].parts[:2]] == ["part one", "part two"]
    assert strict03.checked["events"] - before == len(got)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_and_resubscribe(server, binding):
    async with client(server.url, binding, streaming=False, polling=True) as c:
        [(task, _)] = await events(c, message("slow one"))
        assert task.status.state in (TaskState.submitted, TaskState.working)
    async with client(server.url, binding) as watcher, client(server.url, binding) as canceller:
        stream = watcher.resubscribe(TaskIdParams(id=task.id))
        first_task, _ = await asyncio.wait_for(anext(stream), 10)
        assert first_task.id == task.id
        canceled = await canceller.cancel_task(TaskIdParams(id=task.id))
        assert canceled.status.state == TaskState.canceled

        async def rest_of_stream():
            return [e async for e in stream]

        rest = await asyncio.wait_for(rest_of_stream(), 10)
        last = rest[-1][1]
        assert isinstance(last, TaskStatusUpdateEvent) and last.final
        assert last.status.state == TaskState.canceled


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_input_required_follow_up(server, binding):
    async with client(server.url, binding) as c:
        asked = await events(c, message("a question"))
        task, last = asked[-1]
        # The stream ends at the question (its task, or a final update).
        assert last is None or last.final
        assert task.status.state == TaskState.input_required
        assert text_of(task.status.message) == "which one?"
        answered = await events(c, message("the blue one", task_id=task.id,
                                           context_id=task.context_id))
        task = answered[-1][0]
        assert task.status.state == TaskState.completed
        assert text_of(task.status.message) == "done: the blue one"
        users = [text_of(m) for m in task.history if m.role == Role.user]
        assert users == ["a question", "the blue one"]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_resend_after_kill_9_is_the_same_task(fresh_server, binding):
    sent = message("kept across a crash")
    async with client(fresh_server.url, binding, streaming=False) as c:
        [(first, _)] = await events(c, sent)
    assert first.status.state == TaskState.completed
    fresh_server.kill9()
    fresh_server.start()
    async with client(fresh_server.url, binding, streaming=False) as c:
        [(again, _)] = await events(c, sent)
        assert again.id == first.id and again.status.state == TaskState.completed
        # The agent ran once: one answer in the history.
        agents = [m for m in again.history if m.role == Role.agent]
        assert len(agents) == len([m for m in first.history if m.role == Role.agent])
        # Changed content under the same messageId is refused.
        changed = message("other words", message_id=sent.message_id)
        with pytest.raises(Exception):
            await events(c, changed)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_push_configs(push_server, binding):
    async with client(push_server.url, binding, streaming=False, polling=True) as c:
        [(task, _)] = await events(c, message("slow for push"))
        config = PushNotificationConfig(id="hook-1", url="http://127.0.0.1:9/hook", token="tok")
        made = await c.set_task_callback(TaskPushNotificationConfig(
            task_id=task.id, push_notification_config=config))
        assert made.task_id == task.id and made.push_notification_config.url == config.url
        got = await c.get_task_callback(GetTaskPushNotificationConfigParams(
            id=task.id, push_notification_config_id="hook-1"))
        assert got.push_notification_config.token == "tok"
        await c.cancel_task(TaskIdParams(id=task.id))


@contextlib.contextmanager
def receiver():
    """A webhook on loopback: yields its URL and the (token, body) of each POST."""
    import http.server
    import threading

    got = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.headers.get("X-A2A-Notification-Token"), body.decode()))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/hook", got
    finally:
        httpd.shutdown()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_v03_config_is_delivered_v03_events(push_server, binding):
    with receiver() as (url, got):
        async with client(push_server.url, binding, streaming=False, polling=True) as c:
            [(task, _)] = await events(c, message("slow, pushed"))
            config = PushNotificationConfig(id="v03-hook", url=url, token="tok-03")
            await c.set_task_callback(TaskPushNotificationConfig(
                task_id=task.id, push_notification_config=config))
            await c.cancel_task(TaskIdParams(id=task.id))
        for _ in range(200):
            if any('"final":true' in body for _, body in got):
                break
            await asyncio.sleep(0.05)
    bodies = [body for _, body in got]
    assert bodies, "nothing was delivered"
    assert all(token == "tok-03" for token, _ in got)
    last = TaskStatusUpdateEvent.model_validate_json(bodies[-1], strict=True)
    assert last.final and last.status.state == TaskState.canceled and last.task_id == task.id


async def rpc(url, method, params, headers=None):
    async with http_client() as http:
        r = await http.post(url + "/", headers=headers or {}, json={
            "jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        return r.json()


async def test_push_list_and_delete_and_push_off(server, push_server):
    async with client(push_server.url, "JSONRPC", streaming=False, polling=True) as c:
        [(task, _)] = await events(c, message("slow to list"))
    params = {"taskId": task.id, "pushNotificationConfig": {
        "id": "h", "url": "http://127.0.0.1:9/h",
        "authentication": {"schemes": ["Bearer"], "credentials": "secret"}}}
    made = await rpc(push_server.url, "tasks/pushNotificationConfig/set", params)
    assert made["result"]["pushNotificationConfig"]["authentication"]["schemes"] == ["Bearer"]
    listed = await rpc(push_server.url, "tasks/pushNotificationConfig/list", {"id": task.id})
    assert [c["pushNotificationConfig"]["id"] for c in listed["result"]] == ["h"]
    gone = await rpc(push_server.url, "tasks/pushNotificationConfig/delete",
                     {"id": task.id, "pushNotificationConfigId": "h"})
    assert gone["result"] is None
    listed = await rpc(push_server.url, "tasks/pushNotificationConfig/list", {"id": task.id})
    assert listed["result"] == []
    await rpc(push_server.url, "tasks/cancel", {"id": task.id})
    off = await rpc(server.url, "tasks/pushNotificationConfig/get", {"id": task.id})
    assert off["error"]["code"] == -32003


async def test_errors_in_v03s_shape(server):
    missing = await rpc(server.url, "tasks/get", {"id": "no-such-task"})
    assert missing["error"]["code"] == -32001
    v1_name = await rpc(server.url, "SendMessage", {"message": {}})
    assert v1_name["error"]["code"] == -32601
    assert "A2A-Version: 1.0" in v1_name["error"]["message"]
    # The same endpoint serves v1.0 to a client that says so.
    v1 = await rpc(server.url, "GetTask", {"id": "no-such-task"}, headers={"A2A-Version": "1.0"})
    assert v1["error"]["code"] == -32001
    card = await rpc(server.url, "agent/getAuthenticatedExtendedCard", {})
    assert card["error"]["code"] == -32007
    bad = await rpc(server.url, "message/send", {"message": {
        "kind": "message", "messageId": "x", "role": "user", "parts": [{"kind": "image"}]}})
    assert bad["error"]["code"] == -32602 and "parts[0]" in bad["error"]["message"]


def v1_side(url, *args):
    """Runs v1_side.py (a2a-sdk 1.3.0's client) in the venv CTXLOG_V1_PYTHON names."""
    python = os.environ.get("CTXLOG_V1_PYTHON")
    if not python or not os.path.exists(python):
        pytest.fail("set CTXLOG_V1_PYTHON to the python of the a2a-sdk 1.3.0 venv")
    return subprocess.Popen([python, os.path.join(HERE, "v1_side.py"), url, TOKEN, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def output(proc):
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    return json.loads(out)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_task_begun_over_v03_goes_on_over_v10(server, binding):
    """Started by a v0.3 client, subscribed by both versions, answered by a
    v1.0 client: both subscribers see the same events, each in its form."""
    async with client(server.url, binding) as c:
        asked = await events(c, message("a question for two"))
        task = asked[-1][0]
        assert task.status.state == TaskState.input_required
        # The v1.0 client reads the task the v0.3 one began.
        read = output(v1_side(server.url, "get", task.id))
        assert read["id"] == task.id and read["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert read["history"][0]["parts"][0]["text"] == "a question for two"
        with tempfile.TemporaryDirectory() as tmp:
            ready = os.path.join(tmp, "ready")
            v1_sub = v1_side(server.url, "subscribe", task.id, ready)
            v03_sub = c.resubscribe(TaskIdParams(id=task.id))
            # (The client updates one task object as events come: each
            # event's shape is taken as it arrives.)
            v03_shape = [shape_v03(*await asyncio.wait_for(anext(v03_sub), 10))]
            for _ in range(600):
                if os.path.exists(ready) or v1_sub.poll() is not None:
                    break
                await asyncio.sleep(0.05)
            assert os.path.exists(ready), v1_sub.stderr.read() if v1_sub.poll() is not None else ""
            answered = output(v1_side(server.url, "send", task.id, "the red one"))
            assert answered["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

            async def rest_of_stream():
                return [shape_v03(t, u) async for t, u in v03_sub]

            v03_shape += await asyncio.wait_for(rest_of_stream(), 20)
            v1_events = output(v1_sub)
    v1_shape = [shape_v1(e) for e in v1_events]
    assert v03_shape == v1_shape, (v03_shape, v1_shape)
    assert v03_shape[-1] == ("status", "completed")


def shape_v03(task, update):
    if update is None:
        return ("task", task.status.state.value)
    if isinstance(update, TaskStatusUpdateEvent):
        return ("status", update.status.state.value)
    return ("artifact", update.artifact.artifact_id)


V1_STATES = {"TASK_STATE_" + s.upper().replace("-", "_"): s for s in
             ("submitted", "working", "input-required", "completed", "canceled", "failed",
              "rejected", "auth-required")}


def shape_v1(event):
    if "task" in event:
        return ("task", V1_STATES[event["task"]["status"]["state"]])
    if "statusUpdate" in event:
        return ("status", V1_STATES[event["statusUpdate"]["status"]["state"]])
    return ("artifact", event["artifactUpdate"]["artifact"]["artifactId"])
