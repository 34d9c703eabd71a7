#!/usr/bin/env python3
"""Races forced on real processes (issue 37, item 4), measured.

For each naive target mode (`bench/tests/targets/naive.rs`) on the
scenario that shows its mistake, runs `idem real SCENARIO --seed N --target
'naive-target --config {config} --mode MODE'` without and with `--force`
on the same seeds, one after the other per seed (so both meet the same
machine load), and reports the seeds to the first catch (the mode's
invariant violated) and, for the rows whose catch turns on timing, how many
of the seeds caught it. Rows marked `every` run every seed; the others stop
at their first catch. Prints a JSON line per run, then the table.

Usage: measure-forcing.py TARGET_DIR OUT.jsonl [SEEDS]
  TARGET_DIR holds the debug build's idem and naive-target
  (cargo build -p idem-bench --bins).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ONE_CLICK = (
    'description = "one click"\n[timing]\nsettle_ms = 3000\n[[clients]]\nname = "alice"\n'
    'actions = [{ action = "click", key = "k", params = { text = "hello" } }]\n'
)
# (mode, scenario, invariant, every seed)
ROWS = [
    ("check-then-insert", "double-click", 1, True),
    ("check-then-insert", str(HERE / "double-click-fast-links.toml"), 1, True),
    ("check-then-insert", str(HERE / "double-click-slow.toml"), 1, True),
    ("check-then-insert", "mismatched-payload", 2, True),
    ("memory-keys", "double-click", 1, True),
    ("memory-keys", "key-reuse-after-completion", 1, False),
    ("no-fingerprint", "mismatched-payload", 2, False),
    ("global-key", "cross-owner-same-key", 2, False),
    ("made-up-result", "double-click", 3, False),
    ("last-writer-wins", "out-of-order-completion", 3, False),
    ("merged-result", "out-of-order-completion", 6, False),
    ("any-owner-reads", "cross-owner-same-key", 8, False),
    ("fresh-key-retry", "timeout-unknown", 9, False),
    ("blind-failover", "uncertified-fallback", 7, False),
    ("never-finish", "ONE_CLICK", 10, False),
]


def run(idem, scenario, seed, target, force):
    with tempfile.NamedTemporaryFile(suffix=".json") as record:
        args = [idem, "real", scenario, "--seed", str(seed), "--target", target,
                "--json", record.name] + (["--force"] if force else [])
        done = subprocess.run(args, capture_output=True, text=True, timeout=300)
        try:
            return done.returncode, json.load(open(record.name))
        except (OSError, ValueError):
            return done.returncode, {}


def name_of(scenario):
    return pathlib.Path(scenario).stem if scenario.endswith(".toml") else scenario


def table(runs, seeds):
    lines = [
        "| mode | scenario | invariant | unforced: first catch | unforced: caught | forced: first catch | forced: caught |",
        "|---|---|---|---|---|---|---|",
    ]
    keys = []
    for r in runs:
        key = (r["mode"], r["scenario"], r["invariant"])
        if key not in keys:
            keys.append(key)
    for key in keys:
        cells = []
        for force in (False, True):
            mine = [r for r in runs if (r["mode"], r["scenario"], r["invariant"]) == key and r["force"] == force]
            caught = [r["seed"] for r in mine if r["caught"]]
            first = f"seed {min(caught)}" if caught else f"none in {len(mine)}"
            every = all(r["every"] for r in mine)
            tally = f"{len(caught)} of {len(mine)}" if every else "(stops at the first)"
            cells += [first, tally]
        lines.append(f"| `{key[0]}` | `{key[1]}` | {key[2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    target_dir, out = sys.argv[1], sys.argv[2]
    seeds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    idem, naive = f"{target_dir}/idem", f"{target_dir}/naive-target"
    work = tempfile.mkdtemp(prefix="measure-forcing-")
    one_click = os.path.join(work, "one-click.toml")
    pathlib.Path(one_click).write_text(ONE_CLICK)
    runs = []
    with open(out, "w") as sink:
        for mode, scenario, invariant, every in ROWS:
            path = one_click if scenario == "ONE_CLICK" else scenario
            target = f"{naive} --config {{config}} --mode {mode}"
            stopped = set()
            for seed in range(seeds):
                for force in (False, True):
                    if force in stopped:
                        continue
                    code, record = run(idem, path, seed, target, force)
                    caught = any(v.get("invariant") == invariant for v in record.get("violations", []))
                    row = {"mode": mode, "scenario": "one-click" if scenario == "ONE_CLICK" else name_of(scenario),
                           "invariant": invariant, "force": force, "seed": seed, "every": every,
                           "code": code, "caught": caught, "forced": record.get("forced", [])}
                    runs.append(row)
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                    print(json.dumps(row), flush=True)
                    if caught and not every:
                        stopped.add(force)
    print(table(runs, seeds))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--table":
        print(table([json.loads(l) for l in open(sys.argv[2])], 0))
    else:
        main()
