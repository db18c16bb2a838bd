"""What a session is expected to cost, before it starts: for the start form, the API
(`POST /api/sessions/estimate`) and the CLI (`manage.py think --estimate`).

expected cost = calls per thinking-minute x minutes x the price of a typical call, with the
calls split between the session's model and the fast model (utility calls: the plan,
sub-question lists, re-ranking, citation checks) and each priced by its own model
(`pricing`). The figures per call come from this server's own recent completed sessions
with the same research setting (their ModelCall rows and thinking time) once there are
MIN_SESSIONS of them; until then from the built-in figures below, the benchmark's ("7. Cost
per thinking-minute" in the benchmark diary, `git show 1a29a6f^:bench/README.md`: a model
call every 20 s of thinking, so 3 per thinking-minute, ~30% of them utility work; ~15,000
tokens per minute with 87% of the input read from the prompt cache; ~1,000 output tokens a
call). The range is LOW to HIGH times the expected
figure, and never above a ceiling the session will hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Q, Sum

from thinking.models import ModelCall, Status, ThinkingSession
from thinking.provider import pricing
from thinking.provider.llm import UTILITY_PURPOSES
from thinking.provider.pricing import Spent

# The built-in figures (the benchmark diary's figure 7), used until this server has its own.
CALLS_PER_MINUTE = 3.0
UTILITY_SHARE = 0.3
MAIN_CALL = Spent(1, input=300, output=1000, cache_read=4000, cache_write=500)
UTILITY_CALL = Spent(1, input=600, output=300, cache_read=1500, cache_write=300)
LOW, HIGH = 0.5, 1.5
MIN_SESSIONS = 3  # completed sessions with the same research setting
RECENT_SESSIONS = 50
MIN_SECONDS = 10.0  # sessions that thought less say little about a rate


@dataclass(frozen=True)
class Measure:
    """A typical session's calls: how many per thinking-minute, what share is utility
    work, and the mean tokens of a main and of a utility call."""

    calls_per_minute: float
    utility_share: float
    main_call: Spent
    utility_call: Spent
    source: str


BUILT_IN = Measure(
    CALLS_PER_MINUTE,
    UTILITY_SHARE,
    MAIN_CALL,
    UTILITY_CALL,
    "built-in figures (the benchmarks' cost per thinking-minute)",
)


def _mean(total: Spent) -> Spent:
    """One call's mean tokens (`calls` 1); cost is left out (prices are applied later)."""
    n = max(1, total.calls)
    return Spent(
        1, total.input // n, total.output // n, total.cache_read // n, total.cache_write // n
    )


def measure(*, research: bool) -> Measure:
    """This server's figures from its most recent completed sessions with this research
    setting (at least MIN_SESSIONS of them), else the built-in ones."""
    recent = list(
        ThinkingSession.objects.filter(
            status=Status.COMPLETED, research_enabled=research, active_seconds__gte=MIN_SECONDS
        )
        .order_by("-finished_at")
        .values_list("pk", "active_seconds")[:RECENT_SESSIONS]
    )
    if len(recent) < MIN_SESSIONS:
        return BUILT_IN
    minutes = sum(seconds for _, seconds in recent) / 60
    utility = Q(purpose__in=UTILITY_PURPOSES)
    totals = ModelCall.objects.filter(session_id__in=[pk for pk, _ in recent]).aggregate(
        **{
            f"{group}_{name}": aggregate
            for group, where in (("main", ~utility), ("utility", utility))
            for name, aggregate in (
                ("calls", Count("pk", filter=where)),
                ("input", Sum("input_tokens", filter=where)),
                ("output", Sum("output_tokens", filter=where)),
                ("cache_read", Sum("cache_read_tokens", filter=where)),
                ("cache_write", Sum("cache_write_tokens", filter=where)),
            )
        }
    )

    def group(name: str) -> Spent:
        return Spent(
            totals[f"{name}_calls"],
            *(totals[f"{name}_{kind}"] or 0 for kind in pricing.TOKEN_KINDS),
        )

    main, utility_calls = group("main"), group("utility")
    calls = main.calls + utility_calls.calls
    if not calls:
        return BUILT_IN
    return Measure(
        calls / minutes,
        utility_calls.calls / calls,
        _mean(main) if main.calls else MAIN_CALL,
        _mean(utility_calls) if utility_calls.calls else UTILITY_CALL,
        f"measured on this server from its last {len(recent)} completed sessions "
        f"with research {'on' if research else 'off'}",
    )


@dataclass(frozen=True)
class Estimate:
    """The expected cost of a session (US dollars; None when a model it uses has no
    price), its range, and the calls and tokens behind it."""

    model: str
    fast_model: str
    minutes: float
    research: bool
    calls: int
    tokens: int
    expected: float | None
    low: float | None
    high: float | None
    calls_per_minute: float
    source: str
    capped_by: str = ""  # "the cost ceiling" / "the token ceiling" when one bounds it
    unpriced: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "fast_model": self.fast_model,
            "minutes": self.minutes,
            "research": self.research,
            "expected_usd": self.expected,
            "low_usd": self.low,
            "high_usd": self.high,
            "calls": self.calls,
            "tokens": self.tokens,
            "calls_per_minute": round(self.calls_per_minute, 3),
            "source": self.source,
            "capped_by": self.capped_by or None,
            "unpriced_models": list(self.unpriced),
        }

    @property
    def summary(self) -> str:
        """One sentence for the form and the terminal."""
        calls = f"about {self.calls} model call{'s' if self.calls != 1 else ''}"
        if self.expected is None:
            names = ", ".join(self.unpriced)
            cost = f"cost unknown ({names} {'has' if len(self.unpriced) == 1 else 'have'} no price)"
        else:
            cost = f"${self.low:.2f} to ${self.high:.2f} (expected ${self.expected:.2f})"
        capped = f", held by {self.capped_by}" if self.capped_by else ""
        return (
            f"Estimated cost: {cost}{capped}: {calls} and {self.tokens:,} tokens in "
            f"{self.minutes:g} minute{'s' if self.minutes != 1 else ''} on {self.model}. "
            f"From {self.calls_per_minute:.1f} calls per thinking-minute, {self.source}."
        )


def estimate(
    *,
    model: str,
    minutes: float,
    research: bool = True,
    max_cost_usd: Decimal | float | None = None,
    token_ceiling: int | None = None,
) -> Estimate:
    """What a session of `minutes` on `model` is expected to cost (see the module)."""
    fast = settings.DEEPTHINK_FAST_MODEL or model
    figures = measure(research=research)
    calls = figures.calls_per_minute * minutes
    utility_calls = calls * figures.utility_share
    main_calls = calls - utility_calls
    tokens = main_calls * figures.main_call.tokens + utility_calls * figures.utility_call.tokens
    unpriced = tuple(pricing.unpriced([model, fast]))
    expected: float | None = None
    if not unpriced:
        expected = sum(
            float(
                pricing.call_cost(
                    which,
                    input_tokens=round(n * call.input),
                    output_tokens=round(n * call.output),
                    cache_read_tokens=round(n * call.cache_read),
                    cache_write_tokens=round(n * call.cache_write),
                )
                or 0
            )
            for which, n, call in (
                (model, main_calls, figures.main_call),
                (fast, utility_calls, figures.utility_call),
            )
        )
    low = None if expected is None else expected * LOW
    high = None if expected is None else expected * HIGH
    capped_by = ""
    if token_ceiling is not None and tokens * HIGH > token_ceiling:
        share = token_ceiling / (tokens * HIGH)
        capped_by = "the token ceiling"
        tokens = min(tokens, token_ceiling)
        if expected is not None and low is not None and high is not None:
            high *= share
            expected, low = min(expected, high), min(low, high)
    if max_cost_usd is not None and high is not None and high > float(max_cost_usd):
        ceiling = float(max_cost_usd)
        capped_by = "the cost ceiling"
        high = ceiling
        expected, low = min(expected or 0, ceiling), min(low or 0, ceiling)
    return Estimate(
        model=model,
        fast_model=fast,
        minutes=minutes,
        research=research,
        calls=max(1, round(calls)),
        tokens=round(tokens),
        expected=None if expected is None else round(expected, 4),
        low=None if low is None else round(low, 4),
        high=None if high is None else round(high, 4),
        calls_per_minute=figures.calls_per_minute,
        source=figures.source,
        capped_by=capped_by,
        unpriced=unpriced,
    )
