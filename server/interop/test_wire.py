"""ctxlog-server's wire form and the conformance kit's checks, with plain
httpx: every response and every stream event parsed strictly into a2a-sdk's
generated types, media types, the card's headers, members the proto does
not define dropped, direct replies never tasks, messageIds scoped or taken
as labels, and Idempotency-Key replays and conflicts. Each runs on both
bindings."""

import json
import urllib.parse
import uuid

import httpx
import pytest

import strict
from conftest import TOKENS

pytestmark = pytest.mark.asyncio(loop_scope="function")

BINDINGS = ["JSONRPC", "HTTP+JSON"]
AUTH = {"Authorization": f"Bearer {TOKENS['alice']}", "A2A-Version": "1.0"}


def mid():
    return str(uuid.uuid4())


def user(text, message_id=None, **ids):
    m = {"messageId": message_id or mid(), "role": "ROLE_USER", "parts": [{"text": text}]}
    m.update(ids)
    return m


class Caller:
    """Calls one binding of a server, checking every answer strictly."""

    def __init__(self, http, url, binding):
        self.http, self.url, self.binding = http, url, binding

    async def call(self, method, params, headers=None):
        """A non-streaming call: (HTTP status, the result or body, the
        response)."""
        if self.binding == "JSONRPC":
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            r = await self.http.post(self.url + "/", content=body, headers=headers or {})
            data = r.json()
            return r.status_code, data.get("result", data), r
        verb, path, body = rest_route(method, params)
        r = await self.http.request(verb, self.url + path,
                                    content=json.dumps(body) if body is not None else None,
                                    headers={"content-type": "application/json", **(headers or {})})
        return r.status_code, (r.json() if r.content else None), r

    async def stream(self, method, params, headers=None):
        """A stream, read to its end: each event's object (checked)."""
        if self.binding == "JSONRPC":
            verb, path = "POST", "/"
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        else:
            verb, path, payload = rest_route(method, params)
            body = json.dumps(payload) if payload is not None else None
        async with self.http.stream(verb, self.url + path, content=body,
                                    headers={"content-type": "application/json", **(headers or {})}) as r:
            text = (await r.aread()).decode()
        assert r.headers["content-type"].startswith("text/event-stream"), text
        events = []
        for data in strict.sse_events(text):
            strict.check_event(verb, path, body, data)
            obj = json.loads(data)
            events.append(obj.get("result", obj) if self.binding == "JSONRPC" else obj)
        return events


def rest_route(method, params):
    """The HTTP+JSON route of a JSON-RPC method: (verb, path, body)."""
    if method == "SendMessage":
        return "POST", "/message:send", params
    if method == "SendStreamingMessage":
        return "POST", "/message:stream", params
    if method == "GetTask":
        query = f"?historyLength={params['historyLength']}" if "historyLength" in params else ""
        return "GET", f"/tasks/{params['id']}{query}", None
    if method == "CancelTask":
        return "POST", f"/tasks/{params['id']}:cancel", None
    if method == "SubscribeToTask":
        return "GET", f"/tasks/{params['id']}:subscribe", None
    if method == "ListTasks":
        query = urllib.parse.urlencode(params)
        return "GET", "/tasks" + (f"?{query}" if query else ""), None
    raise AssertionError(method)


def task_of(answer):
    return answer["task"]


async def caller(url, binding):
    http = httpx.AsyncClient(headers=AUTH, timeout=30, event_hooks={"response": [strict.httpx_hook]})
    return http, Caller(http, url, binding)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_every_answer_and_event_parses_strictly(server, binding):
    http, c = await caller(server, binding)
    async with http:
        before = dict(strict.checked)
        extras = user("with extras and chunks")
        extras["xClientVersion"] = "9"
        extras["parts"][0]["xTrace"] = {"span": 1}
        _, sent, _ = await c.call("SendMessage", {"message": extras})
        task = task_of(sent)
        assert task["history"][0]["parts"][0] == {"text": "with extras and chunks"}
        assert "xClientVersion" not in task["history"][0]
        _, reply, _ = await c.call("SendMessage", {"message": user("hello wire")})
        assert "message" in reply and "taskId" not in reply["message"]
        await c.call("GetTask", {"id": task["id"], "historyLength": 1})
        await c.call("ListTasks", {"pageSize": 5})
        slow = task_of((await c.call("SendMessage", {
            "message": user("slow one"), "configuration": {"returnImmediately": True}}))[1])
        await c.call("CancelTask", {"id": slow["id"]})
        events = await c.stream("SendStreamingMessage", {"message": user("chunks please")})
        assert events[0].get("task") and events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        resumed = await c.stream("SubscribeToTask", {"id": events[0]["task"]["id"]},
                                 headers={"Last-Event-ID": "0"})
        assert any("artifactUpdate" in e for e in resumed)
        card = await http.get(server + "/.well-known/agent-card.json")
        assert card.status_code == 200
        assert strict.checked["bodies"] - before["bodies"] >= 6
        assert strict.checked["events"] - before["events"] >= len(events) + len(resumed)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_bodies_must_be_json_and_answers_come_in_the_clients_type(server, binding):
    async with httpx.AsyncClient(headers=AUTH, timeout=30) as http:
        path = "/" if binding == "JSONRPC" else "/message:send"
        send = {"message": user("typed")}
        body = (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": send})
                if binding == "JSONRPC" else json.dumps(send))
        refused = await http.post(server + path, content="not json", headers={"content-type": "text/plain"})
        if binding == "JSONRPC":
            assert refused.status_code == 200 and refused.json()["error"]["code"] == -32005
        else:
            assert refused.status_code == 415
            assert refused.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
        # A part whose media type the agent does not take (§3.1.1).
        odd = {"message": {"messageId": mid(), "role": "ROLE_USER",
                           "parts": [{"raw": "dGNr", "mediaType": "application/x-unsupported"}]}}
        odd_body = (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": odd})
                    if binding == "JSONRPC" else json.dumps(odd))
        r = await http.post(server + path, content=odd_body, headers={"content-type": "application/json"})
        if binding == "JSONRPC":
            assert r.status_code == 200 and r.json()["error"]["code"] == -32005
        else:
            assert r.status_code == 400
            assert r.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
        for sent, accept, answered in [
            ("application/json", None, "application/json"),
            ("application/a2a+json; charset=utf-8", None, "application/a2a+json"),
            ("application/json", "application/a2a+json", "application/json"),
        ]:
            headers = {"content-type": sent}
            if accept:
                headers["accept"] = accept
            one = json.loads(body)
            if binding == "JSONRPC":
                one["params"]["message"]["messageId"] = mid()
            else:
                one["message"]["messageId"] = mid()
            r = await http.post(server + path, content=json.dumps(one), headers=headers)
            assert r.status_code == 200, r.text
            assert r.headers["content-type"] == answered


async def test_the_card_can_be_cached_and_declares_only_what_is_configured(server):
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.get(server + "/.well-known/agent-card.json")
        card = r.json()
        assert card["capabilities"]["extendedAgentCard"] is False
        for h in ["etag", "last-modified", "cache-control"]:
            assert h in r.headers, h
        again = await http.get(server + "/.well-known/agent-card.json",
                               headers={"if-none-match": r.headers["etag"]})
        assert again.status_code == 304
        since = await http.get(server + "/.well-known/agent-card.json",
                               headers={"if-modified-since": r.headers["last-modified"]})
        assert since.status_code == 304
        extended = await http.get(server + "/extendedAgentCard", headers=AUTH)
        assert extended.status_code == 400
        assert extended.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_direct_reply_is_never_listed(server, binding):
    http, c = await caller(server, binding)
    async with http:
        context = f"replies-{binding}-{uuid.uuid4()}"
        _, reply, _ = await c.call("SendMessage", {"message": user("hello", contextId=context)})
        assert reply["message"]["parts"][0]["text"] == "hi! you said: hello"
        _, task, _ = await c.call("SendMessage", {"message": user("plain", contextId=context)})
        _, listed, _ = await c.call("ListTasks", {"contextId": context})
        assert [t["id"] for t in listed["tasks"]] == [task_of(task)["id"]]
        assert listed["totalSize"] == 1


@pytest.mark.parametrize("binding", BINDINGS)
async def test_message_ids_are_scoped_to_their_context(server, binding):
    http, c = await caller(server, binding)
    async with http:
        shared = mid()
        tasks = []
        for n in range(2):
            _, sent, _ = await c.call("SendMessage", {
                "message": user(f"conversation {n}", shared, contextId=f"scoped-{uuid.uuid4()}")})
            tasks.append(task_of(sent)["id"])
        assert tasks[0] != tasks[1]
        context = f"scoped-{uuid.uuid4()}"
        _, first, _ = await c.call("SendMessage", {"message": user("same", shared, contextId=context)})
        _, again, _ = await c.call("SendMessage", {"message": user("same", shared, contextId=context)})
        assert task_of(again)["id"] == task_of(first)["id"]
        status, clash, _ = await c.call("SendMessage", {"message": user("other", shared, contextId=context)})
        detail = clash["error"]["data" if binding == "JSONRPC" else "details"][0]
        assert detail["reason"] == "IDEMPOTENCY_CONFLICT"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_header_mode_takes_message_ids_as_labels(server_header, binding):
    http, c = await caller(server_header, binding)
    async with http:
        label = "tck-complete-task-" + mid()
        ids = set()
        for text in ["Blocking request", "Non-blocking request", "Blocking request"]:
            status, sent, _ = await c.call("SendMessage", {"message": user(text, label)})
            assert status == 200, sent
            ids.add(task_of(sent)["id"])
        assert len(ids) == 3


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("mode", ["message-id", "header"])
async def test_an_idempotency_key_replays_and_a_changed_request_conflicts(server, server_header, binding, mode):
    url = server if mode == "message-id" else server_header
    http, c = await caller(url, binding)
    async with http:
        key = {"Idempotency-Key": str(uuid.uuid4())}
        message = user("keyed work")
        _, first, _ = await c.call("SendMessage", {"message": message}, headers=key)
        _, replay, _ = await c.call("SendMessage", {"message": message}, headers=key)
        assert task_of(replay)["id"] == task_of(first)["id"]
        assert len(task_of(replay)["history"]) == len(task_of(first)["history"])
        changed = dict(message, parts=[{"text": "other work"}])
        status, clash, _ = await c.call("SendMessage", {"message": changed}, headers=key)
        if binding == "JSONRPC":
            assert status == 200 and clash["error"]["code"] == -32602
            assert clash["error"]["data"][0]["reason"] == "IDEMPOTENCY_CONFLICT"
        else:
            assert status == 422
            assert clash["error"]["details"][0]["reason"] == "IDEMPOTENCY_CONFLICT"
        # A stream's replay is its task's events, from the store.
        skey = {"Idempotency-Key": str(uuid.uuid4())}
        streamed = user("chunks again")
        once = await c.stream("SendStreamingMessage", {"message": streamed}, headers=skey)
        twice = await c.stream("SendStreamingMessage", {"message": streamed}, headers=skey)
        assert twice[0]["task"]["id"] == once[0]["task"]["id"]
        last = twice[-1].get("task") or twice[-1].get("statusUpdate")
        assert last["status"]["state"] == "TASK_STATE_COMPLETED", twice
