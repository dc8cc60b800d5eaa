"""An OpenAI Agents SDK agent whose conversation ctxlog keeps.

Runs offline: the model is a stand-in that answers with what it was
shown, so you can see the session at work without an API key. Each line
on stdin is one turn; the conversation survives the process (kill it and
start it again: the next turn sees every turn before)::

    pip install './python[agents]'
    echo "hello" | python examples/python/agents_session.py --dir agent-data
    echo "again" | python examples/python/agents_session.py --dir agent-data
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from ctxlog.agents import CtxlogSession


class RecallModel(Model):
    """A model that answers with how much of the conversation it was given
    and the last thing the user said."""

    async def get_response(self, system_instructions, input, *args, **kwargs) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        said = [i.get("content") for i in items if isinstance(i, dict) and i.get("role") == "user"]
        text = f"I have seen {len(items)} items; you said {said[-1]!r} ({len(said)} turns)"
        reply = ResponseOutputMessage(
            id="msg",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
        )
        return ModelResponse(output=[reply], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("this example does not stream")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="agent-data", help="the ctxlog store (created if missing)")
    parser.add_argument("--session", default="conversation_123", help="the conversation's id")
    args = parser.parse_args()
    set_tracing_disabled(True)  # nothing leaves the machine
    agent = Agent(name="recall", instructions="Recall the conversation.", model=RecallModel())
    with CtxlogSession(args.session, args.dir) as session:
        for line in sys.stdin:
            result = await Runner.run(agent, line.strip(), session=session)
            print(result.final_output, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
