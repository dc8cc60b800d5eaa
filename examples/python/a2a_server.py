"""An a2a-sdk 1.3 agent whose tasks live in ctxlog: the whole app, from the
agent to the uvicorn call.

    pip install './python[a2a]'             # ctxlog, a2a-sdk, starlette, uvicorn
    python examples/python/a2a_server.py    # http://127.0.0.1:9999, tasks in ./agent-data

It serves JSON-RPC at /jsonrpc, HTTP+JSON at /rest and its card at
/.well-known/agent-card.json (``--port 0`` picks a free port). Once it
listens it prints ``listening on URL``; on Ctrl-C (or SIGTERM) it closes
the store and prints ``store closed``. Kill it any way you like: the tasks
are on disk, and a restart on the same ``--dir`` serves them as they were.

The agent: a message starting with "ask" asks a question back (the task
waits in INPUT_REQUIRED for the client's answer); anything else is worked
on, reported as an artifact in two chunks, and completed with a reply.
examples/python/a2a_client.py talks to it.
"""

import argparse
import contextlib
import socket

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


def agent_card(base: str) -> AgentCard:
    return AgentCard(
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="agent-data", help="the ctxlog store (default: ./agent-data)")
    parser.add_argument("--port", type=int, default=9999, help="on 127.0.0.1; 0 picks a free one")
    args = parser.parse_args()

    # Listening before the URL is printed: a client may connect at once.
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(64)
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    card = agent_card(base)

    # The one line that differs from an in-memory a2a-sdk server:
    store = CtxlogTaskStore(args.dir)  # was InMemoryTaskStore()
    handler = DefaultRequestHandler(agent_executor=Agent(), task_store=store, agent_card=card)
    routes = (
        create_agent_card_routes(card)
        + create_jsonrpc_routes(handler, "/jsonrpc")
        + create_rest_routes(handler, path_prefix="/rest")
    )

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        store.close()  # a checkpoint, the last sync, the store's lock released
        print("store closed", flush=True)

    app = Starlette(routes=routes, lifespan=lifespan)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(f"listening on {base}", flush=True)
    server.run(sockets=[listener])


if __name__ == "__main__":
    main()
