#!/usr/bin/env bash
# Runs the server's fuzz target (`rpc`: requests through the whole router) for
# SECONDS seconds (default 60) and reports executions, new corpus entries and
# any failing input; the engine's fuzz/run.sh does the work.
#   cargo install cargo-fuzz       (once)
#   server/fuzz/run.sh 300
# Inputs that fail are saved under server/fuzz/artifacts/rpc/; turn each into a
# regression test (copy it into server/fuzz/corpus/rpc/, which cargo test replays).
here="$(cd "$(dirname "$0")" && pwd)"
FUZZ_CRATE="$here/.." FUZZ_TARGETS=rpc exec "$here/../../fuzz/run.sh" "$@"
