"""What model calls cost, from list prices (US dollars per million tokens).

Each call is priced by the model that made it (a session's utility calls may run on
DEEPTHINK_FAST_MODEL), when it is stored. The built-in table below covers the Claude models;
operators price any other model, or change a price, with DEEPTHINK_PRICES: a JSON object of
model id (or id prefix) to prices, merged over the table, e.g.

    {"qwen3-32b": {"input": 0.2, "output": 0.6},
     "claude-opus-5-5": [4.0, 20.0, 0.4, 5.0]}

`input` and `output` are required; `cache_read` and `cache_write` default to 0.1x and
1.25x the input price (the 5-minute prompt cache). An entry applies to every model id that
starts with it; the longest match wins. Prices change; this is an estimate for budgeting,
not a bill.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings

# Prefix -> (input, output) $/MTok.
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
# Costs are kept to a millionth of a dollar.
MICRODOLLAR = Decimal("0.000001")
FIELDS = ("input", "output", "cache_read", "cache_write")


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    @classmethod
    def of(cls, input: float, output: float) -> Price:
        # Rounded, so 0.2 x 0.1 is the 0.02 an operator would write.
        cache_read = round(input * CACHE_READ_MULTIPLIER, 9)
        return cls(input, output, cache_read, round(input * CACHE_WRITE_MULTIPLIER, 9))


def _entry(model: str, value: Any) -> Price:
    """One DEEPTHINK_PRICES entry: [input, output(, cache_read, cache_write)] or an object
    with those names. Raises ValueError saying what is wrong."""
    if isinstance(value, list | tuple):
        if len(value) not in (2, 4):
            raise ValueError(
                f"{model!r}: give [input, output] or [input, output, cache_read, cache_write]."
            )
        value = dict(zip(FIELDS, value, strict=False))
    if not isinstance(value, Mapping):
        raise ValueError(f"{model!r}: prices must be an object or a list of numbers.")
    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        raise ValueError(f"{model!r}: unknown price {unknown[0]!r} (known: {', '.join(FIELDS)}).")
    for name in ("input", "output"):
        if name not in value:
            raise ValueError(f"{model!r}: the {name} price is missing.")
    for name, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int | float) or number < 0:
            raise ValueError(f"{model!r}: {name} must be a number of dollars of at least 0.")
    base = Price.of(float(value["input"]), float(value["output"]))
    return Price(
        base.input,
        base.output,
        float(value.get("cache_read", base.cache_read)),
        float(value.get("cache_write", base.cache_write)),
    )


def parse_prices(raw: str) -> dict[str, dict[str, float]]:
    """DEEPTHINK_PRICES as the settings keep it: model prefix -> the four prices. Raises
    ValueError with the reason when it is not a valid price table."""
    if not raw.strip():
        return {}
    try:
        table = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON: {error.msg} (column {error.colno}).") from None
    if not isinstance(table, dict):
        raise ValueError('give a JSON object: {"model-id": {"input": 1.0, "output": 5.0}}.')
    parsed = {}
    for model, value in table.items():
        if not model.strip() or len(model) > 100:
            raise ValueError("each model id must have 1 to 100 characters.")
        parsed[model] = vars(_entry(model, value))
    return parsed


def table() -> list[tuple[str, Price]]:
    """The built-in prices with DEEPTHINK_PRICES over them, longest prefix first."""
    merged = {prefix: Price.of(*prices) for prefix, prices in PRICES}
    configured: Mapping[str, Any] = getattr(settings, "DEEPTHINK_PRICES", None) or {}
    for model, value in configured.items():
        merged[model] = _entry(model, value)
    return sorted(merged.items(), key=lambda item: len(item[0]), reverse=True)


def price_for(model: str) -> Price | None:
    for prefix, price in table():
        if model.startswith(prefix):
            return price
    return None


def prices_for(model: str) -> tuple[float, float] | None:
    """(input, output) $/MTok, or None for a model without a price."""
    price = price_for(model)
    return None if price is None else (price.input, price.output)


def call_cost(
    model: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    price: Price | None = None,
) -> Decimal | None:
    """What these tokens cost on `model` (to a millionth of a dollar); None without a price."""
    price = price or price_for(model)
    if price is None:
        return None
    dollars = (
        input_tokens * Decimal(str(price.input))
        + output_tokens * Decimal(str(price.output))
        + cache_read_tokens * Decimal(str(price.cache_read))
        + cache_write_tokens * Decimal(str(price.cache_write))
    ) / 1_000_000
    return dollars.quantize(MICRODOLLAR, rounding=ROUND_HALF_UP)


def estimate(
    model: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float | None:
    """`call_cost` as a float (for benchmarks and estimates)."""
    cost = call_cost(
        model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
    )
    return None if cost is None else float(cost)


def unpriced(models: Iterable[str]) -> list[str]:
    """The models of `models` that have no price, each once, in order."""
    return [m for m in dict.fromkeys(models) if m and price_for(m) is None]


def how_to_price(model: str) -> str:
    """The sentence that tells an operator how to give `model` a price."""
    example = json.dumps({model: {"input": 1.0, "output": 5.0}})
    return (
        f"No price is known for the model {model!r}. An operator can price it with the "
        f"DEEPTHINK_PRICES setting (US dollars per million tokens, e.g. "
        f"DEEPTHINK_PRICES='{example}')."
    )


# --- what a session spent, per model and per kind of call ---------------------------------
# A session keeps a tally of its calls on its row (`ThinkingSession.usage_by_model`):
# {model: {purpose: {"calls", "input", "output", "cache_read", "cache_write", "cost"}}}, with
# "cost" None once a call of that model had no price. The page, the API, the export and the
# admin show it per model; the loop estimates what the final answer will cost from it.

TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")


@dataclass(frozen=True)
class Spent:
    """Calls, tokens and dollars (None when some call had no price) of a group of calls."""

    calls: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost: float | None = 0.0

    @property
    def tokens(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    @property
    def shown_cost(self) -> str:
        """For pages and reports: dollars to four places, or that there is no price."""
        return "no price" if self.cost is None else f"${self.cost:.4f}"

    def __add__(self, other: Spent) -> Spent:
        cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        return Spent(
            self.calls + other.calls,
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            None if cost is None else round(cost, 6),
        )

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Spent:
        cost = row.get("cost", 0.0)
        return cls(
            calls=int(row.get("calls", 0)),
            input=int(row.get("input", 0)),
            output=int(row.get("output", 0)),
            cache_read=int(row.get("cache_read", 0)),
            cache_write=int(row.get("cache_write", 0)),
            cost=None if cost is None else float(cost),
        )

    def as_json(self) -> dict[str, Any]:
        tokens = {kind: getattr(self, kind) for kind in TOKEN_KINDS}
        return {"calls": self.calls, **tokens, "cost": self.cost}


def tallied(
    tally: Mapping[str, Any],
    *,
    model: str,
    purpose: str,
    tokens: tuple[int, int, int, int],
    cost: Decimal | None,
) -> dict[str, Any]:
    """`tally` with one more call of `model` for `purpose` (tokens: input, output, cache
    read, cache write); a new dict."""
    updated = {m: dict(purposes) for m, purposes in tally.items()}
    call = Spent(1, *tokens, cost=None if cost is None else float(cost))
    group = Spent.of(updated.get(model, {}).get(purpose, {})) + call
    updated.setdefault(model, {})[purpose] = group.as_json()
    return updated


def by_model(tally: Mapping[str, Any]) -> list[tuple[str, Spent]]:
    """Each model's calls, tokens and cost, by model id."""
    return [
        (model, sum((Spent.of(row) for row in purposes.values()), Spent()))
        for model, purposes in sorted(tally.items())
    ]


def by_purpose(tally: Mapping[str, Any]) -> dict[str, Spent]:
    """Each kind of call's calls, tokens and cost, all models together."""
    found: dict[str, Spent] = {}
    for purposes in tally.values():
        for purpose, row in purposes.items():
            found[purpose] = found.get(purpose, Spent()) + Spent.of(row)
    return found
