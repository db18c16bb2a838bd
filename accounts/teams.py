"""Team membership by consent: invite, accept, decline, change roles, leave.

The rules live here, not in the views: nobody joins a team, and nobody becomes an owner,
without accepting; a team always keeps at least one owner. Changes that could remove the
last owner lock the team row first, so two owners leaving at once cannot both succeed.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from .models import Membership, Role, Team


class TeamError(Exception):
    """A refused change, with the reason in words for the page."""


LAST_OWNER = "A team needs an owner: make someone else an owner (and let them accept) first."


def create_team(user: Any, name: str) -> Team:
    if Team.objects.of(user).filter(name__iexact=name).exists():
        raise TeamError("You already belong to a team with that name.")
    with transaction.atomic():
        team = Team.objects.create(name=name)
        Membership.objects.create(team=team, user=user, role=Role.OWNER, accepted_at=timezone.now())
    return team


def _lock(team: Team) -> Team:
    return Team.objects.select_for_update().get(pk=team.pk)


def _is_last_owner(team: Team, membership: Membership) -> bool:
    if membership.accepted_at is None or membership.role != Role.OWNER:
        return False
    return not (
        team.memberships.accepted().filter(role=Role.OWNER).exclude(pk=membership.pk).exists()
    )


def invite_or_change(team: Team, by: Any, username: str, role: str) -> str:
    """What an owner's "username + role" form does, in words for the page.

    A new person gets an invitation (with the role offered); a pending invitation gets the new
    role offered; a member asked to be an owner gets ownership offered; an owner asked to be a
    member is demoted (never the last owner). Whether an account exists is never said: the
    answer for an unknown name is the same as for an invitation.
    """
    invited = (
        f"If “{username}” has an account here, they are invited; "
        "the team reaches them once they accept."
    )
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        return invited
    with transaction.atomic():
        team = _lock(team)
        membership = team.memberships.filter(user=user).first()
        if membership is None:
            Membership.objects.create(
                team=team,
                user=user,
                role=Role.MEMBER,
                offered_role=Role.OWNER if role == Role.OWNER else "",
                invited_by=by,
            )
            return invited
        if membership.is_pending:
            membership.offered_role = Role.OWNER if role == Role.OWNER else ""
            membership.save(update_fields=["offered_role"])
            return invited
        name = user.get_username()
        if role == Role.OWNER:
            if membership.role == Role.OWNER:
                return f"{name} is already an owner."
            membership.offered_role = Role.OWNER
            membership.save(update_fields=["offered_role"])
            return f"Offered {name} ownership; they become an owner when they accept."
        if membership.role == Role.OWNER and _is_last_owner(team, membership):
            raise TeamError(LAST_OWNER)
        membership.role = Role.MEMBER
        membership.offered_role = ""
        membership.save(update_fields=["role", "offered_role"])
        return f"{name} is now a member."


def _waiting(user: Any) -> Any:
    return Membership.objects.filter(user=user).exclude(accepted_at__isnull=False, offered_role="")


def pending_for(user: Any) -> list[Membership]:
    """Invitations and ownership offers waiting for this user's answer."""
    if not getattr(user, "is_authenticated", False):
        return []
    return list(_waiting(user).select_related("team", "invited_by"))


def pending_count(user: Any) -> int:
    """How many answers this user owes (the navigation shows it on every page)."""
    if not getattr(user, "is_authenticated", False):
        return 0
    return _waiting(user).count()


def accept(user: Any, membership_id: int) -> Membership:
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership_id, user=user)
        if membership.accepted_at is None:
            membership.accepted_at = timezone.now()
        if membership.offered_role:
            membership.role = membership.offered_role
            membership.offered_role = ""
        membership.save(update_fields=["accepted_at", "role", "offered_role"])
    return membership


def decline(user: Any, membership_id: int) -> Membership:
    """Declining an invitation removes it; declining an offer keeps the membership as it was."""
    with transaction.atomic():
        membership = Membership.objects.select_for_update().get(pk=membership_id, user=user)
        if membership.accepted_at is None:
            membership.delete()
        else:
            membership.offered_role = ""
            membership.save(update_fields=["offered_role"])
    return membership


def remove(team: Team, membership: Membership) -> None:
    """Someone leaves or is removed; never the last owner."""
    with transaction.atomic():
        team = _lock(team)
        membership = team.memberships.get(pk=membership.pk)
        if _is_last_owner(team, membership):
            raise TeamError(LAST_OWNER)
        membership.delete()
