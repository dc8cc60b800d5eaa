"""The Python examples of the README and of docs/python.md run as shown,
and run again (a second run finds the message received and does no work
twice), so the docs cannot drift from the package."""

import contextlib
import io
import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def python_blocks(text: str) -> list[str]:
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


def readme_section(title: str) -> str:
    return (ROOT / "README.md").read_text().split("\n## " + title + "\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("where", ["README.md", "docs/python.md"])
def test_the_engine_example_prints_what_it_says_twice(where, tmp_path, monkeypatch):
    text = readme_section("Python") if where == "README.md" else (ROOT / where).read_text()
    [example] = [b for b in python_blocks(text) if b.startswith("import ctxlog")]
    monkeypatch.chdir(tmp_path)
    for run in range(2):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(example, where, "exec"), {})
        assert out.getvalue() == "TASK_STATE_COMPLETED\n", f"run {run + 1}"
    assert os.path.isdir(tmp_path / "agent-data")


def test_the_agents_example_keeps_the_conversation(tmp_path, monkeypatch):
    """The README's Agents SDK block, driven with the offline model of
    examples/python/agents_session.py: a second turn sees the first."""
    import asyncio
    import importlib.util

    from agents import Agent, set_tracing_disabled

    [example, _, _] = python_blocks(readme_section("With agent frameworks"))
    spec = importlib.util.spec_from_file_location(
        "agents_session", ROOT / "examples" / "python" / "agents_session.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    set_tracing_disabled(True)
    agent = Agent(name="recall", model=module.RecallModel())
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(example, "README.md", "exec"), scope)
    assert "(1 turns)" in asyncio.run(scope["turn"](agent, "hello"))
    assert asyncio.run(scope["turn"](agent, "again")) == "I have seen 3 items; you said 'again' (2 turns)"


def test_the_langgraph_example_keeps_the_graph(tmp_path, monkeypatch):
    """The README's LangGraph block, with the example's graph builder: the
    second run of the thread finds the first's state and goes on."""
    import importlib.util

    from langgraph.graph import END, START, StateGraph

    [_, example, _] = python_blocks(readme_section("With agent frameworks"))
    spec = importlib.util.spec_from_file_location(
        "langgraph_graph", ROOT / "examples" / "python" / "langgraph_graph.py")
    module = importlib.util.module_from_spec(spec)
    # Registered, so that LangGraph can resolve the state's annotations.
    monkeypatch.setitem(sys.modules, "langgraph_graph", module)
    spec.loader.exec_module(module)
    builder = StateGraph(module.Case)
    builder.add_node("draft", module.draft)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", END)
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(example, "README.md", "exec"), scope)
    first = scope["run"](builder, {"request": "refund 1", "log": [], "outcome": ""})
    assert first["log"] == ["drafted: refund 1"]
    second = scope["run"](builder, {"request": "refund 2", "log": [], "outcome": ""})
    assert second["log"] == ["drafted: refund 1", "drafted: refund 2"]
    assert (tmp_path / "agent-data").is_dir()
