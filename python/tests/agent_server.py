"""An a2a-sdk 1.3 server whose tasks live in ctxlog (CtxlogTaskStore):
JSON-RPC at /jsonrpc and HTTP+JSON at /rest, on starlette, served by
uvicorn on a free port of 127.0.0.1, which it prints (``PORT n``) once it
listens; prints ``CLOSED`` when a graceful shutdown has closed the store.

    python agent_server.py STORE_DIR

The agent: "ask ..." asks a question back (the task waits in
INPUT_REQUIRED); anything else is worked on, reported as an artifact in
two chunks, and completed with a reply.
"""

import contextlib
import socket
import sys

import uvicorn
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, TaskState

from ctxlog.a2a import CtxlogTaskStore


class Agent(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if not context.current_task:
            await event_queue.enqueue_event(
                new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED,
                         history=[context.message])
            )
        text = context.get_user_input()
        if text.startswith("ask"):
            await updater.requires_input(updater.new_agent_message([Part(text="which order?")]))
            return
        await updater.start_work()
        await updater.add_artifact([Part(text="part one")], artifact_id="report", name="report")
        await updater.add_artifact([Part(text="part two")], artifact_id="report", append=True, last_chunk=True)
        await updater.complete(updater.new_agent_message([Part(text=f"done: {text}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def main() -> None:
    directory = sys.argv[1]
    # Listening before the port is told: a client may connect at once.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="ctxlog-backed agent",
        description="an a2a-sdk server on CtxlogTaskStore",
        version="1.0",
        supported_interfaces=[
            AgentInterface(url=f"{base}/jsonrpc", protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=f"{base}/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="work", name="work", description="works", tags=["work"])],
    )
    store = CtxlogTaskStore(directory)
    handler = DefaultRequestHandler(agent_executor=Agent(), task_store=store, agent_card=card)
    routes = (
        create_agent_card_routes(card)
        + create_jsonrpc_routes(handler, "/jsonrpc")
        + create_rest_routes(handler, path_prefix="/rest")
    )

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        store.close()
        print("CLOSED", flush=True)

    server = uvicorn.Server(uvicorn.Config(Starlette(routes=routes, lifespan=lifespan), log_level="warning"))
    print(f"PORT {port}", flush=True)
    server.run(sockets=[listener])


if __name__ == "__main__":
    main()
