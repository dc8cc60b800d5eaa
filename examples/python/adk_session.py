"""A Google ADK agent whose sessions ctxlog keeps.

Runs offline: the model is a stand-in that answers with how much of the
conversation it was given, so you can see the session at work without an
API key. Each line on stdin is one turn; the session survives the process
(kill it and start it again: the next turn sees every turn before), and
``user:`` state lasts across the user's sessions::

    pip install './python[adk]'
    echo "hello" | python examples/python/adk_session.py --dir agent-data
    echo "again" | python examples/python/adk_session.py --dir agent-data
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncGenerator

from google.adk.agents.llm_agent import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from ctxlog.adk import CtxlogSessionService


class RecallModel(BaseLlm):
    """A model that answers with how many user messages it was shown and
    the last of them."""

    model: str = "recall"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        said = [c.parts[0].text for c in llm_request.contents if c.role == "user" and c.parts]
        text = f"you said {said[-1]!r} ({len(said)} turns)"
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="agent-data", help="the store's directory")
    parser.add_argument("--session", default="session-1")
    args = parser.parse_args()

    async with CtxlogSessionService(args.dir) as sessions:
        ids = {"app_name": "recall", "user_id": "ada", "session_id": args.session}
        if await sessions.get_session(**ids) is None:
            await sessions.create_session(**ids, state={"user:name": "Ada"})
        runner = Runner(
            agent=LlmAgent(name="recall", model=RecallModel(), output_key="last_answer"),
            app_name="recall",
            session_service=sessions,
        )
        for line in sys.stdin:
            message = types.Content(role="user", parts=[types.Part(text=line.strip())])
            async for event in runner.run_async(user_id="ada", session_id=args.session, new_message=message):
                if event.is_final_response() and event.content and event.content.parts:
                    print(event.content.parts[0].text)
        session = await sessions.get_session(**ids)
        print(f"{len(session.events)} events; last_answer={session.state['last_answer']!r}; "
              f"user:name={session.state['user:name']!r}")
        await runner.close()


if __name__ == "__main__":
    asyncio.run(main())
