"""Team membership by consent: invite, accept, decline, revoke, change roles, leave.

The rules live here, not in the views: nobody joins a team, and nobody becomes an owner,
without accepting; a team always keeps at least one owner. Changes that could remove the
last owner lock the team row first, so two owners leaving at once cannot both succeed.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from .models import Invitation, Membership, Role, Team


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


def _member_named(team: Team, username: str) -> Membership | None:
    return (
        team.memberships.accepted()
        .filter(user__username__iexact=username)
        .select_related("user")
        .first()
    )


def invite_or_change(team: Team, by: Any, username: str, role: str) -> str:
    """What an owner's "username + role" form does, in words for the page.

    A member asked to be an owner gets ownership offered; an owner asked to be a member is
    demoted (never the last owner). Any other name gets an invitation, stored by the name
    typed whether or not an account has it (or its offered role changed), so neither the
    answer nor the team page tells which usernames exist.
    """
    offered = Role.OWNER if role == Role.OWNER else Role.MEMBER
    with transaction.atomic():
        team = _lock(team)
        membership = _member_named(team, username)
        if membership is None:
            invitation = team.invitations.filter(username__iexact=username).first()
            if invitation is None:
                Invitation.objects.create(team=team, username=username, role=offered, invited_by=by)
            else:
                invitation.role = offered
                invitation.save(update_fields=["role"])
            return (
                f"Invited “{username}”: if an account has that name, its holder sees the "
                "invitation; the team reaches them once they accept."
            )
        name = membership.user.get_username()
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


def revoke(team: Team, invitation_id: int) -> Invitation:
    """An owner takes back an invitation (answered or not); raises Invitation.DoesNotExist."""
    invitation = team.invitations.get(pk=invitation_id)
    invitation.delete()
    return invitation


def _invitations(user: Any) -> Any:
    return Invitation.objects.filter(username__iexact=user.get_username(), declined_at__isnull=True)


def _offers(user: Any) -> Any:
    return Membership.objects.accepted().filter(user=user).exclude(offered_role="")


def invitations_for(user: Any) -> list[Invitation]:
    """Invitations to the name this user has, not yet answered."""
    if not getattr(user, "is_authenticated", False):
        return []
    return list(_invitations(user).select_related("team", "invited_by"))


def offers_for(user: Any) -> list[Membership]:
    """Ownership offered to this user in teams they belong to, not yet answered."""
    if not getattr(user, "is_authenticated", False):
        return []
    return list(_offers(user).select_related("team"))


def pending_count(user: Any) -> int:
    """How many answers this user owes (the navigation shows it on every page)."""
    if not getattr(user, "is_authenticated", False):
        return 0
    return _invitations(user).count() + _offers(user).count()


def accept(user: Any, invitation_id: int) -> Membership:
    """The invitee joins with the role offered; raises Invitation.DoesNotExist if it is not
    theirs to answer."""
    with transaction.atomic():
        # The team first, then the invitation: the order inviting takes them in.
        team = _lock(_invitations(user).get(pk=invitation_id).team)
        invitation = _invitations(user).select_for_update().get(pk=invitation_id, team=team)
        membership, _ = Membership.objects.get_or_create(
            team=invitation.team,
            user=user,
            defaults={"role": invitation.role, "invited_by": invitation.invited_by},
        )
        membership.accepted_at = membership.accepted_at or timezone.now()
        membership.save(update_fields=["accepted_at"])
        invitation.delete()
    return membership


def decline(user: Any, invitation_id: int) -> Invitation:
    """The invitee stops seeing it; owners still see it pending (a name with nobody behind it
    never answers either), until one of them revokes it."""
    with transaction.atomic():
        invitation = _invitations(user).select_for_update().get(pk=invitation_id)
        invitation.declined_at = timezone.now()
        invitation.save(update_fields=["declined_at"])
    return invitation


def accept_offer(user: Any, membership_id: int) -> Membership:
    with transaction.atomic():
        membership = _offers(user).select_for_update().get(pk=membership_id)
        membership.role = membership.offered_role
        membership.offered_role = ""
        membership.save(update_fields=["role", "offered_role"])
    return membership


def decline_offer(user: Any, membership_id: int) -> Membership:
    """Declining an offer keeps the membership as it was."""
    with transaction.atomic():
        membership = _offers(user).select_for_update().get(pk=membership_id)
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
