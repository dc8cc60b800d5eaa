"""A Python bench's headline figures, kept for ``scripts/headline.py``:
each ``record`` appends one JSON line to ``target/bench-results/figures.jsonl``
(or to the file ``CTXLOG_BENCH_FIGURES`` names), as the Rust benches do
(``benches/common/figures.rs``); ``python3 scripts/headline.py update`` folds them
into ``docs/benchmarks/figures.json`` and BENCHMARKS.md's headline."""

import json
import math
import os
import sys
import time
from pathlib import Path


def _file() -> Path:
    named = os.environ.get("CTXLOG_BENCH_FIGURES")
    if named:
        return Path(named)
    target = os.environ.get("CARGO_TARGET_DIR")
    root = Path(target) if target else Path(__file__).resolve().parents[2] / "target"
    return root / "bench-results" / "figures.jsonl"


def record(bench: str, figure: str, value: float, unit: str, quick: bool = False) -> None:
    """Records ``figure`` of ``bench`` (``value`` in ``unit``); ``quick``
    marks a short run's, which ``headline.py update`` leaves out."""
    if not math.isfinite(value):
        return
    line = {"bench": bench, "figure": figure, "value": value, "unit": unit,
            "at": int(time.time()), "quick": quick}
    path = _file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    except OSError as e:
        print(f"(figure {figure} not recorded in {path}: {e})", file=sys.stderr)
