"""The a2a-sdk 1.3.0 reference server with an echo executor, for the
side-by-side benchmark (server/benches/a2a_load.rs): DefaultRequestHandler
on starlette, served by uvicorn, over InMemoryTaskStore or DatabaseTaskStore
on SQLite (aiosqlite).

    python a2a_sdk_echo.py PORT memory|sqlite [DB_PATH]
"""

import sys

import uvicorn
from starlette.applications import Starlette

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.helpers.proto_helpers import new_task
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, TaskState


class Echo(AgentExecutor):
    """Completes each task with the text it got, as ctxlog's echo agent does
    (the task SUBMITTED, then COMPLETED with a message)."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if not context.current_task:
            await event_queue.enqueue_event(
                new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED,
                         history=[context.message])
            )
        text = context.get_user_input()
        await updater.complete(updater.new_agent_message([Part(text=text)]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def main() -> None:
    port, kind = int(sys.argv[1]), sys.argv[2]
    if kind == "memory":
        store = InMemoryTaskStore()
    else:
        from sqlalchemy.ext.asyncio import create_async_engine

        from a2a.server.tasks import DatabaseTaskStore

        engine = create_async_engine(f"sqlite+aiosqlite:///{sys.argv[3]}")
        store = DatabaseTaskStore(engine)
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="echo",
        description="echo",
        version="1.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=store, agent_card=card)
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/")
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
