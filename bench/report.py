"""The results table (printed) and the JSON files (bench/results/)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _mark(ok: bool | None) -> str:
    return {True: "ok", False: "MISSED", None: ""}[ok]


def table(figures: list[dict[str, Any]]) -> str:
    rows = [("figure", "result", "target", "")]
    rows += [(f["label"], f["shown"], f["target"], _mark(f["ok"])) for f in figures]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(figures: list[dict[str, Any]]) -> str:
    """The same table in Markdown, for bench/README.md."""
    lines = ["| figure | result | target | |", "|---|---|---|---|"]
    for f in figures:
        cells = [f["label"], f["shown"], f["target"], _mark(f["ok"])]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def write(results: dict[str, Any], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    text = json.dumps(results, indent=2, default=str)
    path = folder / f"{stamp}.json"
    path.write_text(text)
    (folder / "latest.json").write_text(text)
    return path
