#!/usr/bin/env bash
# Real runs under load (reports/real/hang.md): LANES real runs at a time,
# RUNS each, of the CI's three real-mode scenarios in turn, beside a repeated
# sweep of the whole catalogue; a watcher attaches gdb to every `serve`
# process not ready after 8 s and keeps its stacks. Every run's exit code and
# wall time land in OUT/results.txt.
#
# usage: reports/real/load.sh IDEM RUNS LANES OUT
set -euo pipefail
idem=$1 runs=$2 lanes=$3 out=$4
mkdir -p "$out"
: >"$out/results.txt"
scenarios=(double-click lost-ack-on-commit worker-crash-mid-attempt)

sweeping() {
  while [ ! -f "$out/.stop" ]; do
    "$idem" sweep --all --seeds 0..200 >/dev/null 2>&1 || true
  done
}

watching() {
  while [ ! -f "$out/.stop" ]; do
    for pid in $(pgrep -f " serve --store postgres" || true); do
      age=$(ps -o etimes= -p "$pid" 2>/dev/null | tr -d ' ') || continue
      log=$(readlink "/proc/$pid/fd/2" 2>/dev/null) || continue
      if [ "${age:-0}" -gt 8 ] && ! grep -q -e "idem serving" -e "running without the API" "$log" &&
        [ ! -f "$out/stack-$pid.txt" ]; then
        { echo "pid $pid age $age log $log"; cat "$log"; gdb -p "$pid" -batch -ex "thread apply all bt"; } \
          >"$out/stack-$pid.txt" 2>&1 || true
      fi
    done
    sleep 2
  done
}

lane() {
  local lane=$1
  for run in $(seq 1 "$runs"); do
    local scenario=${scenarios[$(((run + lane) % 3))]} start=$SECONDS status=0
    timeout 120 "$idem" real "$scenario" --seed "$run" >"$out/l$lane-$run.out" 2>&1 || status=$?
    echo "$lane $run $scenario rc=$status $((SECONDS - start))s" >>"$out/results.txt"
  done
}

sweeping &
watching &
pids=()
for lane in $(seq 1 "$lanes"); do
  lane "$lane" &
  pids+=($!)
done
wait "${pids[@]}"
touch "$out/.stop"
wait
awk '{print $4}' "$out/results.txt" | sort | uniq -c
