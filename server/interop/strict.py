"""Every response body and stream event, parsed the strict way: protobuf's
JSON parser into a2a-sdk's generated types with unknown fields refused, so
that a member the A2A proto does not define fails the test that got it."""

import json
import re

from google.protobuf import json_format
from a2a.types import (
    AgentCard,
    ListTaskPushNotificationConfigsResponse,
    ListTasksResponse,
    SendMessageResponse,
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
)

# The result type of each JSON-RPC method (streams: each event's).
RPC_RESULTS = {
    "SendMessage": SendMessageResponse,
    "SendStreamingMessage": StreamResponse,
    "SubscribeToTask": StreamResponse,
    "GetTask": Task,
    "CancelTask": Task,
    "ListTasks": ListTasksResponse,
    "GetExtendedAgentCard": AgentCard,
    "CreateTaskPushNotificationConfig": TaskPushNotificationConfig,
    "GetTaskPushNotificationConfig": TaskPushNotificationConfig,
    "ListTaskPushNotificationConfigs": ListTaskPushNotificationConfigsResponse,
}

# The body type of each HTTP+JSON route, by (method, path pattern).
REST_BODIES = [
    ("POST", r"/message:send$", SendMessageResponse),
    ("POST", r"/message:stream$", StreamResponse),
    ("GET", r"/tasks$", ListTasksResponse),
    ("GET", r"/tasks/[^/:]+$", Task),
    ("POST", r"/tasks/[^/]+:cancel$", Task),
    ("POST", r"/tasks/[^/]+:subscribe$", StreamResponse),
    ("GET", r"/tasks/[^/]+:subscribe$", StreamResponse),
    ("GET", r"/extendedAgentCard$", AgentCard),
    ("POST", r"/tasks/[^/]+/pushNotificationConfigs$", TaskPushNotificationConfig),
    ("GET", r"/tasks/[^/]+/pushNotificationConfigs$", ListTaskPushNotificationConfigsResponse),
    ("GET", r"/tasks/[^/]+/pushNotificationConfigs/[^/]+$", TaskPushNotificationConfig),
    ("GET", r"/\.well-known/agent-card\.json$", AgentCard),
]

checked = {"bodies": 0, "events": 0}


def parse(text, kind):
    """Parses `text` into `kind`, refusing unknown fields."""
    json_format.Parse(text, kind(), ignore_unknown_fields=False)


def expected(method, path, request_body):
    """The type a successful answer to this request has (None: not an A2A
    object, or not known here)."""
    if path == "/" and method == "POST":
        try:
            name = json.loads(request_body)["method"]
        except (ValueError, KeyError, TypeError):
            return None
        return RPC_RESULTS.get(name)
    for verb, pattern, kind in REST_BODIES:
        if verb == method and re.search(pattern, path):
            return kind
    return None


def check_body(method, path, request_body, status, text):
    """A non-streaming answer: its result (JSON-RPC) or body (REST)."""
    kind = expected(method, path, request_body)
    if kind is None or status >= 300 or not text:
        return
    body = json.loads(text)
    if path == "/" and method == "POST":
        if "result" not in body:
            return
        parse(json.dumps(body["result"]), kind)
    else:
        parse(text, kind)
    checked["bodies"] += 1


def check_event(method, path, request_body, data):
    """One SSE event's data."""
    body = json.loads(data)
    if path == "/" and method == "POST":
        if "result" not in body:
            return
        parse(json.dumps(body["result"]), StreamResponse)
    else:
        if "error" in body:
            return
        parse(data, StreamResponse)
    checked["events"] += 1


async def httpx_hook(response):
    """An httpx response hook: checks every answer that is not a stream
    (streams are read event by event by the tests that open them)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return
    await response.aread()
    request = response.request
    check_body(request.method, request.url.path, request.content, response.status_code, response.text)


def sse_events(text):
    """The data of each event in an SSE body."""
    events = []
    for block in re.split(r"\r?\n\r?\n", text):
        data = []
        for line in block.splitlines():
            if line.startswith("data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(" ") else value)
        if data:
            events.append("\n".join(data))
    return events
