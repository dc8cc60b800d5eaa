"""The README's runnable Python example runs as shown, so the docs cannot
drift from the package."""

import contextlib
import io
import os
import pathlib

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def python_blocks(section: str) -> list[str]:
    text = README.read_text().split("\n## " + section + "\n", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


def test_the_engine_example_prints_what_it_says(tmp_path, monkeypatch):
    [example] = [b for b in python_blocks("Python") if b.startswith("import ctxlog")]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example, "README.md", "exec"), {})
    assert out.getvalue() == "TASK_STATE_COMPLETED\n"
    assert os.path.isdir(tmp_path / "agent-data")
