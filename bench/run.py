"""Run the benchmarks: `make bench` (all of them), `BENCH_QUICK=1 make bench` (a smoke run).

    .venv/bin/python -m bench.run [--only 1,4]

Uses a throwaway SQLite file, or a throwaway PostgreSQL database next to DATABASE_URL's when
that is set; REDIS_URL adds the Redis variants. Prints a table and writes
bench/results/<timestamp>.json and bench/results/latest.json. Exits non-zero only when a
benchmark could not run (a missed target is a result, not an error).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
import traceback
import warnings
from typing import Any

from . import report
from .fakehost import FakeHost
from .harness import RESULTS, Setup, code_version, machine, prepare, start_django, teardown


async def run_all(setup: Setup, only: list[str]) -> dict[str, Any]:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from .scenarios import SCENARIOS, warm_up

    outcomes: dict[str, Any] = {}
    try:
        await warm_up(setup)
        for number, scenario in SCENARIOS.items():
            if only and number not in only:
                continue
            name = scenario.__name__
            print(f"bench: {number}. {name} ...", flush=True)
            began = time.monotonic()
            try:
                outcome = await scenario(setup)
            except Exception as error:
                traceback.print_exc()
                outcome = {
                    "figures": [
                        {
                            "label": f"{number}. {name}",
                            "value": None,
                            "shown": f"ERROR: {error}",
                            "target": "",
                            "ok": None,
                        }
                    ],
                    "error": "".join(traceback.format_exception(error)),
                }
            outcome["seconds"] = round(time.monotonic() - began, 1)
            outcomes[name] = outcome
    finally:
        await sync_to_async(connections.close_all)()
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated benchmark numbers (1-6, 8; figure 7 comes with 6)",
    )
    args = parser.parse_args(argv)
    only = [n.strip() for n in args.only.split(",") if n.strip()]
    quick = os.environ.get("BENCH_QUICK", "").strip() not in ("", "0")
    # `kill` / `timeout` as Ctrl-C: stop the workers and fakes, drop the throwaway database.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # With DEBUG off and no collectstatic, WhiteNoise warns about STATIC_ROOT on every login.
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
        outcomes = asyncio.run(run_all(setup, only))
        figures = [f for outcome in outcomes.values() for f in outcome["figures"]]
        results = {
            "mode": "quick" if quick else "full",
            "command": ("BENCH_QUICK=1 " if quick else "") + "make bench",
            "machine": {
                **machine(setup),
                "load_average_before": [round(v, 2) for v in load_before],
                "load_average_after": [round(v, 2) for v in os.getloadavg()],
            },
            "code": code_version(),
            "channel_layer_in_process": "in-memory (Redis variants use REDIS_URL)",
            "figures": figures,
            "benchmarks": outcomes,
            "seconds": round(time.monotonic() - began, 1),
        }
        path = report.write(results, RESULTS)
    finally:
        if setup is not None:
            teardown(setup)
        fakes.stop()
    info = results["machine"]
    print()
    print(
        f"Deep Think benchmarks ({results['mode']}, {results['seconds']:.0f} s): "
        f"{info['cores']} cores, {info['memory_gb']} GB, Python {info['python']}, "
        f"{info['database']}, {info['redis']}"
    )
    print()
    print(report.table(figures))
    print()
    print(f"Results: {path.relative_to(RESULTS.parent.parent)} (and bench/results/latest.json)")
    errors = [name for name, outcome in outcomes.items() if "error" in outcome]
    if errors:
        print(f"bench: failed to run: {', '.join(errors)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
