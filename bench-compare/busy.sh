#!/usr/bin/env bash
# Runs the command given with a busy machine beside it: one process
# spinning on a CPU and one writing 64 MiB with fdatasync in a loop (in
# the current directory), both stopped (by pid, and by a flag file the
# loop checks) when the command ends.
# Example: bench-compare/busy.sh target/release/bench-compare maintenance-w1a full
set -u
python3 -c 'while True: pass' &
cpu=$!
flag="$(mktemp)"
(while [ -e "$flag" ]; do
  dd if=/dev/zero of=busy-disk.bin bs=1M count=64 conv=fdatasync status=none
  sleep 0.2
done) &
disk=$!
"$@"
status=$?
kill "$cpu"
rm -f "$flag"
wait "$cpu" "$disk" 2>/dev/null
rm -f busy-disk.bin
exit "$status"
