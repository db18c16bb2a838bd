"""Figure 7: what a session costs, from figure 6's measured token counts and the built-in
price table (thinking/pricing.py), per thinking-minute and per report, beside the anchors'
published per-report costs.

The fake answers at once, so time is modelled: every model call takes a fixed CALL_SECONDS
and writes OUTPUT_TOKENS_PER_SECOND (thinking included) while it does; the loop makes its
calls one after another, so a session's thinking-minutes are calls x CALL_SECONDS / 60.
Input tokens (and how many of them the prompt cache served) are as measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from thinking import pricing

from .fakehost import BOMB_TOKENS

CALL_SECONDS = 20.0
OUTPUT_TOKENS_PER_SECOND = 50.0
# Published per-report costs of comparable tools (their READMEs / docs).
ANCHORS = {
    "GPT Researcher, standard report": (0.1, 0.1),
    "GPT Researcher, deep research": (0.4, 0.4),
    "open_deep_research": (0.5, 1.9),
}
UTILITY_KINDS = ("plan", "questions")


@dataclass
class Cost:
    figures: list[dict[str, Any]]
    details: dict[str, Any]


def _figure(label: str, value: float, shown: str) -> dict[str, Any]:
    return {"label": label, "value": value, "shown": shown, "target": "", "ok": None}


def session_cost(by_kind: dict[str, Any]) -> Cost:
    main = settings.DEEPTHINK_MODEL
    fast = settings.DEEPTHINK_FAST_MODEL or main
    calls = sum(row["calls"] for row in by_kind.values())
    output_per_call = int(CALL_SECONDS * OUTPUT_TOKENS_PER_SECOND)
    dollars = uncached_dollars = 0.0
    tokens = 0
    per_kind: dict[str, float] = {}
    for kind, row in by_kind.items():
        model = fast if kind in UTILITY_KINDS else main
        output = row["calls"] * output_per_call
        spent = pricing.estimate(
            model,
            input_tokens=row["input"],
            output_tokens=output,
            cache_read_tokens=row["cache_read"],
            cache_write_tokens=row["cache_write"],
        )
        everything = row["input"] + row["cache_read"] + row["cache_write"]
        without_cache = pricing.estimate(model, input_tokens=everything, output_tokens=output)
        per_kind[kind] = round(spent or 0.0, 4)
        dollars += spent or 0.0
        uncached_dollars += without_cache or 0.0
        tokens += everything + output
    minutes = max(1e-9, calls * CALL_SECONDS / 60)
    measured_output = sum(row.get("output", 0) for row in by_kind.values()) % BOMB_TOKENS
    anchors = "; ".join(
        f"{name} ${low:g}" if low == high else f"{name} ${low:g}-{high:g}"
        for name, (low, high) in ANCHORS.items()
    )
    figures = [
        _figure(
            "7. cost per thinking-minute",
            round(dollars / minutes, 4),
            f"${dollars / minutes:.3f} and {tokens / minutes:,.0f} tokens per thinking-minute "
            f"({main}, {CALL_SECONDS:g} s a call, {output_per_call} output tokens a call); "
            f"${uncached_dollars / minutes:.3f} without the prompt cache",
        ),
        _figure(
            "7. cost of the 20-cycle session",
            round(dollars, 4),
            f"${dollars:.2f} for {minutes:.0f} thinking-minutes ({calls} calls); anchors per "
            f"report: {anchors}",
        ),
    ]
    return Cost(
        figures,
        {
            "model": main,
            "fast_model": fast,
            "call_seconds": CALL_SECONDS,
            "output_tokens_per_call": output_per_call,
            "measured_output_tokens_from_fake": measured_output,
            "calls": calls,
            "thinking_minutes": round(minutes, 2),
            "dollars": round(dollars, 4),
            "dollars_without_cache": round(uncached_dollars, 4),
            "dollars_by_kind": per_kind,
            "anchors_per_report_usd": ANCHORS,
        },
    )
