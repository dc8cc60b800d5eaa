"""The Python examples of the README and of docs/python.md run as shown,
and run again (a second run finds the message received and does no work
twice), so the docs cannot drift from the package."""

import contextlib
import io
import os
import pathlib

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
