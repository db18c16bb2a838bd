"""Limits against unbounded consumption: how much one person (or team) may start.

Each check returns the reason for refusing, in words for the form, or "" to allow.

A count followed by an insert is a race: twelve parallel requests all count 0 and all insert.
So every start and resume makes ONE atomic decision per owner: inside the transaction that
writes the session, `reserve_start` / `reserve_resume` first lock the owner's user row (and
the team's row for its budget), then count; the lock holds until commit, so the next request
for the same owner counts after this one's insert. On PostgreSQL that is SELECT … FOR UPDATE;
SQLite has no row locks, but the app opens its transactions IMMEDIATE, which takes the
database's write lock at BEGIN and serialises them the same way.

The one start/resume path calls, inside `transaction.atomic()`:

    refused = limits.reserve_start(owner, minutes=…, team=…)   # before inserting
    refused = limits.reserve_resume(session)                   # before session.resume()
    refused = limits.reserve_extension(session, user, minutes=…)  # before reopening it

and raises `LimitRefused(refused)` (or reports it) when the answer is not "". `refuse_start`
stays for early, friendly form validation; it is not a decision on its own.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from accounts.models import Team
from thinking.formatting import counted
from thinking.models import Extension, Status, ThinkingSession
from thinking.people.budget import month_start, refuse_team_start


def team_tokens_this_month(team: Team) -> int:
    used = (
        ThinkingSession.objects.filter(team=team, created_at__gte=month_start())
        .annotate(
            total=F("input_tokens")
            + F("output_tokens")
            + F("cache_read_tokens")
            + F("cache_write_tokens")
        )
        .aggregate(used=Sum("total"))["used"]
    )
    return int(used or 0)


def team_dollars_this_month(team: Team) -> Decimal:
    """What the team's sessions of this month have spent, each call at its model's price."""
    used = ThinkingSession.objects.filter(team=team, created_at__gte=month_start()).aggregate(
        used=Sum("cost_usd")
    )["used"]
    return used or Decimal(0)


def refuse_start(user: Any, *, minutes: float, team: Team | None = None) -> str:
    """Why this user may not start a session of this length now ("" if they may)."""
    running = ThinkingSession.objects.filter(
        owner=user, status__in=[Status.CREATED, Status.THINKING]
    ).count()
    if running >= settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS:
        return (
            f"You already have {counted(running, 'session')} thinking; the limit is "
            f"{settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS}. Wait for one to finish, or pause "
            "or cancel one."
        )
    hour_ago = timezone.now() - timedelta(hours=1)
    started = ThinkingSession.objects.filter(owner=user, created_at__gte=hour_ago).count()
    # Giving a finished session more time (#19) counts as a start.
    started += Extension.objects.filter(by=user, created_at__gte=hour_ago).count()
    if started >= settings.DEEPTHINK_SESSIONS_PER_HOUR:
        return (
            f"You have started {counted(started, 'session')} in the past hour; the limit is "
            f"{settings.DEEPTHINK_SESSIONS_PER_HOUR}. Try again later."
        )
    if minutes > settings.DEEPTHINK_MAX_MINUTES:
        return f"The longest budget here is {counted(settings.DEEPTHINK_MAX_MINUTES, 'minute')}."
    # A team's budget counts running sessions at their reserved ceilings (see budget.py).
    return refuse_team_start(team)


class LimitRefused(Exception):
    """A start or resume refused by a limit; the message says why, in words for people."""


def _lock_owner(user: Any, team: Team | None) -> None:
    """Serialise limit decisions for this owner (and team) until the transaction commits.
    Always user first, then team, so two decisions never wait on each other in a cycle."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("Limit decisions must run inside transaction.atomic().")
    list(get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk"))
    if team is not None:
        list(Team.objects.select_for_update().filter(pk=team.pk).values_list("pk"))


def reserve_start(user: Any, *, minutes: float, team: Team | None = None) -> str:
    """The atomic decision to start a session for this owner: why not, or "" to go ahead and
    insert it in the same transaction (see the module's docstring)."""
    _lock_owner(user, team)
    return refuse_start(user, minutes=minutes, team=team)


def reserve_extension(session: ThinkingSession, user: Any, *, minutes: float) -> str:
    """The atomic decision to give a completed session more time (#19). The person who asks
    starts something (their starts per hour, the longest budget, the team's budget), and the
    session thinks again as its owner's: a team owner's "Think longer" on a teammate's
    session counts against that teammate's concurrency cap too, as a resume does."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("Limit decisions must run inside transaction.atomic().")
    # Both people's rows, lowest id first, then the team's: the order every decision takes.
    people = sorted({user.pk, session.owner_id})
    list(get_user_model().objects.select_for_update().filter(pk__in=people).order_by("pk"))
    refused = reserve_start(user, minutes=minutes, team=session.team)
    if refused or session.owner_id == user.pk:
        return refused
    running = ThinkingSession.objects.filter(
        owner_id=session.owner_id, status__in=[Status.CREATED, Status.THINKING]
    ).count()
    if running >= settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS:
        return (
            f"{running} sessions of this owner are thinking; the limit is "
            f"{settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS}. Wait for one to finish, then "
            "give this one more time."
        )
    return ""


def reserve_resume(session: ThinkingSession) -> str:
    """The atomic decision to resume a paused session: a resumed session thinks again, so it
    counts against its owner's concurrency cap and its team's budget like a start does."""
    team = session.team
    _lock_owner(session.owner, team)
    running = (
        ThinkingSession.objects.filter(
            owner_id=session.owner_id, status__in=[Status.CREATED, Status.THINKING]
        )
        .exclude(pk=session.pk)
        .count()
    )
    if running >= settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS:
        return (
            f"{counted(running, 'session')} of this owner "
            f"{'is' if running == 1 else 'are'} thinking; the limit is "
            f"{settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS}. Wait for one to finish, or pause "
            "or cancel one, then resume this."
        )
    if team is None:
        return ""
    budget = team.monthly_token_budget
    if budget is not None and team_tokens_this_month(team) >= budget:
        return f"The team {team.name} has used its {counted(budget, 'token')} for this month."
    dollars = team.monthly_cost_budget_usd
    if dollars is not None and team_dollars_this_month(team) >= dollars:
        return f"The team {team.name} has used its ${dollars} for this month."
    return ""
