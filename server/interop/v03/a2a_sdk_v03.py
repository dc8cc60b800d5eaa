"""The reference for the v0.3 comparison: a2a-sdk 1.3.0's own server in
its v0.3 compatibility mode (JSON-RPC and HTTP+JSON, `enable_v0_3_compat`),
on SQLite (DatabaseTaskStore, so a kill -9 and restart keeps its tasks),
with push configs, and an executor that plays ../script.json as
ctxlog-server's scripted agent does. Runs in the a2a-sdk 1.3.0 venv:

    python a2a_sdk_v03.py PORT DB_PATH

The v0.3 suite runs against it with CTXLOG_V03_REFERENCE=a2a-sdk (see
docs/compatibility.md for the comparison).
"""

import asyncio
import json
import os
import sys

import httpx
import uvicorn
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    DatabaseTaskStore,
    InMemoryPushNotificationConfigStore,
    TaskUpdater,
)
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)
from google.protobuf import json_format, struct_pb2

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "script.json")
STATES = {name: TaskState.Value(name) for name in TaskState.keys()}


def part_of(p):
    if "text" in p:
        return Part(text=p["text"])
    value = struct_pb2.Value()
    json_format.ParseDict(p["data"], value)
    return Part(data=value)


class Scripted(AgentExecutor):
    """Plays the first rule whose text the message contains, else the default."""

    def __init__(self):
        with open(SCRIPT) as f:
            self.script = json.load(f)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        steps = next((r["steps"] for r in self.script["rules"] if r["text"] in text),
                     self.script["default"])
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        say = lambda t: updater.new_agent_message([Part(text=t.replace("{text}", text))])  # noqa: E731
        if any("reply" in s for s in steps):
            await event_queue.enqueue_event(say(steps[0]["reply"]))
            return
        if not context.current_task:
            await event_queue.enqueue_event(
                new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED,
                         history=[context.message]))
        for step in steps:
            if "pauseMs" in step:
                await asyncio.sleep(step["pauseMs"] / 1000)
            elif "artifact" in step:
                a = step["artifact"]
                await updater.add_artifact([part_of(p) for p in a["parts"]], a["artifactId"],
                                           a.get("name"), append=step.get("append"),
                                           last_chunk=step.get("lastChunk"))
            else:
                message = say(step["text"]) if "text" in step else None
                await updater.update_status(STATES[step["status"]], message)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def main() -> None:
    port, db = int(sys.argv[1]), sys.argv[2]
    base = f"http://127.0.0.1:{port}"
    interfaces = [AgentInterface(url=url, protocol_binding=b, protocol_version=v)
                  for v in ("1.0", "0.3") for b, url in (("JSONRPC", base + "/"), ("HTTP+JSON", base))]
    card = AgentCard(
        name="a2a-sdk reference", description="script.json, played by a2a-sdk 1.3.0",
        version="1.0", supported_interfaces=interfaces,
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=[AgentSkill(id="script", name="script", description="plays a script", tags=["x"])],
    )
    store = DatabaseTaskStore(create_async_engine(f"sqlite+aiosqlite:///{db}"))
    pushes = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=Scripted(), task_store=store, agent_card=card, push_config_store=pushes,
        push_sender=BasePushNotificationSender(httpx.AsyncClient(), pushes))
    routes = (create_agent_card_routes(card)
              + create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)
              + create_rest_routes(handler, enable_v0_3_compat=True))
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
