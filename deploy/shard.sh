#!/usr/bin/env bash
# One shard of a sweep or of a fuzz budget, on one machine of many. The
# GitHub Actions matrix (.github/workflows/sweep.yml) and the Kubernetes
# Indexed Job (deploy/k8s/sweep-indexed-job.yaml) both run this script, and
# bench/tests/it/shards.rs runs it as several local processes, so the
# mechanics that many machines use are the ones the tests check.
#
# Environment:
#   SHARD_INDEX           this shard's index; when unset, JOB_COMPLETION_INDEX
#                         (which Kubernetes sets in an Indexed Job's pods)
#   SHARD_COUNT           how many shards (required)
#   IDEM_SHARD_MODE       sweep (the whole catalogue) or fuzz; default sweep
#   IDEM_SHARD_SEEDS      the seed range, A..B; default 0..256
#   IDEM_SHARD_BUDGET     fuzz only: a time budget per shard (90s, 30m, 4h)
#                         instead of a seed range: the guided search, each
#                         shard a campaign on fresh seeds of its own
#   IDEM_SHARD_START      with a budget: the first seed; default 0
#   IDEM_SHARD_BLIND      with a budget: 1 for the blind swarm instead
#   IDEM_SHARD_DESIGN     the design under test; default correct
#   IDEM_SHARD_JOBS       threads per shard; default: the machine's cores
#   IDEM_SHARD_OUT        directory for the shard's JSON (and fuzz corpus);
#                         default results
#   IDEM                  the idem binary; default idem on PATH
#
# Writes $IDEM_SHARD_OUT/shard-<index>-of-<count>.json. Exits 0 once that
# file is written, whether or not the shard's runs passed: the verdict, the
# exit code and the window-coverage gate belong to `idem merge` of every
# shard (a shard alone may miss a window the whole run reaches). Exits 2 on
# bad input or when idem could not write the summary.
set -euo pipefail

index=${SHARD_INDEX:-${JOB_COMPLETION_INDEX:-}}
count=${SHARD_COUNT:-}
if [ -z "$index" ] || [ -z "$count" ]; then
  echo "shard.sh: set SHARD_COUNT and SHARD_INDEX (or JOB_COMPLETION_INDEX)" >&2
  exit 2
fi
mode=${IDEM_SHARD_MODE:-sweep}
seeds=${IDEM_SHARD_SEEDS:-0..256}
design=${IDEM_SHARD_DESIGN:-correct}
out=${IDEM_SHARD_OUT:-results}
idem=${IDEM:-idem}
mkdir -p "$out"
json=$out/shard-$index-of-$count.json
rm -f "$json"

budget=${IDEM_SHARD_BUDGET:-}
if [ -n "$budget" ] && [ "$mode" != fuzz ]; then
  echo "shard.sh: IDEM_SHARD_BUDGET is for IDEM_SHARD_MODE=fuzz" >&2
  exit 2
fi
if [ -n "$budget" ]; then
  args=(--budget "$budget" --start "${IDEM_SHARD_START:-0}")
  if [ "${IDEM_SHARD_BLIND:-0}" = 1 ]; then
    args+=(--blind)
  fi
else
  args=(--seeds "$seeds")
fi
args+=(--shard "$index/$count" --design "$design" --json "$json")
if [ -n "${IDEM_SHARD_JOBS:-}" ]; then
  args+=(--jobs "$IDEM_SHARD_JOBS")
fi
case $mode in
  sweep) args=(sweep --all "${args[@]}") ;;
  fuzz) args=(fuzz "${args[@]}" --corpus "$out/corpus") ;;
  *)
    echo "shard.sh: IDEM_SHARD_MODE is sweep or fuzz, not $mode" >&2
    exit 2
    ;;
esac

echo "shard $index/$count: $idem ${args[*]}"
status=0
"$idem" "${args[@]}" || status=$?
if [ "$status" -ge 2 ] || [ ! -s "$json" ]; then
  echo "shard.sh: idem exited $status without a summary" >&2
  exit 2
fi
echo "shard $index/$count: wrote $json (idem exited $status; idem merge gives the verdict)"
