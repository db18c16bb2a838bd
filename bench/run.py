"""Run the benchmarks: `make bench` (all of them), `BENCH_QUICK=1 make bench` (a smoke run).

    .venv/bin/python -m bench.run [--only cpu,live] [--json PATH]

Uses a throwaway SQLite file, or a throwaway PostgreSQL database next to DATABASE_URL's when
that is set; REDIS_URL adds the live-update figures over Redis. Prints a table and writes
bench/results/<timestamp>.json and bench/results/latest.json (or PATH). Exits non-zero only
when a benchmark could not run: a missed target is a result, not an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from . import report
from .fakehost import FakeHost
from .harness import RESULTS, Setup, code_version, machine, prepare, start_django, teardown

NAMES = ("cpu", "concurrency", "live", "memory", "research", "cache", "search", "admin", "tab")


def chosen(only: str) -> list[str]:
    """Benchmark names from a comma-separated list of names or numbers (1 = cpu, ...)."""
    names = []
    for item in (i.strip() for i in only.split(",")):
        if not item:
            continue
        name = NAMES[int(item) - 1] if item.isdigit() and 0 < int(item) <= len(NAMES) else item
        if name not in NAMES:
            raise SystemExit(f"bench: no benchmark {item!r} (choose from {', '.join(NAMES)})")
        names.append(name)
    return names or list(NAMES)


async def run_all(setup: Setup, names: list[str]) -> dict[str, Any]:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from .scenarios import SCENARIOS, figure, warm_up

    outcomes: dict[str, Any] = {}
    try:
        await warm_up(setup)
        for name in names:
            print(f"bench: {name} ...", flush=True)
            began = time.monotonic()
            try:
                outcome = await SCENARIOS[name](setup)
            except Exception as error:
                traceback.print_exc()
                outcome = {
                    "figures": [figure(f"{name}.error", name, None, f"ERROR: {error}")],
                    "error": "".join(traceback.format_exception(error)),
                }
            outcome["seconds"] = round(time.monotonic() - began, 1)
            outcomes[name] = outcome
    finally:
        await sync_to_async(connections.close_all)()
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated benchmarks ({', '.join(NAMES)}; or 1-{len(NAMES)})",
    )
    parser.add_argument("--json", default="", help="write the results here instead")
    args = parser.parse_args(argv)
    names = chosen(args.only)
    quick = os.environ.get("BENCH_QUICK", "").strip() not in ("", "0")
    # `kill` / `timeout` as Ctrl-C: stop the fakes, drop the throwaway database.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # With DEBUG off and no collectstatic, WhiteNoise warns about STATIC_ROOT.
    warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
    began = time.monotonic()
    load_before = os.getloadavg()
    if load_before[0] > 0.7:
        print(
            f"bench: the machine is already busy (load average {load_before[0]:.2f}); "
            "the numbers will be noisy",
            file=sys.stderr,
        )
    fakes = FakeHost().start()
    setup: Setup | None = None
    try:
        setup = prepare(quick=quick, fakes=fakes)
        start_django()
        outcomes = asyncio.run(run_all(setup, names))
        figures = [f for outcome in outcomes.values() for f in outcome["figures"]]
        results: dict[str, Any] = {
            "mode": "quick" if quick else "full",
            "machine": {
                **machine(setup),
                "load_average_before": [round(v, 2) for v in load_before],
                "load_average_after": [round(v, 2) for v in os.getloadavg()],
            },
            "code": code_version(),
            "figures": figures,
            "benchmarks": outcomes,
            "seconds": round(time.monotonic() - began, 1),
        }
        if args.json:
            path = Path(args.json)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(results, indent=2, default=str))
        else:
            path = report.write(results, RESULTS)
    finally:
        if setup is not None:
            teardown(setup)
        fakes.stop()
    info = results["machine"]
    print()
    print(
        f"Deep Think benchmarks ({results['mode']}, {results['seconds']:.0f} s, "
        f"{results['code']['commit']}): {info['cores']} cores, Python {info['python']}, "
        f"{info['database']}, {info['redis']}; load average {load_before[0]:.1f} before"
    )
    print()
    print(report.table(figures))
    print()
    print(f"Results: {path}")
    errors = [name for name, outcome in outcomes.items() if "error" in outcome]
    if errors:
        print(f"bench: failed to run: {', '.join(errors)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
