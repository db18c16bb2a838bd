"""The confidence trend in the seed's words (seed 000, "Confidence Evolution"): rising
confidence means understanding is converging, falling confidence means the thinking found
more complexity, stable confidence means it reached a plateau. Computed from the syntheses'
confidence, the same values the chart draws."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

WINDOW = 3  # the latest syntheses the trend is read from
THRESHOLD = 0.03  # smaller moves (3 points) are noise, not a trend


@dataclass(frozen=True)
class Trend:
    kind: str  # "converging", "plateau" or "falling"; empty with fewer than two syntheses
    words: str


def _pct(value: float) -> str:
    return f"{round(value * 100)}%"


def describe(values: Sequence[float]) -> Trend:
    """The trend of the latest syntheses, in a sentence a person reads under the chart."""
    if len(values) < 2:
        return Trend("", "")
    recent = [float(v) for v in values[-WINDOW:]]
    start, end = recent[0], recent[-1]
    span = f"over the last {len(recent)} syntheses"
    if end - start > THRESHOLD:
        return Trend(
            "converging",
            f"Converging: confidence rose from {_pct(start)} to {_pct(end)} {span}; "
            "understanding is coming together.",
        )
    if start - end > THRESHOLD:
        peak = max(values[:-1])
        earlier = f", after reaching {_pct(peak)}" if peak > start + THRESHOLD else ""
        return Trend(
            "falling",
            f"Falling after new complexity: confidence dropped from {_pct(start)} to "
            f"{_pct(end)} {span}{earlier}; the thinking found more to untangle.",
        )
    return Trend(
        "plateau",
        f"Plateau: confidence held around {_pct(end)} {span}; understanding has levelled off.",
    )
