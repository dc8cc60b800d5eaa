#!/usr/bin/env bash
# Runs the server's fuzz target (`rpc`: requests through the whole router) for
# SECONDS seconds (default 60) and reports executions, new corpus entries and
# any failing input.
#   cargo install cargo-fuzz       (once)
#   server/fuzz/run.sh 300
# Inputs that fail are saved under server/fuzz/artifacts/rpc/; turn each into a
# regression test (copy it into server/fuzz/corpus/rpc/, which cargo test replays).
set -u
cd "$(dirname "$0")/.."  # the server crate
secs=${1:-60}
shift || true
targets=${*:-rpc}
export RUSTC_BOOTSTRAP=1
status=0
for t in $targets; do
  work=fuzz/work/$t
  mkdir -p "$work" fuzz/artifacts/$t
  cp -n fuzz/corpus/$t/* "$work"/ 2>/dev/null
  log=fuzz/artifacts/$t.log
  if cargo fuzz run "$t" "$work" -- -max_total_time="$secs" -print_final_stats=1 \
       -rss_limit_mb=2048 -artifact_prefix=fuzz/artifacts/$t/ >"$log" 2>&1; then
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
    echo "$t: ${secs}s, ${execs:-?} executions, $(ls "$work" | wc -l) corpus entries, no failure"
  elif grep -q "failed to build fuzz script" "$log"; then
    echo "$t: the target did not build: see $log"
    status=1
  else
    echo "$t: FAILURE found: see $log and fuzz/artifacts/$t/"
    status=1
  fi
done
exit $status
