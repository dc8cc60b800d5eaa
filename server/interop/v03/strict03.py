"""Every answer and stream event a v0.3 client gets, checked the strict way
as it arrives (an httpx transport that reads along): JSON-RPC results by
a2a-sdk 0.3.26's pydantic models in strict mode with extra members
forbidden, HTTP+JSON bodies by its protobuf types with unknown fields
refused. `forbid_extras()` makes the SDK's own parsing forbid extra
members too (the agent card's types excepted: the card is shared with
v1.0 clients and carries v1.0's members beside v0.3's)."""

import inspect
import json
import re

import httpx
import pydantic
from google.protobuf import json_format

import a2a.types as t
from a2a._base import A2ABaseModel
from a2a.grpc import a2a_pb2

checked = {"bodies": 0, "events": 0}

# The JSON-RPC response type of each v0.3 method (streams: each event's).
RPC = {
    "message/send": t.SendMessageResponse,
    "message/stream": t.SendStreamingMessageResponse,
    "tasks/resubscribe": t.SendStreamingMessageResponse,
    "tasks/get": t.GetTaskResponse,
    "tasks/cancel": t.CancelTaskResponse,
    "tasks/pushNotificationConfig/set": t.SetTaskPushNotificationConfigResponse,
    "tasks/pushNotificationConfig/get": t.GetTaskPushNotificationConfigResponse,
    "tasks/pushNotificationConfig/list": t.ListTaskPushNotificationConfigResponse,
    "tasks/pushNotificationConfig/delete": t.DeleteTaskPushNotificationConfigResponse,
}

# The body type of each v0.3 HTTP+JSON route (streams: each event's).
REST = [
    ("POST", r"^/v1/message:send$", a2a_pb2.SendMessageResponse),
    ("POST", r"^/v1/message:stream$", a2a_pb2.StreamResponse),
    ("GET", r"^/v1/tasks/[^/:]+$", a2a_pb2.Task),
    ("POST", r"^/v1/tasks/[^/]+:cancel$", a2a_pb2.Task),
    ("GET", r"^/v1/tasks/[^/]+:subscribe$", a2a_pb2.StreamResponse),
    ("POST", r"^/v1/tasks/[^/]+:subscribe$", a2a_pb2.StreamResponse),
    ("POST", r"^/v1/tasks/[^/]+/pushNotificationConfigs$", a2a_pb2.TaskPushNotificationConfig),
    ("GET", r"^/v1/tasks/[^/]+/pushNotificationConfigs$",
     a2a_pb2.ListTaskPushNotificationConfigResponse),
    ("GET", r"^/v1/tasks/[^/]+/pushNotificationConfigs/[^/]+$", a2a_pb2.TaskPushNotificationConfig),
]


def forbid_extras():
    """Extra members fail every v0.3 task-model and JSON-RPC type."""
    card = re.compile(r"^(Agent|.*Security|.*OAuth|.*Flow|APIKey|HTTPAuth|MutualTLS|OpenIdConnect)")
    models = [c for c in vars(t).values() if inspect.isclass(c) and issubclass(c, pydantic.BaseModel)]
    for m in models:
        if issubclass(m, A2ABaseModel) and not card.match(m.__name__):
            m.model_config["extra"] = "forbid"
    for m in models:
        m.model_rebuild(force=True)


def kind_of(request):
    """("rpc", model) or ("rest", proto type) for a request, or None."""
    path = request.url.path
    if path == "/" and request.method == "POST":
        try:
            method = json.loads(request.content)["method"]
        except (ValueError, KeyError, TypeError):
            return None
        model = RPC.get(method)
        return ("rpc", model) if model else None
    for verb, pattern, proto in REST:
        if verb == request.method and re.search(pattern, path):
            return ("rest", proto)
    return None


def check(kind, text):
    how, model = kind
    if how == "rpc":
        model.model_validate_json(text, strict=True)
    else:
        json_format.Parse(text, model(), ignore_unknown_fields=False)


class _Reading(httpx.AsyncByteStream):
    """A response body, passed on as it comes, checked as it completes
    (a whole body, or each SSE event)."""

    def __init__(self, inner, kind, events, ok):
        self.inner, self.kind, self.events, self.ok = inner, kind, events, ok
        self.buffer = b""

    async def __aiter__(self):
        async for chunk in self.inner:
            self.buffer += chunk
            if self.events:
                self._events()
            yield chunk
        if not self.events and self.ok and self.buffer.strip():
            check(self.kind, self.buffer.decode())
            checked["bodies"] += 1

    def _events(self):
        while True:
            m = re.search(rb"\r?\n\r?\n", self.buffer)
            if not m:
                return
            block, self.buffer = self.buffer[: m.start()], self.buffer[m.end():]
            data = [line[5:].lstrip(b" ") for line in block.splitlines() if line.startswith(b"data:")]
            if not data or any(line.startswith(b"event: error") for line in block.splitlines()):
                continue
            check(self.kind, b"\n".join(data).decode())
            checked["events"] += 1

    async def aclose(self):
        await self.inner.aclose()


class Checking(httpx.AsyncBaseTransport):
    """An httpx transport that checks what it reads (see the module)."""

    def __init__(self):
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request):
        response = await self.inner.handle_async_request(request)
        kind = kind_of(request)
        if kind is None:
            return response
        events = response.headers.get("content-type", "").startswith("text/event-stream")
        reading = _Reading(response.stream, kind, events, response.status_code < 300)
        return httpx.Response(response.status_code, headers=response.headers, stream=reading,
                              extensions=response.extensions, request=request)

    async def aclose(self):
        await self.inner.aclose()
