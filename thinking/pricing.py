"""Estimated cost of a session from the model's list prices (US dollars per million tokens).

Cache writes cost 1.25x the input price (5-minute cache) and cache reads 0.1x. Prices change;
this is an estimate for budgeting, not a bill.
"""

from __future__ import annotations

# Prefix -> (input, output) $/MTok. Longest prefix first.
PRICES: tuple[tuple[str, tuple[float, float]], ...] = (
    ("claude-fable-5-2", (8.0, 40.0)),
    ("claude-fable-5", (10.0, 50.0)),
    ("claude-mythos-5", (10.0, 50.0)),
    ("claude-opus-5-5", (4.0, 20.0)),
    ("claude-sonnet-5-5", (2.0, 10.0)),
    ("claude-haiku-5-5", (0.10, 0.50)),
    ("claude-opus-5", (5.0, 25.0)),
    ("claude-sonnet-5", (2.0, 10.0)),
    ("claude-opus-4", (5.0, 25.0)),
    ("claude-sonnet-4", (3.0, 15.0)),
    ("claude-haiku-4-5", (1.0, 5.0)),
)
CACHE_WRITE_MULTIPLIER = 1.25
CACHE_READ_MULTIPLIER = 0.1


def prices_for(model: str) -> tuple[float, float] | None:
    for prefix, prices in PRICES:
        if model.startswith(prefix):
            return prices
    return None


def estimate(
    model: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float | None:
    prices = prices_for(model)
    if prices is None:
        return None
    per_input, per_output = prices
    dollars = (
        input_tokens * per_input
        + cache_write_tokens * per_input * CACHE_WRITE_MULTIPLIER
        + cache_read_tokens * per_input * CACHE_READ_MULTIPLIER
        + output_tokens * per_output
    ) / 1_000_000
    return round(dollars, 6)
