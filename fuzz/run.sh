#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS seconds each (default 60) and reports
# what it found: executions, new corpus entries, and any failing input.
#   cargo install cargo-fuzz   (once)
#   fuzz/run.sh 300            # every target
#   fuzz/run.sh 60 open ops    # some
# Inputs that fail are saved under fuzz/artifacts/<target>/; turn each into a
# regression test (copy it into fuzz/corpus/<target>/, which cargo test replays).
# FUZZ_CRATE (a crate's directory, default the engine's) and FUZZ_TARGETS (its
# default targets) let another crate's fuzz/run.sh use this one.
set -u
cd "${FUZZ_CRATE:-$(dirname "$0")/..}"
secs=${1:-60}
shift || true
targets=${*:-${FUZZ_TARGETS:-decode namespace render open ops}}
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
