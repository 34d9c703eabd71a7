#!/usr/bin/env python3
"""The fidelity table (issue 35, item 4) from `idem real --compare --json`.

Reads one compare file per design (`idem real --compare --seeds 0..5
--design D --json compare-D.json`), writes the compact comparisons to
fidelity.json and prints the Markdown table: per design and scenario, the
seeds that passed in each world and the seeds whose invariant verdicts,
race windows and outcome mixes agree, then every comparison that disagrees.

Usage: fidelity-table.py OUT_DIR compare-correct.json compare-D1.json ...
"""

import json
import pathlib
import sys


def violated(world):
    return [v["invariant"] for v in world["invariants"] if v["verdict"] == "violated"]


def compact(c):
    world = lambda w: {
        "passed": c[w]["passed"],
        "violated": violated(c[w]),
        "windows": c[w]["windows"],
        "mix": c[w]["mix"],
    }
    return {
        "scenario": c["scenario"], "seed": c["seed"], "design": c["design"],
        "invariants_agree": not c["differing_invariants"],
        "windows_agree": c["windows_agree"], "mix_agrees": c["mix_agrees"],
        "sim": world("sim"), "real": world("real"),
    }


def table(rows):
    out = ["| design | scenario | seeds | passed, simulator | passed, real | invariants agree "
           "| windows agree | mixes agree |", "|---|---|---|---|---|---|---|---|"]
    totals = {}
    for row in rows:
        key = (row["design"], row["scenario"])
        t = totals.setdefault(key, [0, 0, 0, 0, 0, 0])
        for i, ok in enumerate([True, row["sim"]["passed"], row["real"]["passed"],
                                row["invariants_agree"], row["windows_agree"], row["mix_agrees"]]):
            t[i] += int(ok)
    for (design, scenario), t in totals.items():
        out.append(f"| {design} | {scenario} | " + " | ".join(str(n) for n in t) + " |")
    by_design = {}
    for (design, _), t in totals.items():
        d = by_design.setdefault(design, [0] * 6)
        for i, n in enumerate(t):
            d[i] += n
    for design, d in by_design.items():
        out.append(f"| **{design}** | **all** | " + " | ".join(f"**{n}**" for n in d) + " |")
    return "\n".join(out)


def disagreements(rows):
    out = []
    for r in rows:
        if r["invariants_agree"] and r["windows_agree"] and r["mix_agrees"]:
            continue
        diff = {k: (r["sim"]["mix"][k], r["real"]["mix"][k]) for k in r["sim"]["mix"]
                if k != "reads" and r["sim"]["mix"][k] != r["real"]["mix"][k]}
        out.append(f"- {r['design']} {r['scenario']} seed {r['seed']}: violated "
                   f"{r['sim']['violated']} (simulator) / {r['real']['violated']} (real); "
                   f"windows {r['sim']['windows']} / {r['real']['windows']}; mix differs in "
                   f"{json.dumps(diff, sort_keys=True)}")
    return "\n".join(out)


def main():
    out = pathlib.Path(sys.argv[1])
    rows = []
    for path in sys.argv[2:]:
        rows += [compact(c) for c in json.loads(pathlib.Path(path).read_text())["comparisons"]]
    (out / "fidelity.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    print(table(rows))
    print()
    print(disagreements(rows))


if __name__ == "__main__":
    main()
