"""Talks to an A2A agent with the official a2a-sdk client: streams a
message, asks something the agent answers with a question, answers it in
the same task, and reads the tasks of the conversation back.

    python examples/python/a2a_client.py [URL]   # default http://127.0.0.1:9999

Run examples/python/a2a_server.py first; the client prints one line per
event it gets.
"""

import asyncio
import sys
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import ListTasksRequest, Message, Part, Role, SendMessageRequest, TaskState


def message(text: str, context_id: str = "", task_id: str = "") -> SendMessageRequest:
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)],
                context_id=context_id, task_id=task_id)
    return SendMessageRequest(message=m)


def describe(event) -> str:
    """One line for a stream event (a StreamResponse)."""
    if event.HasField("task"):
        return f"task {event.task.id}: {TaskState.Name(event.task.status.state)}"
    if event.HasField("status_update"):
        status = event.status_update.status
        reply = " ".join(p.text for p in status.message.parts)
        return f"status: {TaskState.Name(status.state)}" + (f" ({reply})" if reply else "")
    if event.HasField("artifact_update"):
        return "artifact: " + " ".join(p.text for p in event.artifact_update.artifact.parts)
    return "message: " + " ".join(p.text for p in event.message.parts)


async def main(url: str) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        client = await create_client(url, client_config=ClientConfig(httpx_client=http, streaming=True))

        # 1. A streamed task: each event as the agent stores it.
        events = [e async for e in client.send_message(message("refund order 42"))]
        for event in events:
            print(describe(event))
        context_id = next(e.task.context_id for e in events if e.HasField("task"))

        # 2. A question back, answered in the same task.
        asked = [e async for e in client.send_message(message("ask about my order", context_id))]
        task_id = next(e.task.id for e in asked if e.HasField("task"))
        print(describe(asked[-1]))
        answer = [e async for e in client.send_message(message("order 42", context_id, task_id))]
        print(describe(answer[-1]))

        # 3. The conversation's tasks, as the store keeps them.
        listed = await client.list_tasks(ListTasksRequest(context_id=context_id))
        print(f"{listed.total_size} tasks in context {context_id}:",
              ", ".join(sorted(TaskState.Name(t.status.state) for t in listed.tasks)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:9999"))
