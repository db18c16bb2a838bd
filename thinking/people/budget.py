"""Ceilings and team budgets.

A session may carry a ceiling in dollars (list prices, each call priced by its own model:
see `pricing`) besides its token ceiling. A ceiling holds the final answer inside it: the
loop stops thinking once what is spent, plus what the next step and the final answer (with
its citation check) are expected to cost, reaches the ceiling (`ceiling_reached`). The
expectation comes from this session's own calls so far, with a safety margin.

A team's monthly budget may be in tokens, dollars or both. Sessions of one team *reserve*
from that budget when they start: a running session counts as having spent its whole
ceiling until it finishes (then what it really spent counts), and the reservation is taken
with the team's row locked, so sessions started at the same moment can never together be
promised more than is left. A session's reservation is its ceiling, so it holds the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_UP, Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.forms import ValidationError
from django.utils import timezone

from accounts.models import Team
from thinking.formatting import counted
from thinking.models import FINISHED, CompletionReason, ThinkingSession
from thinking.provider.pricing import Spent, by_purpose, price_for

CENT = Decimal("0.0001")
# The next step and the answer are reserved at this multiple of what the session's own calls
# say they cost: later prompts are longer than the mean of earlier ones.
SAFETY = 1.5
ANSWER_PURPOSES = ("synthesis", "final")
CYCLE_PURPOSES = ("thoughts", "questions", "rerank")


def month_start() -> Any:
    """The start of this calendar month: team budgets count from here."""
    now = timezone.now()
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


class BudgetExhausted(ValidationError):
    """Nothing is left of the team's monthly budget once running sessions' reservations count."""


def session_cost(session: ThinkingSession) -> Decimal | None:
    """What the session has spent so far, in dollars; None for a model without a price."""
    cost = session.estimated_cost
    return None if cost is None else Decimal(str(cost))


def over_cost_ceiling(session: ThinkingSession) -> bool:
    """Spent its whole dollar ceiling (nothing reserved)."""
    if session.max_cost_usd is None:
        return False
    cost = session_cost(session)
    return cost is not None and cost >= session.max_cost_usd


def reserved(session: ThinkingSession, *, dollars: bool) -> float:
    """What the next step and the final answer with its citation check are expected to
    cost, in dollars (else tokens), from this session's own calls so far:

    - a synthesis: the mean of its syntheses, else of all its calls;
    - the final answer: a synthesis plus its review of the whole session, which reads about
      what the model has written so far (its output tokens, up to
      DEEPTHINK_FINAL_PROMPT_TOKENS) as new input; or its earlier final answers' mean (an
      extended session) when that is more;
    - a citation check: its checks' mean per synthesis (before its first, one mean call);
    - the next step: its cycles' mean, or a synthesis when that is dearer;

    all times SAFETY. 0 before its first call."""
    purposes = by_purpose(session.usage_by_model)
    everything = sum(purposes.values(), Spent())
    if not everything.calls:
        return 0.0

    def measure(spent: Spent) -> float:
        return (spent.cost or 0.0) if dollars else float(spent.tokens)

    def group(*names: str) -> Spent:
        return sum((purposes[name] for name in names if name in purposes), Spent())

    per_call = measure(everything) / everything.calls
    syntheses, finals, answers = group("synthesis"), group("final"), group(*ANSWER_PURPOSES)
    synthesis = measure(syntheses) / syntheses.calls if syntheses.calls else per_call
    review = float(min(settings.DEEPTHINK_FINAL_PROMPT_TOKENS, everything.output))
    if dollars:
        price = price_for(session.model_id)
        review = review * price.input / 1_000_000 if price else 0.0
    final = synthesis + review
    if finals.calls:
        final = max(final, measure(finals) / finals.calls)
    if answers.calls:
        check = measure(group("check")) / answers.calls
    else:
        check = per_call if settings.DEEPTHINK_CITATION_CHECK else 0.0
    cycles = group(*CYCLE_PURPOSES)
    cycle = measure(cycles) / session.cycles if session.cycles and cycles.calls else per_call
    return SAFETY * (max(cycle, synthesis + check) + final + check)


def ceiling_reached(session: ThinkingSession) -> str:
    """The ceiling the session has reached (TOKEN_CEILING or COST_CEILING), counting what
    is `reserved` for the next step and the answer as spent; "" while there is room."""
    tokens = session.token_ceiling
    if tokens is not None and session.total_tokens + reserved(session, dollars=False) >= tokens:
        return CompletionReason.TOKEN_CEILING
    cost = session_cost(session)
    if session.max_cost_usd is not None and cost is not None:
        ahead = Decimal(str(reserved(session, dollars=True))).quantize(CENT, rounding=ROUND_UP)
        if cost + ahead >= session.max_cost_usd:
            return CompletionReason.COST_CEILING
    return ""


@dataclass(frozen=True)
class Committed:
    tokens: int
    dollars: Decimal


def committed_this_month(team: Team) -> Committed:
    """What the team's sessions of this month have spent, with each running session counted
    at its ceiling (its reservation) when that is more than it has spent yet."""
    tokens = 0
    dollars = Decimal(0)
    for session in ThinkingSession.objects.filter(team=team, created_at__gte=month_start()):
        spent_tokens = session.total_tokens
        spent_dollars = session_cost(session) or Decimal(0)
        if session.status not in FINISHED:
            spent_tokens = max(spent_tokens, session.token_ceiling or 0)
            spent_dollars = max(spent_dollars, session.max_cost_usd or Decimal(0))
        tokens += spent_tokens
        dollars += spent_dollars
    return Committed(tokens, dollars)


def _share(left: Any, requested: Any) -> Any:
    """A session's reservation: what it asked for, else a share of what is left."""
    if requested is not None:
        return min(requested, left)
    share = settings.DEEPTHINK_TEAM_SESSION_SHARE
    if isinstance(left, int):
        return max(1, int(left * share))
    return left * Decimal(str(share))


def reserve(
    team: Team | None, *, tokens: int | None, dollars: Decimal | None
) -> tuple[int | None, Decimal | None]:
    """The (token ceiling, dollar ceiling) a new session gets, reserved from its team's
    budget. Call inside the transaction that creates the session: the team row stays locked
    until it commits. Raises BudgetExhausted when nothing is left."""
    if team is None:
        return tokens, dollars
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("reserve() must run inside the transaction that creates the session")
    # An UPDATE takes the row lock on PostgreSQL and the write lock on SQLite, so the next
    # reservation of this team waits until this session is stored. Whether there is a budget
    # is read after the lock: one set a moment ago applies to this start too.
    Team.objects.filter(pk=team.pk).update(name=F("name"))
    team = Team.objects.get(pk=team.pk)
    if team.monthly_token_budget is None and team.monthly_cost_budget_usd is None:
        return tokens, dollars
    used = committed_this_month(team)
    if team.monthly_token_budget is not None:
        left = team.monthly_token_budget - used.tokens
        if left <= 0:
            raise BudgetExhausted(
                f"The team {team.name} has used or reserved all of its "
                f"{counted(team.monthly_token_budget, 'token')} for this month (running "
                "sessions hold their ceilings until they finish)."
            )
        tokens = int(_share(left, tokens))
    if team.monthly_cost_budget_usd is not None:
        left_dollars = team.monthly_cost_budget_usd - used.dollars
        if left_dollars <= 0:
            raise BudgetExhausted(
                f"The team {team.name} has used or reserved all of its "
                f"${team.monthly_cost_budget_usd} for this month (running sessions hold "
                "their ceilings until they finish)."
            )
        dollars = Decimal(_share(left_dollars, dollars)).quantize(CENT, rounding=ROUND_DOWN)
    return tokens, dollars


def refuse_team_start(team: Team | None) -> str:
    """Why a team session may not start now ("" if it may), for the start form."""
    if team is None:
        return ""
    used = committed_this_month(team)
    if team.monthly_token_budget is not None and used.tokens >= team.monthly_token_budget:
        return (
            f"The team {team.name} has used its {counted(team.monthly_token_budget, 'token')} "
            "for this month (running sessions count at their ceilings until they finish)."
        )
    if team.monthly_cost_budget_usd is not None and used.dollars >= team.monthly_cost_budget_usd:
        return (
            f"The team {team.name} has used its ${team.monthly_cost_budget_usd} for this "
            "month (running sessions count at their ceilings until they finish)."
        )
    return ""
