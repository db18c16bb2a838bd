"""Dollar ceilings and team budgets.

A session may carry a ceiling in dollars (list prices, see `pricing`) besides its token
ceiling; reaching either sends it to its final answer. A team's monthly budget may be in
tokens, dollars or both. Sessions of one team *reserve* from that budget when they start:
a running session counts as having spent its whole ceiling until it finishes (then what it
really spent counts), and the reservation is taken with the team's row locked, so sessions
started at the same moment can never together be promised more than is left.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.forms import ValidationError
from django.utils import timezone

from accounts.models import Team

from .models import FINISHED, ThinkingSession

CENT = Decimal("0.0001")


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
    if session.max_cost_usd is None:
        return False
    cost = session_cost(session)
    return cost is not None and cost >= session.max_cost_usd


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
                f"{team.monthly_token_budget} tokens for this month (running sessions hold "
                "their ceilings until they finish)."
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
            f"The team {team.name} has used its {team.monthly_token_budget} tokens for this "
            "month (running sessions count at their ceilings until they finish)."
        )
    if team.monthly_cost_budget_usd is not None and used.dollars >= team.monthly_cost_budget_usd:
        return (
            f"The team {team.name} has used its ${team.monthly_cost_budget_usd} for this "
            "month (running sessions count at their ceilings until they finish)."
        )
    return ""
