"""The README's ADK block and examples/python/adk_session.py run as
shown: a second turn, in a second process for the example, sees the
first."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "python" / "adk_session.py"


def readme_block() -> str:
    section = (ROOT / "README.md").read_text().split("\n## With agent frameworks\n", 1)[1]
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    [block] = [b for b in blocks if "ctxlog.adk" in b]
    return block


async def test_the_readme_block_keeps_the_session(tmp_path, monkeypatch):
    from google.adk.agents.llm_agent import LlmAgent

    spec = importlib.util.spec_from_file_location("adk_session", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    agent = LlmAgent(name="recall", model=module.RecallModel())
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(readme_block(), "README.md", "exec"), scope)
    assert await scope["ask"](agent, "hello") == "you said 'hello' (1 turns)"
    assert await scope["ask"](agent, "again") == "you said 'again' (2 turns)"


def run(text: str, cwd: pathlib.Path) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLE), "--dir", "agent-data"], input=text,
                          cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_example_resumes_its_session_in_a_new_process(tmp_path):
    assert run("hello\n", tmp_path).splitlines() == [
        "you said 'hello' (1 turns)",
        "2 events; last_answer=\"you said 'hello' (1 turns)\"; user:name='Ada'",
    ]
    assert run("again\n", tmp_path).splitlines()[0] == "you said 'again' (2 turns)"
