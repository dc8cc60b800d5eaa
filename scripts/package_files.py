#!/usr/bin/env python3
"""Every file the engine's code names by path (`include_str!`,
`include_bytes!`, `#[path = ...]`) is in its package: reads the list
`cargo package --list -p ctxlog` prints (on stdin) and the engine's
sources. CI runs it in place of building the unpacked package, which
compiled every dependency a second time. Standard library only."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMED = re.compile(r'(?:include_str!|include_bytes!)\(\s*"([^"]+)"\s*\)|#\[path\s*=\s*"([^"]+)"\]')


def main() -> int:
    packaged = {line.strip() for line in sys.stdin if line.strip()}
    if "src/lib.rs" not in packaged:
        print("package_files.py: the list on stdin has no src/lib.rs: pipe `cargo package --list -p ctxlog` in",
              file=sys.stderr)
        return 2
    missing = []
    for source in sorted(packaged):
        if not source.endswith(".rs"):
            continue
        text = (ROOT / source).read_text(encoding="utf-8")
        for match in NAMED.finditer(text):
            named = (ROOT / source).parent / (match.group(1) or match.group(2))
            relative = named.resolve().relative_to(ROOT).as_posix()
            if relative not in packaged:
                missing.append(f"{source} names {relative}")
    for line in missing:
        print(f"package_files.py: not in the engine's package: {line}; add it to Cargo.toml's include",
              file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
