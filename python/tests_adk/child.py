"""The program the kill tests run and SIGKILL: it writes to a
``CtxlogSessionService`` and prints a line for each write once the call
has returned (so the test knows what was acknowledged).

    python child.py events STORE COUNT   append COUNT events to one session
    python child.py agent STORE TURNS    run an ADK agent (a scripted model,
                                         no network) for TURNS turns

``events`` prints ``acked N`` after the Nth ``append_event`` returned; each
event's text is ``event N`` and it sets the state ``n`` (session),
``user:n`` and ``app:n`` to N. ``agent`` prints ``turn N: ANSWER`` after
the Nth turn's events are stored; the model answers with how many user
messages the conversation it is given holds, so a resumed session shows
in the answer.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncGenerator

from google.adk.agents.llm_agent import LlmAgent
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from ctxlog.adk import CtxlogSessionService

APP, USER, SESSION = "kill-test", "user", "session"


class CountingModel(BaseLlm):
    """A model that answers how many user messages it was shown."""

    model: str = "counting"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        users = sum(1 for c in llm_request.contents if c.role == "user")
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=f"seen {users}")]))


async def session_of(service: CtxlogSessionService):
    session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    if session is None:
        session = await service.create_session(app_name=APP, user_id=USER, session_id=SESSION)
    return session


async def events(store: str, count: int) -> None:
    service = CtxlogSessionService(store)
    session = await session_of(service)
    first = len(session.events) + 1
    for n in range(first, first + count):
        event = Event(
            invocation_id=f"inv-{n}",
            author="user",
            content=types.Content(role="user", parts=[types.Part(text=f"event {n}")]),
            actions=EventActions(state_delta={"n": n, "user:n": n, "app:n": n}),
        )
        await service.append_event(session, event)
        print(f"acked {n}", flush=True)
    await service.close()


async def agent(store: str, turns: int) -> None:
    service = CtxlogSessionService(store)
    await session_of(service)
    runner = Runner(
        agent=LlmAgent(name="counter", model=CountingModel()),
        app_name=APP,
        session_service=service,
    )
    for _ in range(turns):
        answer = ""
        async for event in runner.run_async(
            user_id=USER,
            session_id=SESSION,
            new_message=types.Content(role="user", parts=[types.Part(text="how many?")]),
        ):
            if event.content and event.content.parts and event.content.parts[0].text:
                answer = event.content.parts[0].text
        session = await service.get_session(app_name=APP, user_id=USER, session_id=SESSION)
        users = sum(1 for e in session.events if e.author == "user")
        print(f"turn {users}: {answer}", flush=True)
    await runner.close()
    await service.close()


if __name__ == "__main__":
    mode, store, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    asyncio.run({"events": events, "agent": agent}[mode](store, count))
