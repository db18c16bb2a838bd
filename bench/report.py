"""The tables (printed, and in Markdown for bench/README.md) and the JSON files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _mark(ok: bool | None) -> str:
    return {True: "ok", False: "MISSED", None: ""}[ok]


def _columns(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _markdown(rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    for row in rows[1:]:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines)


def table(figures: list[dict[str, Any]], *, markdown: bool = False) -> str:
    """One benchmark run: figure, result, target, whether it is met."""
    rows: list[tuple[str, ...]] = [("figure", "result", "target", "")]
    rows += [(f["label"], f["shown"], f["target"], _mark(f["ok"])) for f in figures]
    return _markdown(rows) if markdown else _columns(rows)


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "share":
        return f"{100 * value:.0f}%"
    if unit == "x":
        return f"{value:.2f} x"
    if unit == "MB":
        return f"{value:.2f} MB"
    if unit == "MB/100":
        return f"{value:+.2f} MB/100 cycles"
    return f"{value:.1f} {unit}" if abs(value) < 100 else f"{value:.0f} {unit}"


def comparison(rows: list[dict[str, Any]], *, markdown: bool = False) -> str:
    """Before and after: figure, before, after, after / before, target."""
    table_rows: list[tuple[str, ...]] = [("figure", "before", "after", "after / before", "target")]
    for row in rows:
        before, after = row["before"], row["after"]
        ratio = ""
        if before and after is not None and before > 0 and after >= 0:
            ratio = f"{after / before:.2f}"
        table_rows.append(
            (
                row["label"],
                _value(before, row["unit"]),
                _value(after, row["unit"]),
                ratio,
                row["target"],
            )
        )
    return _markdown(table_rows) if markdown else _columns(table_rows)


def write(results: dict[str, Any], folder: Path, name: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    text = json.dumps(results, indent=2, default=str)
    path = folder / f"{name or stamp}.json"
    path.write_text(text)
    (folder / "latest.json").write_text(text)
    return path
