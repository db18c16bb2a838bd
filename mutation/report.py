"""The mutation table: killed / survived / equivalent / timeout per module, and survivors by
file and line. `python -m mutation.report` prints it and writes mutation/results/report.md
from the results mutmut left on this machine (the active `mutants/` and the parked ones in
mutation/.cache/); a module with none there keeps its row from the previous report.

Equivalent mutants (no behaviour a person could notice changes) are listed in
mutation/equivalents/<module>.toml with a one-line reason and the mutated line; an entry
whose line no longer matches the mutant is stale and the mutant counts as a survivor again.
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from importlib import metadata
from pathlib import Path

from mutation.modules import DEFAULT_ORDER, MUTANTS

ROOT = Path(__file__).resolve().parent.parent
# The report of the last runs on this machine, like the verdicts beside it (not in git).
REPORT = ROOT / "mutation" / "results" / "report.md"
EQUIVALENTS = ROOT / "mutation" / "equivalents"  # one file per module: <module>.toml
TARGET = 90.0
# mutmut files a run whose test harness raised (e.g. pytest answering "not found" for a
# test id) under exit code 255, which it calls a timeout. It is no kill, so it is not one here.
HARNESS_ERROR = 255


@dataclass
class Survivor:
    name: str
    line: int
    before: str
    after: str
    reason: str = ""  # set when it is a listed equivalent


@dataclass
class Row:
    module: str
    ran: bool = False
    killed: int = 0
    survived: int = 0
    equivalent: int = 0
    timeout: int = 0
    no_tests: int = 0
    other: int = 0  # not checked yet, suspicious, segfault, interrupted
    survivors: list[Survivor] = field(default_factory=list)
    equivalents: list[Survivor] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return (
            self.killed
            + self.survived
            + self.equivalent
            + self.timeout
            + self.no_tests
            + self.other
        )

    @property
    def score(self) -> float | None:
        """Share of the mutants that can be killed which the tests do kill (a timeout is a
        kill: the mutant made the code hang and the run noticed)."""
        counted = self.total - self.equivalent
        return 100.0 * (self.killed + self.timeout) / counted if counted else None


def load_equivalents() -> dict[str, dict[str, str]]:
    entries: dict[str, dict[str, str]] = {}
    for path in sorted(EQUIVALENTS.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        entries.update({entry["mutant"]: entry for entry in data.get("equivalent", [])})
    return entries


def _function_span(source: str, function: str, cls: str | None) -> tuple[int, int]:
    tree = ast.parse(source)
    nodes: list[ast.AST] = list(tree.body)
    if cls:
        owner = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        nodes = list(owner.body) if owner else []
    for node in nodes:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            return node.lineno, node.end_lineno or node.lineno
    return 1, len(source.splitlines())


def _change(diff: str) -> tuple[str, str]:
    """The first removed and added line of a mutant's diff, stripped."""
    removed = [line[1:] for line in diff.splitlines() if line.startswith("-") and line[1:2] != "-"]
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and line[1:2] != "+"]
    return (removed[0].strip() if removed else ""), (added[0].strip() if added else "")


def _describe(module: str, name: str, mutants_dir: Path) -> Survivor:
    from mutmut.mutation.diff_apply import get_diff_for_mutant
    from mutmut.utils.format_utils import orig_function_and_class_names_from_key

    with contextlib.chdir(mutants_dir.parent):
        diff = get_diff_for_mutant(name, path=module)
    before, after = _change(diff)
    function, cls = orig_function_and_class_names_from_key(name)
    source = (ROOT / module).read_text()
    start, end = _function_span(source, function.rpartition(".")[-1], cls)
    lines = source.splitlines()
    line = _changed_line(diff, lines, start, end)
    if line is None:
        line = next(
            (n for n in range(start, end + 1) if before and lines[n - 1].strip() == before), start
        )
    return Survivor(name=name, line=line, before=before, after=after)


def _changed_line(diff: str, lines: list[str], start: int, end: int) -> int | None:
    """The file line of a mutant's first removed line, found by the whole hunk (its context
    and removed lines in order), so a line whose text occurs twice in a function (the same
    call in two places) is told apart by its neighbours."""
    body = [t for t in diff.splitlines() if t[:1] in (" ", "-") and not t.startswith("---")]
    old = [t[1:].strip() for t in body]
    first = next((i for i, t in enumerate(body) if t.startswith("-")), None)
    if first is None:
        return None
    for top in range(start, end - len(old) + 2):
        if [t.strip() for t in lines[top - 1 : top - 1 + len(old)]] == old:
            return top + first
    return None


def summarise(module: str, mutants_dir: Path, *, only: str = "") -> Row:
    """Count a module's verdicts: those of its filtered mutants (mutation/modules.py), or
    with `only`, those whose names start with it."""
    from mutmut.stats import status_by_exit_code

    row = Row(module)
    meta = mutants_dir / (module + ".meta")
    if not meta.exists():
        return row
    row.ran = True
    equivalents = load_equivalents()
    for name, code in sorted(json.loads(meta.read_text())["exit_code_by_key"].items()):
        if not name.startswith(only):
            continue
        if module in MUTANTS and not any(fnmatchcase(name, g) for g in MUTANTS[module]):
            continue
        status = status_by_exit_code[code]
        if code == HARNESS_ERROR:
            row.other += 1  # not a verdict: mutmut could not run the tests at all
        elif status in ("killed", "caught by type check"):
            row.killed += 1
        elif status == "timeout":
            row.timeout += 1
        elif status == "no tests":
            row.no_tests += 1
            row.survivors.append(_describe(module, name, mutants_dir))
        elif status == "survived":
            survivor = _describe(module, name, mutants_dir)
            listed = equivalents.get(name)
            if listed and listed.get("change", "").strip() == survivor.after:
                survivor.reason = listed["reason"]
                row.equivalent += 1
                row.equivalents.append(survivor)
            else:
                if listed:
                    row.stale.append(name)
                row.survived += 1
                row.survivors.append(survivor)
        else:
            row.other += 1
    return row


@dataclass
class Earlier:
    """What the previous report says of modules with no mutmut results here now (their
    caches were cleared): their table rows and sections, with the commit they were measured
    at."""

    commit: str = ""
    rows: dict[str, str] = field(default_factory=dict)
    sections: dict[str, str] = field(default_factory=dict)


def earlier(text: str) -> Earlier:
    found = re.search(r"^Measured on \S+ at commit ([0-9a-f]+)", text, re.MULTILINE)
    kept = Earlier(found.group(1) if found else "unknown")
    for line in re.finditer(r"^\| (thinking/\S+) \|.*\|$", text, re.MULTILINE):
        if "not run yet" not in line.group(0):
            kept.rows[line.group(1)] = line.group(0)
    for section in re.finditer(r"^## (\S+)\n.*?(?=^## |\Z)", text, re.MULTILINE | re.DOTALL):
        kept.sections[section.group(1)] = section.group(0).rstrip()
    return kept


def _carried(line: str, commit: str) -> str:
    """An earlier row, its score marked with the commit it was measured at."""
    cells = line.rstrip("|").rstrip().split(" | ")
    if "(measured at" not in cells[-1]:
        cells[-1] += f" (measured at {commit})"
    return " | ".join(cells) + " |"


def table(rows: list[Row], kept: Earlier | None = None) -> str:
    kept = kept or Earlier()
    head = (
        "| module | mutants | killed | survived | equivalent | timeout | no tests | not run "
        "| % killed |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        if not row.ran:
            if row.module in kept.rows:
                lines.append(_carried(kept.rows[row.module], kept.commit))
            else:
                lines.append(f"| {row.module} | not run yet | | | | | | | |")
            continue
        score = "n/a" if row.score is None else f"{row.score:.1f}%"
        if row.score is not None and row.score < TARGET:
            score += " (below 90)"
        lines.append(
            f"| {row.module} | {row.total} | {row.killed} | {row.survived} | {row.equivalent} "
            f"| {row.timeout} | {row.no_tests} | {row.other} | {score} |"
        )
    return "\n".join(lines)


def all_rows() -> list[Row]:
    from mutation.run import workdir

    return [summarise(module, workdir(module)) for module in DEFAULT_ORDER]


def _commit() -> str:
    def git(*args: str) -> str:
        command = ["git", *args]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)  # noqa: S603
        return result.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no")
    return commit + (" (with uncommitted changes)" if changed else "")


def markdown(rows: list[Row], kept: Earlier | None = None) -> str:
    """The report: the table, then each module's survivors and equivalents."""
    kept = kept or Earlier()
    today = datetime.date.today().isoformat()
    parts = [
        "# Mutation testing: the last results",
        "",
        "Written by `make mutate` and `python -m mutation.report` (mutation/README.md says how",
        "to read it). % killed = (killed + timeout) / (mutants - equivalent).",
        "",
        f"Measured on {today} at commit {_commit()}, mutmut {metadata.version('mutmut')}.",
        "",
        table(rows, kept),
        "",
    ]
    below = [r for r in rows if r.ran and r.score is not None and r.score < TARGET]
    if below:
        named = [
            r.module
            + (
                f" ({r.other} mutants not run yet, counted as not killed; "
                f"`make mutate MODULE={r.module}` resumes)"
                if r.other
                else ""
            )
            for r in below
        ]
        parts += [f"Below the 90% target: {', '.join(named)}; the survivors are below.", ""]
    carried = [r.module for r in rows if not r.ran and r.module in kept.rows]
    if carried:
        parts += [
            f"No results here for {', '.join(carried)}: their rows (and sections below) are "
            "the earlier run's, at the commit each names.",
            "",
        ]
    waiting = [r.module for r in rows if not r.ran and r.module not in kept.rows]
    if waiting:
        parts += [
            "Not run yet: " + ", ".join(waiting) + ".",
            "",
        ]
    for row in rows:
        if not row.ran and row.module in kept.sections:
            parts += [kept.sections[row.module], ""]
            continue
        if not row.ran or not (row.survivors or row.equivalents):
            continue
        parts += [f"## {row.module}", ""]
        if row.survivors:
            parts += ["Survivors:", ""]
            parts += [
                f"- {row.module}:{s.line} `{s.before}` -> `{s.after}` ({s.name})"
                for s in sorted(row.survivors, key=lambda s: s.line)
            ]
            parts.append("")
        if row.stale:
            parts += [f"Stale entries in mutation/equivalents/: {', '.join(row.stale)}", ""]
        if row.equivalents:
            parts += ["Equivalent (not counted):", ""]
            parts += [
                f"- {row.module}:{s.line} `{s.before}` -> `{s.after}`: {s.reason}"
                for s in sorted(row.equivalents, key=lambda s: s.line)
            ]
            parts.append("")
    return "\n".join(parts)


def _kept() -> Earlier | None:
    return earlier(REPORT.read_text()) if REPORT.exists() else None


def write_report(rows: list[Row] | None = None) -> None:
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(markdown(rows if rows is not None else all_rows(), _kept()))


def main() -> int:
    rows = all_rows()
    print(table(rows, _kept()))
    for row in rows:
        for s in row.survivors:
            print(f"  survived: {row.module}:{s.line} `{s.before}` -> `{s.after}` ({s.name})")
    if "--no-write" not in sys.argv:
        write_report(rows)
        print(f"\nWrote {REPORT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
