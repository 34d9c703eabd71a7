#!/usr/bin/env python3
"""Fails when a crate of the workspace declares a dependency its sources never name.

For each member's Cargo.toml, every entry of [dependencies] must be named
(as `name` with `-` read as `_`, or the `package =` it renames) somewhere in
the crate's src/ (or in build.rs for [build-dependencies]), outside
whole-line comments; and every entry of [workspace.dependencies] must be
declared by some member. A dependency kept
only to turn on a feature of another crate is listed in KEPT_FOR_FEATURES
with the reason.

Why a script and not cargo-udeps or cargo-machete: udeps needs a nightly
toolchain, which this machine cannot fetch; machete is the same textual test
as this one but another tool to build in CI. This reads what cargo declares
with the standard library's TOML parser and runs in well under a second.
Usage: python3 .ci/unused-deps.py   (from the workspace root)
"""
import pathlib
import re
import sys
import tomllib

# (crate, dependency) -> why it is declared although no source names it.
KEPT_FOR_FEATURES = {}


def members(root):
    workspace = tomllib.loads((root / "Cargo.toml").read_text())
    return [root / m for m in workspace["workspace"]["members"]]


def sources(crate, manifest, table):
    if table == "build-dependencies":
        files = [crate / "build.rs"]
    else:
        # Binaries declared outside src/ (the black-box targets) are built
        # from [dependencies] too.
        targets = [crate / t["path"] for t in manifest.get("bin", []) if "path" in t]
        files = sorted((crate / "src").rglob("*.rs")) + targets
    text = "\n".join(f.read_text() for f in files if f.exists())
    # A name in a comment is not a use.
    return re.sub(r"(?m)^\s*//.*$", "", text)


def unused(crate):
    manifest = tomllib.loads((crate / "Cargo.toml").read_text())
    name = manifest["package"]["name"]
    found = []
    for table in ("dependencies", "build-dependencies"):
        text = sources(crate, manifest, table)
        for dep, spec in manifest.get(table, {}).items():
            if (name, dep) in KEPT_FOR_FEATURES:
                continue
            package = spec.get("package", dep) if isinstance(spec, dict) else dep
            idents = {dep.replace("-", "_"), package.replace("-", "_")}
            if not any(re.search(rf"\b{re.escape(i)}\b", text) for i in idents):
                found.append(f"{name}: [{table}] {dep} is never named in its sources")
    return found


def unused_in_workspace(root):
    """Entries of [workspace.dependencies] that no member declares."""
    declared = set()
    for crate in members(root):
        manifest = tomllib.loads((crate / "Cargo.toml").read_text())
        for table in ("dependencies", "dev-dependencies", "build-dependencies"):
            declared.update(manifest.get(table, {}))
    workspace = tomllib.loads((root / "Cargo.toml").read_text())
    return [
        f"workspace: [workspace.dependencies] {dep} is declared by no crate"
        for dep in workspace["workspace"].get("dependencies", {})
        if dep not in declared
    ]


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    problems = [p for crate in members(root) for p in unused(crate)]
    problems += unused_in_workspace(root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(
            "remove them, or list one in KEPT_FOR_FEATURES in .ci/unused-deps.py with the reason",
            file=sys.stderr,
        )
        return 1
    print(f"every declared dependency of {len(members(root))} crates is named in its sources")
    return 0


if __name__ == "__main__":
    sys.exit(main())
