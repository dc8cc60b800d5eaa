"""A LangGraph graph whose checkpoints ctxlog keeps: it stops for a human,
survives the process, resumes, and travels back in time.

A refund request is drafted, waits for a human's approval (an interrupt),
then is carried out or declined. Each command is one process on the same
store, as an agent restarted between steps would be::

    pip install './python[langgraph]'
    python examples/python/langgraph_graph.py start "refund order 42"   # stops at the approval
    python examples/python/langgraph_graph.py resume yes                # carried out
    python examples/python/langgraph_graph.py history                   # every step, newest first
    python examples/python/langgraph_graph.py travel no                 # back to the approval, answered no

``start`` then waits on stdin, so the process can be killed while it waits
for the human: ``resume`` in a new process goes on from the checkpoint.
"""

from __future__ import annotations

import argparse
import operator
import sys
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from ctxlog.langgraph import CtxlogSaver


class Case(TypedDict):
    request: str
    log: Annotated[list[str], operator.add]
    outcome: str


def draft(case: Case) -> dict:
    return {"log": [f"drafted: {case['request']}"]}


def review(case: Case) -> dict:
    answer = interrupt(f"approve {case['request']}?")
    return {"log": [f"reviewed: {answer}"], "outcome": "approved" if answer == "yes" else "declined"}


def act(case: Case) -> dict:
    done = "carried out" if case["outcome"] == "approved" else "not carried out"
    return {"log": [f"{done}: {case['request']}"]}


def graph(saver: CtxlogSaver):
    builder = StateGraph(Case)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_node("act", act)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=saver)


def show(result: dict) -> None:
    if "__interrupt__" in result:
        print(f"waiting for a human: {result['__interrupt__'][0].value}", flush=True)
    else:
        print(f"done: {result['outcome']}; " + " | ".join(result["log"]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="agent-data", help="the ctxlog store (created if missing)")
    parser.add_argument("--thread", default="case-42", help="the thread's id")
    parser.add_argument("command", choices=["start", "resume", "history", "travel"])
    parser.add_argument("arg", nargs="?", default="", help="the request (start) or the answer (resume, travel)")
    args = parser.parse_args()
    config = {"configurable": {"thread_id": args.thread}}
    with CtxlogSaver(args.dir) as saver:
        app = graph(saver)
        if args.command == "start":
            show(app.invoke({"request": args.arg, "log": [], "outcome": ""}, config))
            sys.stdin.readline()  # the human takes their time
        elif args.command == "resume":
            show(app.invoke(Command(resume=args.arg), config))
        elif args.command == "history":
            for state in app.get_state_history(config):
                print(f"step {state.metadata['step']}: next {list(state.next)}, log {state.values.get('log')}")
        else:
            # Back to the checkpoint that waited for the approval: a fork
            # of it (a new checkpoint after it, the state unchanged) takes
            # the other answer; the steps after it stay in the history.
            waiting = next(s for s in app.get_state_history(config) if s.next == ("review",))
            fork = app.update_state(waiting.config, {"outcome": ""}, as_node="draft")
            show(app.invoke(Command(resume=args.arg), fork))


if __name__ == "__main__":
    main()
