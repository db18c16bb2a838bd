"""`make mutate`: mutation testing of the core modules with mutmut, one module at a time.

    python -m mutation.run                           # every module, then the report
                                                     # (mutation/results/report.md)
    python -m mutation.run thinking/provider/capabilities.py  # one module (make mutate MODULE=...)
    python -m mutation.run --smoke                   # CI: one small module, score printed

mutmut keeps its work in `mutants/` (copies of the code with every mutant in it, and the
results). Each module gets its own `mutants/`, parked in `mutation/.cache/<module>/` while
another module runs, so every run is incremental: only functions or tests that changed since
the module's last run are tested again. Each run uses only the module's own test files
(mutation/modules.py) and the fast suite: no browser, no PostgreSQL or Redis.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from mutation import report
from mutation.modules import (
    DEFAULT_ORDER,
    MODULES,
    SMOKE_MODULE,
    SMOKE_MUTANTS,
    SMOKE_TESTS,
)
from mutation.modules import (
    MUTANTS as ONLY,
)

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"
CACHE = ROOT / "mutation" / ".cache"
# Each module's last verdicts, outliving mutants/ and mutation/.cache/ (not in git).
RESULTS = ROOT / "mutation" / "results"
MARKER = "deepthink-module.txt"  # which slot (a module, or "smoke") the current mutants/ is
TESTS = "deepthink-tests.txt"  # the test files the slot's local results were measured with
SMOKE = "smoke"
ATTEMPTS = int(os.environ.get("MUTATE_ATTEMPTS", 3))  # a module's run, when mutmut stops
SURVIVED_CODES = (0, 33, 255)  # mutmut: survived, no tests, harness failed (report.py)


def slug(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def parked(module: str) -> Path:
    return CACHE / slug(module) / "mutants"


def current_module() -> str | None:
    marker = MUTANTS / MARKER
    return marker.read_text().strip() if marker.exists() else None


def activate(module: str) -> None:
    """Make `mutants/` the given slot's own (park the other slot's, bring this one back)."""
    owner = current_module()
    if owner == module:
        return
    if MUTANTS.exists():
        if owner in MODULES or owner == SMOKE:
            target = parked(owner)
            shutil.rmtree(target, ignore_errors=True)
            target.parent.mkdir(parents=True, exist_ok=True)
            MUTANTS.rename(target)
        else:  # left by a bare `mutmut run` or an older layout: not ours to trust
            shutil.rmtree(MUTANTS)
    if parked(module).exists():
        parked(module).rename(MUTANTS)
    MUTANTS.mkdir(exist_ok=True)
    (MUTANTS / MARKER).write_text(module + "\n")


def workdir(module: str) -> Path:
    """Where a module's results are now: `mutants/` if active, else its parked copy."""
    return MUTANTS if current_module() == module else parked(module)


def fast_env() -> dict[str, str]:
    """The fast suite's environment: embedded SQLite and the in-memory channel layer."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["DEEPTHINK_MUTATION"] = "1"  # plain test ids that resolve back (tests/conftest.py)
    return env


def kept_verdicts(module: str) -> Path:
    return RESULTS / (slug(module) + ".json")


def resume(module: str) -> None:
    """A module with no mutmut results starts from the verdicts kept in mutation/results/:
    mutmut keeps those of functions whose code is unchanged (it compares each function's
    hash) and tests the rest, so a cleared cache does not run every mutant of the loop again
    (hours)."""
    meta = MUTANTS / (module + ".meta")
    if not meta.exists() and kept_verdicts(module).exists():
        meta.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kept_verdicts(module), meta)


def keep(module: str) -> None:
    """Save the module's verdicts in mutation/results/ (also after an interrupted run)."""
    meta = MUTANTS / (module + ".meta")
    if meta.exists():
        RESULTS.mkdir(exist_ok=True)
        shutil.copyfile(meta, kept_verdicts(module))


def widen_tests(module: str, tests: tuple[str, ...]) -> None:
    """mutmut throws every verdict away when a module's test files change. When files were
    only added, a kill still stands (it had fewer tests against it) and survivors are tested
    again anyway, so the results are kept in mutation/results/ and the cache starts over
    from them (as `resume` does) instead of re-running every mutant (hours for the loop).
    A file taken away resets as mutmut does: a kill may have come from it."""
    recorded = MUTANTS / TESTS
    before = set(recorded.read_text().split()) if recorded.exists() else None
    if before is not None and before < set(tests):
        keep(module)
        shutil.rmtree(MUTANTS)
        activate(module)
    recorded.write_text("\n".join(tests) + "\n")


def run_module(module: str, *, workers: int, smoke: bool = False) -> int:
    activate(SMOKE if smoke else module)
    tests = SMOKE_TESTS if smoke else MODULES[module]
    if not smoke:  # the smoke run measures afresh every time
        widen_tests(module, tests)
        resume(module)
    command = [sys.executable, "-m", "mutation.run", "--child", module, "--workers", str(workers)]
    if smoke:
        command.append("--smoke")
    print(f"\n== mutmut on {module} (tests: {', '.join(tests)})", flush=True)
    try:
        code = subprocess.call(command, cwd=ROOT, env=fast_env())  # noqa: S603
        for _ in range(ATTEMPTS - 1):
            if code == 0:
                break
            # mutmut gives up on a module when one unmutated test fails while it records
            # which tests reach which function; a session test with a tight real-time budget
            # can, on a loaded machine. The run is incremental, so trying again loses nothing.
            print(f"== mutmut stopped ({code}); trying {module} again", flush=True)
            code = subprocess.call(command, cwd=ROOT, env=fast_env())  # noqa: S603
    finally:
        if not smoke:
            keep(module)
    return code


def retest_survivors(module: str) -> None:
    """mutmut keeps every earlier verdict; a survivor may be killed by a test added since,
    so survivors (and mutants that had no test) are tested again. Killed ones stay killed
    until their function changes, and so do survivors listed as equivalent: testing one runs
    every test of its function (minutes on the loop), and no new test can kill it."""
    meta = MUTANTS / (module + ".meta")
    if not meta.exists():
        return
    data = json.loads(meta.read_text())
    codes = data["exit_code_by_key"]
    equivalent = report.load_equivalents()
    for name, code in codes.items():
        if code in SURVIVED_CODES and not (code == 0 and name in equivalent):
            codes[name] = None
    meta.write_text(json.dumps(data, indent=4))


def child(module: str, workers: int, smoke: bool) -> None:
    """Inside the child process: mutmut with its configuration narrowed to one module."""
    from mutmut import __main__ as mutmut_main
    from mutmut import configuration
    from mutmut.__main__ import cli
    from mutmut.workers import isolation

    # mutmut stops a mutant's run at a wall-clock bound of half its CPU limit. On a busy
    # 2-core machine (or at `nice`) a healthy run waits for a CPU longer than that and was
    # reported as a timeout, which counts as a kill. The CPU limit (RLIMIT_CPU, set in the
    # worker) still ends a mutant that really loops; the wall bound only backs it up.
    register = isolation.register_timeout
    slack = float(os.environ.get("MUTATE_WALL_SLACK", 20))
    isolation.register_timeout = lambda pid, timeout_s: register(pid, timeout_s * slack)

    retest_survivors(module)
    base = configuration.config()
    configuration._config = dataclasses.replace(
        base,
        only_mutate=[module],
        pytest_add_cli_args_test_selection=list(SMOKE_TESTS if smoke else MODULES[module]),
    )
    if smoke:
        # Named mutants are always run again: the smoke run measures afresh every time.
        cli.main(["run", "--max-children", str(workers), SMOKE_MUTANTS], prog_name="mutmut")
        return
    only = ONLY.get(module)
    if only:
        # mutmut re-runs every mutant named on its command line, so a module with a mutant
        # filter (mutation/modules.py) would start over each time. The filter is applied to
        # mutmut's own list instead, which keeps the run incremental.
        collect = mutmut_main.collect_source_file_mutation_data

        def only_filtered(*, mutant_names: tuple[str, ...] | list[str]) -> Any:
            mutants, by_path = collect(mutant_names=mutant_names)
            return [m for m in mutants if matches(m[1], only)], by_path

        mutmut_main.collect_source_file_mutation_data = only_filtered
    # mutmut exits through SystemExit with its own status.
    cli.main(["run", "--max-children", str(workers)], prog_name="mutmut")


def matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: all)")
    parser.add_argument(
        "--smoke", action="store_true", help="CI: request building only; score printed"
    )
    parser.add_argument("--workers", type=int, default=int(os.environ.get("MUTATE_WORKERS", 2)))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.workers, args.smoke)
        return 0

    if args.smoke:
        code = run_module(SMOKE_MODULE, workers=args.workers, smoke=True)
        prefix = SMOKE_MUTANTS.removesuffix("*")
        row = report.summarise(SMOKE_MODULE, MUTANTS, only=prefix)
        print()
        print(report.table([row]))
        print(f"(smoke: only {prefix}* against {', '.join(SMOKE_TESTS)}; not asserted)")
        return code
    modules = args.modules or list(DEFAULT_ORDER)
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        parser.error(f"not a covered module: {', '.join(unknown)} (see mutation/modules.py)")
    failed = [m for m in modules if run_module(m, workers=args.workers) != 0]
    rows = [report.summarise(m, workdir(m)) for m in modules]
    print()
    print(report.table(rows))
    if failed:
        print(f"\nmutmut could not finish: {', '.join(failed)}", file=sys.stderr)
        return 1
    report.write_report()
    print(f"\nWrote {report.REPORT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
