#!/usr/bin/env python3
"""A real failure replayed in the simulator (issue 35, item 5), measured.

For each (scenario, naive design, invariant) below, runs real seeds until
RUNS real runs have violated the invariant (at most SEEDS_MAX seeds), each
with `idem real --decisions-out`, and replays every failing one in the
simulator with `idem run --seed N --decisions FILE`:

- all: every decision the real run recorded (each user's jitter and
  replica, each chunk's delay through its link, each provider's draws, when
  each fault step took effect);
- users and faults: the same without the links' delays (a real store link
  carries PostgreSQL's messages, the simulator's store link its own calls:
  their k-th messages are not the same message);
- none: the seed alone, the reference measured in the same run.

A replay reproduces the failure when the simulator violates the same
invariant. Prints one JSON line per real run, then the table.

Usage: measure-replay.py IDEM WORKDIR [RUNS] [SEEDS_MAX] [SCENARIO,...]
"""

import json
import pathlib
import subprocess
import sys

CASES = [
    ("double-click", "check-then-insert", 1),
    ("timeout-unknown", "timeout-is-failure", 5),
    # The simulator alone never fails this one (its store call is one round
    # trip, PostgreSQL's several): only the real run's decisions can.
    ("mismatched-payload", "check-then-insert", 1),
]
LINK_DELAYS = "message_latency"
REAL_TIMEOUT_S = 120


def violated(record):
    return {v["invariant"] for v in record.get("violations", [])}


def real(idem, work, scenario, design, seed):
    run = work / f"{scenario}-{design}-{seed}"
    run.mkdir(parents=True, exist_ok=True)
    record, decisions = run / "real.json", run / "decisions.json"
    subprocess.run(
        [idem, "real", scenario, "--seed", str(seed), "--design", design,
         "--json", str(record), "--decisions-out", str(decisions)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=REAL_TIMEOUT_S)
    if not record.exists() or not decisions.exists():
        return None, run
    return json.loads(record.read_text()), run


def simulated(idem, scenario, design, seed, decisions=None):
    args = [idem, "run", scenario, "--seed", str(seed), "--design", design, "--format", "json"]
    if decisions is not None:
        args += ["--decisions", str(decisions)]
    out = subprocess.run(args, capture_output=True, text=True)
    return violated(json.loads(out.stdout))


def without_link_delays(run):
    file = json.loads((run / "decisions.json").read_text())
    file["decisions"] = [d for d in file["decisions"] if d["subject"]["kind"] != LINK_DELAYS]
    path = run / "decisions-users-faults.json"
    path.write_text(json.dumps(file))
    return path


def measure(idem, work, scenario, design, invariant, runs, seeds_max):
    rows = []
    for seed in range(seeds_max):
        if len(rows) >= runs:
            break
        record, run = real(idem, work, scenario, design, seed)
        if record is None or invariant not in violated(record):
            continue
        row = {
            "scenario": scenario, "design": design, "seed": seed, "invariant": invariant,
            "real": sorted(violated(record)),
            "all": invariant in simulated(idem, scenario, design, seed, run / "decisions.json"),
            "users_and_faults": invariant
            in simulated(idem, scenario, design, seed, without_link_delays(run)),
            "none": invariant in simulated(idem, scenario, design, seed),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main():
    idem, work = sys.argv[1], pathlib.Path(sys.argv[2])
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    seeds_max = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    only = sys.argv[5].split(",") if len(sys.argv) > 5 else [c[0] for c in CASES]
    table = []
    for scenario, design, invariant in (c for c in CASES if c[0] in only):
        rows = measure(idem, work, scenario, design, invariant, runs, seeds_max)
        n = len(rows)
        table.append((scenario, design, invariant, n,
                      *(sum(r[k] for r in rows) for k in ("all", "users_and_faults", "none"))))
    print("\n| scenario | design | invariant | failing real runs | replayed: all decisions "
          "| replayed: users and faults | the seed alone |")
    print("|---|---|---|---|---|---|---|")
    for scenario, design, invariant, n, a, u, s in table:
        print(f"| {scenario} | {design} | {invariant} | {n} | {a}/{n} | {u}/{n} | {s}/{n} |")


if __name__ == "__main__":
    main()
