#!/usr/bin/env python3
"""BENCHMARKS.md's headline tables, made from the benches' figures.

Every bench that feeds the headline records its figures as it runs, one
JSON line each, in ``target/bench-results/figures.jsonl`` (``benches/common/figures.rs``
for the Rust benches, ``python/bench/figures.py`` for the Python ones).

    python3 scripts/headline.py update   # fold the new figures of full runs into
                                         # docs/benchmarks/figures.json, then write
    python3 scripts/headline.py write    # write BENCHMARKS.md's headline from it
    python3 scripts/headline.py check    # fail if BENCHMARKS.md's headline differs (CI)

``update --quick`` takes short runs' figures too (to try the script; do not
commit them). The tables' layout is ``TABLES`` below: each cell is text
with ``{...}`` fields naming figures (``FIGURES`` gives each figure a short
name): ``{name}`` its value and unit, ``{ratio:a:b}`` a's value over b's,
``{met:a<=N}`` (or ``>=``) "yes" or "no", ``{met:a/b<=N}`` the same of a
ratio. Each table's date line says when its figures were measured.
Standard library only.
"""

import json
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES_FILE = ROOT / "docs" / "benchmarks" / "figures.json"
RESULTS = Path(os.environ.get("CTXLOG_BENCH_FIGURES", ROOT / "target" / "bench-results" / "figures.jsonl"))
BENCHMARKS = ROOT / "BENCHMARKS.md"
START = "<!-- headline: written by scripts/headline.py from docs/benchmarks/figures.json; run it, do not edit by hand -->"
END = "<!-- headline end -->"

W1A = "compare/W1a: durable append, one writer"
W1C = "compare/W1c: writer threads, durable per append / 16 threads: appends per second, higher is better; ratio"
W2 = "compare/W2: read of a 20-message history / uniform warm p50"
LOAD = "a2a_load/"

# Short names for the figures the tables use: "bench/figure" as recorded.
FIGURES = {
    "floor": "compare/floors / append of 1024 B + fdatasync, p50",
    **{f"w1a.p50.{e}": f"{W1A} / p50 latency / {e}" for e in ("ctxlog", "sqlite", "redb", "fjall")},
    **{f"w1a.p99.{e}": f"{W1A} / p99 latency / {e}" for e in ("ctxlog", "sqlite", "redb", "fjall")},
    **{f"w1c.{e}": f"{W1C} / {e}" for e in ("ctxlog", "sqlite")},
    **{f"w2.{e}": f"{W2} / {e}" for e in ("ctxlog", "sqlite", "redb")},
    "reopen.kill": "compare/W3: reopen / reopen after kill, ms / ctxlog",
    "reopen.clean": "compare/W3: reopen / reopen after clean close, ms / ctxlog",
    "index": "compare/W3 exchanges / index bytes per message",
    "space": "compare/W3 exchanges / space after compact, half deleted",
    **{
        f"load.{key}.{c}.{what}": f"{LOAD}{name} / {clients} / {what}"
        for key, name in (
            ("server", "ctxlog-server (durable, group commit)"),
            ("memory", "a2a-sdk, InMemoryTaskStore"),
            ("sqlite", "a2a-sdk, DatabaseTaskStore on SQLite"),
            ("library", "library alone (receive + complete)"),
        )
        for c, clients in (("1", "1 client"), ("64", "64 clients"))
        for what in ("throughput", "p50", "p99")
    },
    "soak.anon": "soak/idle RssAnon after the traffic",
    "soak.vmrss": "soak/idle VmRSS after the traffic",
    "soak.fresh.anon": "soak/RssAnon of a fresh process on the same store",
    "soak.fresh.vmrss": "soak/VmRSS of a fresh process on the same store",
    "soak.readers": "soak/RssAnon held by 300 slow readers",
    "ts.ctxlog.save": "task_store/ctxlog (sync) / save 200",
    "ts.sqlite.save": "task_store/SQLite (DatabaseTaskStore) / save 200",
    "ts.ctxlog.task": "task_store/ctxlog (sync) / whole task of 200 turns",
    "ts.sqlite.task": "task_store/SQLite (DatabaseTaskStore) / whole task of 200 turns",
    **{f"se.{k}.{q}": f"session/{name} / add_items, 1,000 items / {q}"
       for k, name in (("ctxlog", "CtxlogSession"), ("sqlite", "SQLiteSession")) for q in ("p50", "p99")},
    **{f"cp.{k}.{op}": f"checkpointer/{name} / {label} p50"
       for k, name in (("ctxlog", "CtxlogSaver"), ("sqlite", "SqliteSaver"))
       for op, label in (("put", "put"), ("put_writes", "put_writes"), ("invoke", "whole invoke"))},
    **{f"adk.{k}.{q}": f"adk/{name} / append_event, 1,000 events / {q}"
       for k, name in (("ctxlog", "CtxlogSessionService"), ("database", "DatabaseSessionService")) for q in ("p50", "p99")},
    **{f"adk.{k}.recent": f"adk/{name} / get_session, 1,000 events, recent / p50"
       for k, name in (("ctxlog", "CtxlogSessionService"), ("database", "DatabaseSessionService"))},
    **{f"adk.{k}.list": f"adk/{name} / list_sessions, one user / p50"
       for k, name in (("ctxlog", "CtxlogSessionService"), ("database", "DatabaseSessionService"))},
    "push.sends": "push/64 clients, best of 2 / sends with push",
    "push.deliveries": "push/64 clients, best of 2 / deliveries",
    "push.plain": "push/64 clients, best of 2 / sends without push",
    "rep.w1a": "replicate/W1a (1 writer, Sync) / on over off",
    "rep.w1c": "replicate/W1c (16 threads, GroupCommit) / on over off",
    "rep.lag": "replicate/W1c (16 threads, GroupCommit) / lag p99, local directory",
    "rep.sync": "replicate/synchronous, 1 writer / append p50",
}

# Each table: a title, the command that measures it, its header and rows.
TABLES = [
    {
        "title": "The engine against SQLite, redb and fjall (`bench-compare`, 10,000 contexts × 20 messages of 1 KiB)",
        "command": "cargo run --release -p ctxlog-bench-compare -- full",
        "header": ["measure", "ctxlog", "SQLite (WAL, synchronous=FULL)", "redb", "fjall", "target", "met?"],
        "rows": [
            ["durable append, one writer (W1a), p50", "{w1a.p50.ctxlog}",
             "{w1a.p50.sqlite} ({ratio:w1a.p50.sqlite:w1a.p50.ctxlog})",
             "{w1a.p50.redb} ({ratio:w1a.p50.redb:w1a.p50.ctxlog})",
             "{w1a.p50.fjall} ({ratio:w1a.p50.fjall:w1a.p50.ctxlog})",
             "≤ 1.2× the fdatasync floor ({floor}): {ratio:w1a.p50.ctxlog:floor}", "{met:w1a.p50.ctxlog/floor<=1.2}"],
            ["durable append, one writer, p99", "{w1a.p99.ctxlog}",
             "{w1a.p99.sqlite} ({ratio:w1a.p99.sqlite:w1a.p99.ctxlog})",
             "{w1a.p99.redb} ({ratio:w1a.p99.redb:w1a.p99.ctxlog})",
             "{w1a.p99.fjall} ({ratio:w1a.p99.fjall:w1a.p99.ctxlog})", "", ""],
            ["16 writers on distinct contexts (W1c), throughput vs SQLite's", "{ratio:w1c.ctxlog:w1c.sqlite}", "1×", "", "",
             "≥ 5×", "{met:w1c.ctxlog/w1c.sqlite>=5}"],
            ["history read, last 20 × 1 KiB, warm p50 (W2)", "{w2.ctxlog}",
             "{w2.sqlite} (ctxlog {ratio:w2.ctxlog:w2.sqlite})", "{w2.redb} (ctxlog {ratio:w2.ctxlog:w2.redb})", "",
             "≤ 0.5× redb's, ≤ 0.1× SQLite's", "{met:w2.ctxlog/w2.redb<=0.5} (see the archive, \"Targets\")"],
            ["reopen of 1 GiB after a kill (W3)", "{reopen.kill} (clean close {reopen.clean})", "", "", "",
             "< 300 ms (< 50 ms clean)", "{met:reopen.kill<=300}"],
            ["index bytes per message, 1 GiB of A2A exchanges", "{index}", "", "", "", "≤ 64 B", "{met:index<=64}"],
            ["space after `compact()`, half the contexts deleted", "{space} the live payload", "", "", "", "≤ 1.15×",
             "{met:space<=1.15}"],
        ],
    },
    {
        "title": "The A2A server against the A2A SDKs (`server/benches/a2a_load.rs`, JSON-RPC SendMessage, fresh messageIds)",
        "command": "cargo bench -p ctxlog-server --bench a2a_load",
        "header": ["server", "1 client", "64 clients"],
        "rows": [
            ["ctxlog-server (durable, group commit)",
             "{load.server.1.throughput}, p50 {load.server.1.p50}, p99 {load.server.1.p99}",
             "{load.server.64.throughput}, p50 {load.server.64.p50}, p99 {load.server.64.p99}"],
            ["a2a-sdk (Python), InMemoryTaskStore", "{load.memory.1.throughput}, p50 {load.memory.1.p50}",
             "{load.memory.64.throughput}, p99 {load.memory.64.p99}"],
            ["a2a-sdk (Python), DatabaseTaskStore on SQLite", "{load.sqlite.1.throughput}, p50 {load.sqlite.1.p50}",
             "{load.sqlite.64.throughput}, p99 {load.sqlite.64.p99}"],
            ["the library alone (receive + complete), the floor of the store's work",
             "{load.library.1.throughput}", "{load.library.64.throughput}"],
            ["ctxlog-server / a2a-sdk InMemoryTaskStore", "throughput {ratio:load.server.1.throughput:load.memory.1.throughput}",
             "throughput {ratio:load.server.64.throughput:load.memory.64.throughput}, p99 {ratio:load.server.64.p99:load.memory.64.p99}"],
        ],
    },
    {
        "title": "The server's memory after a million sends",
        "command": "CTXLOG_SOAK_SENDS=1000000 cargo test -p ctxlog-server --bench soak",
        "header": ["measure", "after the traffic", "a fresh process on the same store"],
        "rows": [
            ["idle RssAnon", "{soak.anon}", "{soak.fresh.anon}"],
            ["idle VmRSS", "{soak.vmrss} ({ratio:soak.vmrss:soak.fresh.vmrss})", "{soak.fresh.vmrss}"],
            ["RssAnon added while 300 readers of a 3.9 MB event read nothing", "{soak.readers}", ""],
        ],
    },
    {
        "title": "The Python doors against the stores they replace",
        "command": "python/bench/task_store_bench.py, session_bench.py, checkpointer_bench.py, adk_bench.py",
        "header": ["door", "ctxlog against", "figure"],
        "rows": [
            ["a2a-sdk `TaskStore`", "`DatabaseTaskStore` on SQLite",
             "a save of a 200-turn task {ts.ctxlog.save} against {ts.sqlite.save} ({ratio:ts.sqlite.save:ts.ctxlog.save}); "
             "the whole task {ts.ctxlog.task} against {ts.sqlite.task} ({ratio:ts.sqlite.task:ts.ctxlog.task})"],
            ["OpenAI Agents SDK `Session`", "`SQLiteSession`",
             "`add_items` on a 1,000-item session, p50 {se.ctxlog.p50} against {se.sqlite.p50} "
             "({ratio:se.sqlite.p50:se.ctxlog.p50}), p99 {se.ctxlog.p99} against {se.sqlite.p99} ({ratio:se.sqlite.p99:se.ctxlog.p99})"],
            ["LangGraph checkpointer", "`SqliteSaver`",
             "p50 of `put` {cp.ctxlog.put} against {cp.sqlite.put} ({ratio:cp.sqlite.put:cp.ctxlog.put}), "
             "`put_writes` {cp.ctxlog.put_writes} against {cp.sqlite.put_writes} ({ratio:cp.sqlite.put_writes:cp.ctxlog.put_writes}), "
             "a whole invoke {cp.ctxlog.invoke} against {cp.sqlite.invoke} ({ratio:cp.sqlite.invoke:cp.ctxlog.invoke})"],
            ["Google ADK `SessionService`", "`DatabaseSessionService` on SQLite",
             "`append_event` on a 1,000-event session, p50 {adk.ctxlog.p50} against {adk.database.p50} "
             "({ratio:adk.database.p50:adk.ctxlog.p50}), p99 {adk.ctxlog.p99} against {adk.database.p99} "
             "({ratio:adk.database.p99:adk.ctxlog.p99}); its newest 20 events read {adk.ctxlog.recent} against "
             "{adk.database.recent} ({ratio:adk.database.recent:adk.ctxlog.recent}); one user's 100 of an app's "
             "1,000 sessions listed {adk.ctxlog.list} against {adk.database.list} ({ratio:adk.database.list:adk.ctxlog.list})"],
        ],
    },
    {
        "title": "Push notifications",
        "command": "cargo bench -p ctxlog-server --bench push",
        "header": ["measure (64 clients, one push config a send)", "figure"],
        "rows": [
            ["sends with push", "{push.sends}, against {push.plain} with no push ({ratio:push.sends:push.plain})"],
            ["deliveries", "{push.deliveries}"],
        ],
    },
    {
        "title": "Replication",
        "command": "cargo bench --features replicate --bench replicate",
        "header": ["measure", "figure", "target", "met?"],
        "rows": [
            ["replication on / off, W1a throughput", "{rep.w1a}", "≥ 0.90×", "{met:rep.w1a>=0.9}"],
            ["replication on / off, W1c throughput", "{rep.w1c}", "", ""],
            ["replication lag under W1c, p99, local directory", "{rep.lag}", "", ""],
            ["synchronous replication, one writer's append, p50", "{rep.sync}", "", ""],
        ],
    },
]

UNITS = {"us": "µs", "x": "×"}


def fmt(value, unit):
    """A figure as the tables show it."""
    unit = UNITS.get(unit, unit)
    if unit == "×":
        return f"{value:.2f}×"
    if unit in ("req/s", "ops/s", "sends/s", "deliveries/s", "appends/s"):
        return f"{value:,.0f} {unit}"
    digits = 3 if abs(value) < 1 else 1 if abs(value) < 100 else 0
    return f"{value:,.{digits}f} {unit}"


def load_figures():
    if not FIGURES_FILE.exists():
        return {}
    return json.loads(FIGURES_FILE.read_text(encoding="utf-8"))


def figure(figures, name, used):
    key = FIGURES.get(name)
    if key is None:
        raise SystemExit(f"headline.py: the tables name {name!r}, which FIGURES does not define")
    entry = figures.get(key)
    if entry is None:
        raise SystemExit(f"headline.py: no figure {key!r} in {FIGURES_FILE.relative_to(ROOT)}: run its bench, then `update`")
    used.append(entry)
    return entry


def field(text, figures, used):
    """One `{...}` field of a cell."""
    if text.startswith("ratio:"):
        _, a, b = text.split(":")
        a, b = figure(figures, a, used), figure(figures, b, used)
        return f"{a['value'] / b['value']:.2f}×"
    if text.startswith("met:"):
        m = re.fullmatch(r"met:([\w.]+)(?:/([\w.]+))?(<=|>=)([\d.]+)", text)
        if not m:
            raise SystemExit(f"headline.py: cannot read the field {{{text}}}")
        value = figure(figures, m.group(1), used)["value"]
        if m.group(2):
            value /= figure(figures, m.group(2), used)["value"]
        bound = float(m.group(4))
        return "yes" if (value <= bound if m.group(3) == "<=" else value >= bound) else "no"
    entry = figure(figures, text, used)
    return fmt(entry["value"], entry["unit"])


def render(figures):
    out = [START, ""]
    for table in TABLES:
        used = []
        rows = [[re.sub(r"\{([^{}]+)\}", lambda m: field(m.group(1), figures, used), cell) for cell in row]
                for row in table["rows"]]
        dates = sorted({e["date"] for e in used})
        when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
        out.append(f"### {table['title']}")
        out.append("")
        out.append("| " + " | ".join(table["header"]) + " |")
        out.append("|" + " --- |" * len(table["header"]))
        for row in rows:
            out.append("| " + " | ".join(row) + " |")
        out.append("")
        out.append(f"(`{table['command']}`; measured {when}.)")
        out.append("")
    out.append(END)
    return "\n".join(out)


def replace_section(text, section):
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"headline.py: BENCHMARKS.md lacks the markers {START!r} ... {END!r}")
    return text[:start] + section + text[end + len(END):]


def update(quick):
    figures = load_figures()
    if not RESULTS.exists():
        raise SystemExit(f"headline.py: no {RESULTS}: run a bench first")
    taken, benches, recorded = 0, set(), set()
    for line in RESULTS.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("quick") and not quick:
            continue
        benches.add(row["bench"])
        recorded.add(f"{row['bench']}/{row['figure']}")
        date = datetime.fromtimestamp(row["at"], tz=timezone.utc).strftime("%Y-%m-%d")
        key = f"{row['bench']}/{row['figure']}"
        old = figures.get(key)
        if old is None or old.get("at", 0) <= row["at"]:
            figures[key] = {"value": row["value"], "unit": row["unit"], "date": date, "at": row["at"]}
            taken += 1
    # A bench that ran but did not record a figure the tables name has
    # renamed it: say which, so that FIGURES follows.
    for name, key in sorted(FIGURES.items()):
        bench = key.split("/", 1)[0]
        if bench in benches and key not in recorded:
            print(f"headline.py: {bench} ran but recorded no {key!r} ({name}): renamed?", file=sys.stderr)
    FIGURES_FILE.parent.mkdir(parents=True, exist_ok=True)
    FIGURES_FILE.write_text(json.dumps(figures, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{taken} figures taken from {RESULTS}")


def main(argv):
    command = argv[1] if len(argv) > 1 else "check"
    if command == "update":
        update("--quick" in argv)
        command = "write"
    text = BENCHMARKS.read_text(encoding="utf-8")
    wanted = replace_section(text, render(load_figures()))
    if command == "write":
        BENCHMARKS.write_text(wanted, encoding="utf-8")
        return 0
    if command == "check":
        if wanted != text:
            print("BENCHMARKS.md's headline differs from what scripts/headline.py writes from "
                  "docs/benchmarks/figures.json: run `python3 scripts/headline.py write`", file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
