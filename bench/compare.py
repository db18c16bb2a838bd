"""Before and after in one run: the same benchmarks on an older tree and on this one.

    make bench-compare [BASE=<rev>]              # default BASE: 4ec3457
    .venv/bin/python -m bench.compare [BASE] [--rounds 3] [--only cpu,concurrency]

Checks BASE out into a temporary git worktree, copies this tree's `bench/` package (and the
fakes it drives, so both trees answer the same fakes) into it, and runs `bench.run` in each
tree, in a process of its own each time, on the same database server and Redis
(DATABASE_URL / REDIS_URL, as `make bench`). The CPU-bound benchmarks (`scenarios.CPU_BOUND`)
run `--rounds` times, alternating which tree goes first, and each figure is the median of its
rounds, so a machine that speeds up or slows down during the run weighs on both alike; the
others run once per tree. Prints one table (figure, before, after, after / before) and writes
every run's results to bench/results/compare-<timestamp>.json. BENCH_QUICK=1 compares the
smoke run's figures. Both trees run on this virtualenv (`--base-python` for another).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import report
from .fakehost import FAKES_DIR
from .harness import RESULTS, ROOT
from .run import chosen
from .scenarios import CPU_BOUND, CPU_MS_PER_CALL

DEFAULT_BASE = "4ec3457"  # the tree before issue 66's round
CPU_RATIO_LIMIT = 1.5  # issue 66: CPU per model call no worse than 1.5 x the tree before


def git(*args: str) -> str:
    done = subprocess.run(  # noqa: S603 - git with our own arguments
        ["git", *args],  # noqa: S607
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def checkout(base: str, where: Path) -> Path:
    """BASE in a detached worktree at `where`, with this tree's benchmarks and fakes."""
    git("worktree", "add", "--detach", "--quiet", str(where), base)
    bench = where / "bench"
    shutil.rmtree(bench, ignore_errors=True)
    ignore = shutil.ignore_patterns("results", "__pycache__")
    shutil.copytree(ROOT / "bench", bench, ignore=ignore)
    fakes = where / FAKES_DIR.relative_to(ROOT)
    shutil.rmtree(fakes, ignore_errors=True)
    shutil.copytree(FAKES_DIR, fakes, ignore=ignore)
    for parent in fakes.relative_to(where).parents:  # packages all the way down
        init = where / parent / "__init__.py"
        if parent != Path(".") and not init.exists():
            init.write_text("")
    return where


def run_once(tree: Path, python: str, names: list[str], out: Path) -> dict[str, Any]:
    """`bench.run --only names` in `tree`, its results read back."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    command = [python, "-m", "bench.run", "--only", ",".join(names), "--json", str(out)]
    print(f"compare: {tree.name}: {' '.join(names)}", flush=True)
    code = subprocess.call(command, cwd=tree, env=env)  # noqa: S603 - our own module
    if not out.exists():
        return {"error": f"bench.run exited {code} without results", "figures": []}
    results = json.loads(out.read_text())
    imported = Path(results["code"]["thinking_from"])
    if not imported.is_relative_to(tree.resolve()):
        raise SystemExit(f"compare: {tree} ran the app from {imported}, not its own")
    if code:
        results["error"] = f"bench.run exited {code}"
    return results


def merge(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each figure's rows across runs, by key, with the median of its values."""
    merged: dict[str, dict[str, Any]] = {}
    for results in runs:
        for f in results.get("figures", []):
            row = merged.setdefault(f["key"], {**f, "values": []})
            if f["value"] is not None:
                row["values"].append(f["value"])
    for row in merged.values():
        row["median"] = statistics.median(row["values"]) if row["values"] else None
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("base", nargs="?", default="", help=f"revision (default {DEFAULT_BASE})")
    parser.add_argument("--rounds", type=int, default=0, help="CPU-bound runs per tree")
    parser.add_argument(
        "--only", default="", help="comma-separated benchmarks (default all but `tab`)"
    )
    parser.add_argument("--base-python", default=sys.executable, help="the older tree's Python")
    parser.add_argument("--keep", action="store_true", help="keep the older tree's worktree")
    args = parser.parse_args(argv)
    base = args.base or DEFAULT_BASE
    quick = os.environ.get("BENCH_QUICK", "").strip() not in ("", "0")
    rounds = args.rounds or (1 if quick else 3)
    # The tab watches for 15 minutes a tree and measures the page, not the worker: asked for.
    names = chosen(args.only) if args.only else [n for n in chosen("") if n != "tab"]
    bound = [n for n in names if n in CPU_BOUND]
    others = [n for n in names if n not in CPU_BOUND]
    commit = git("rev-parse", "--short", f"{base}^{{commit}}")
    head = git("rev-parse", "--short", "HEAD")
    scratch = Path(tempfile.mkdtemp(prefix="deepthink-compare-"))
    trees = {"before": scratch / f"base-{commit}", "after": ROOT}
    python = {"before": args.base_python, "after": sys.executable}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    began = datetime.now(UTC)
    try:
        checkout(commit, trees["before"])
        for index in range(rounds if bound else 0):
            order = ("before", "after") if index % 2 == 0 else ("after", "before")
            for side in order:
                out = scratch / f"{side}-{index}.json"
                runs[side].append(run_once(trees[side], python[side], bound, out))
        if others:
            for side in ("before", "after"):
                out = scratch / f"{side}-rest.json"
                runs[side].append(run_once(trees[side], python[side], others, out))
    finally:
        if not args.keep:
            subprocess.run(  # noqa: S603
                ["git", "worktree", "remove", "--force", str(trees["before"])],  # noqa: S607
                cwd=ROOT,
                check=False,
            )
            shutil.rmtree(scratch, ignore_errors=True)
    before, after = merge(runs["before"]), merge(runs["after"])
    rows = []
    for key in [*after, *(k for k in before if k not in after)]:
        shown = after.get(key) or before[key]
        if shown["value"] is None and not shown["values"]:
            continue  # a skipped figure (e.g. Redis unset)
        rows.append(
            {
                "key": key,
                "label": shown["label"],
                "unit": shown["unit"],
                "target": shown["target"],
                "before": before.get(key, {}).get("median"),
                "after": after.get(key, {}).get("median"),
                "before_values": before.get(key, {}).get("values", []),
                "after_values": after.get(key, {}).get("values", []),
            }
        )
    some = (runs["after"] or runs["before"] or [{}])[0]
    machine = some.get("machine", {})
    results = {
        "base": commit,
        "head": head,
        "mode": "quick" if quick else "full",
        "rounds": rounds,
        "started": began.isoformat(timespec="seconds"),
        "machine": machine,
        "rows": rows,
        "runs": runs,
    }
    path = report.write(results, RESULTS, name=f"compare-{began:%Y%m%d-%H%M%S}")
    print()
    print(
        f"Before ({commit}) and after ({head} and this tree's changes), "
        f"{results['mode']}, CPU-bound figures the median of {rounds} alternated rounds; "
        f"{machine.get('database', '?')}, {machine.get('redis', '?')}"
    )
    print()
    print(report.comparison(rows))
    print()
    for row in rows:
        if row["key"].startswith("cpu.") and row["before"] and row["after"] is not None:
            ratio = row["after"] / row["before"]
            met = ratio <= CPU_RATIO_LIMIT and row["after"] < CPU_MS_PER_CALL
            verdict = "ok" if met else "MISSED"
            print(
                f"{row['label']}: {ratio:.2f} x before (<= {CPU_RATIO_LIMIT} x) and "
                f"{row['after']:.1f} ms (< {CPU_MS_PER_CALL:.0f} ms): {verdict}"
            )
    print(f"Results: {path}")
    failed = [r.get("error") for side in runs.values() for r in side if r.get("error")]
    for error in failed:
        print(f"compare: {error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
