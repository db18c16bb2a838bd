"""Limits against unbounded consumption: how much one person (or team) may start.

Each check returns the reason for refusing, in words for the form, or "" to allow.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Sum
from django.utils import timezone

from research.models import Team

from .models import Extension, Status, ThinkingSession


def month_start() -> Any:
    now = timezone.now()
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


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


def refuse_start(user: Any, *, minutes: float, team: Team | None = None) -> str:
    """Why this user may not start a session of this length now ("" if they may)."""
    running = ThinkingSession.objects.filter(
        owner=user, status__in=[Status.CREATED, Status.THINKING]
    ).count()
    if running >= settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS:
        return (
            f"You already have {running} sessions thinking; the limit is "
            f"{settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS}. Wait for one to finish, or pause "
            "or cancel one."
        )
    hour_ago = timezone.now() - timedelta(hours=1)
    started = ThinkingSession.objects.filter(owner=user, created_at__gte=hour_ago).count()
    # Giving a finished session more time (#19) counts as a start.
    started += Extension.objects.filter(by=user, created_at__gte=hour_ago).count()
    if started >= settings.DEEPTHINK_SESSIONS_PER_HOUR:
        return (
            f"You have started {started} sessions in the past hour; the limit is "
            f"{settings.DEEPTHINK_SESSIONS_PER_HOUR}. Try again later."
        )
    if minutes > settings.DEEPTHINK_MAX_MINUTES:
        return f"The longest budget here is {settings.DEEPTHINK_MAX_MINUTES:g} minutes."
    if team is not None and team.monthly_token_budget is not None:
        used = team_tokens_this_month(team)
        if used >= team.monthly_token_budget:
            return (
                f"The team {team.name} has used its {team.monthly_token_budget} tokens for "
                "this month."
            )
    return ""


def token_ceiling_for(team: Team | None, requested: int | None) -> int | None:
    """A shared session may spend at most what is left of its team's monthly budget."""
    if team is None or team.monthly_token_budget is None:
        return requested
    left = max(0, team.monthly_token_budget - team_tokens_this_month(team))
    return left if requested is None else min(requested, left)
