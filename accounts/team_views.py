"""Team pages: people see the teams they belong to and the invitations waiting for them;
owners invite people, see and revoke their pending invitations and change roles. The rules
are in `accounts.teams`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from . import teams
from .models import Invitation, Membership, Role, Team


class TeamForm(forms.Form):
    name = forms.CharField(max_length=100, strip=True)


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


def get_team_for(user: object, pk: int) -> Team:
    """The team if this user belongs to it (accepted); otherwise 404, whether or not it exists."""
    return get_object_or_404(Team.objects.of(user), pk=pk)


def _owner_only(team: Team, user: object) -> None:
    if team.role_of(user) != Role.OWNER:
        raise PermissionDenied("Only the team's owners can change its members.")


@login_required
@require_http_methods(["GET", "POST"])
def team_list(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            team = teams.create_team(request.user, form.cleaned_data["name"])
        except teams.TeamError as refused:
            form.add_error("name", str(refused))
        else:
            messages.success(request, f"Created the team {team.name}.")
            return redirect(team)
    context = {
        "teams": Team.objects.of(request.user).prefetch_related(
            Prefetch("memberships", queryset=Membership.objects.accepted())
        ),
        "invitations": teams.invitations_for(request.user),
        "offers": teams.offers_for(request.user),
        "form": form,
    }
    return render(request, "accounts/teams.html", context, status=422 if form.errors else 200)


@login_required
@require_http_methods(["GET", "POST"])
def team_detail(request: HttpRequest, pk: int) -> HttpResponse:
    team = get_team_for(request.user, pk)
    form = MemberForm(request.POST or None)
    if request.method == "POST":
        _owner_only(team, request.user)
        if form.is_valid():
            try:
                said = teams.invite_or_change(
                    team, request.user, form.cleaned_data["username"], form.cleaned_data["role"]
                )
            except teams.TeamError as refused:
                form.add_error(None, str(refused))
            else:
                messages.success(request, said)
                return redirect(team)
    is_owner = team.role_of(request.user) == Role.OWNER
    context = {
        "team": team,
        "memberships": team.memberships.accepted().select_related("user"),
        # By the name typed, for every name alike: the list tells nobody which names exist.
        "invitations": team.invitations.select_related("invited_by") if is_owner else (),
        "is_owner": is_owner,
        "form": form,
    }
    return render(request, "accounts/team_detail.html", context, status=422 if form.errors else 200)


@login_required
@require_POST
def team_remove_member(request: HttpRequest, pk: int, user_id: int) -> HttpResponse:
    team = get_team_for(request.user, pk)
    leaving = user_id == request.user.pk
    if not leaving:
        _owner_only(team, request.user)
    # Members only: an invitee is nobody here until they accept, or the route would tell an
    # owner, id by id, who has an account and what their username is.
    membership = get_object_or_404(team.memberships.accepted(), user_id=user_id)
    try:
        teams.remove(team, membership)
    except teams.TeamError as refused:
        messages.error(request, str(refused))
        return redirect(team)
    if leaving:
        messages.success(request, f"You left {team.name}.")
        return redirect("team-list")
    messages.success(request, f"Removed {membership.user.get_username()} from {team.name}.")
    return redirect(team)


@login_required
@require_POST
def team_revoke_invitation(request: HttpRequest, pk: int, invitation_id: int) -> HttpResponse:
    """An owner takes back an invitation; 404 for everyone else, as for a team they are not in."""
    team = get_object_or_404(Team.objects.owned_by(request.user), pk=pk)
    try:
        invitation = teams.revoke(team, invitation_id)
    except Invitation.DoesNotExist:
        raise Http404("No such invitation.") from None
    messages.success(request, f"Revoked the invitation to “{invitation.username}”.")
    return redirect(team)


def _answer(
    request: HttpRequest,
    pk: int,
    answer: str,
    answers: tuple[Callable[[Any, int], Any], Callable[[Any, int], Any]],
    missing: type[Exception],
) -> HttpResponse:
    accept, decline = answers
    try:
        if answer == "accept":
            membership = accept(request.user, pk)
            messages.success(request, f"You are now a {membership.role} of {membership.team.name}.")
        elif answer == "decline":
            messages.success(request, f"Declined: {decline(request.user, pk).team.name}.")
        else:
            raise Http404("No such answer.")
    except missing:
        raise Http404("Nothing of yours to answer.") from None
    return redirect("team-list")


@login_required
@require_POST
def invitation_answer(request: HttpRequest, invitation_id: int, answer: str) -> HttpResponse:
    """The invitee accepts or declines an invitation to their name (their own only)."""
    answers = (teams.accept, teams.decline)
    return _answer(request, invitation_id, answer, answers, Invitation.DoesNotExist)


@login_required
@require_POST
def offer_answer(request: HttpRequest, membership_id: int, answer: str) -> HttpResponse:
    """A member accepts or declines the ownership offered to them (their own only)."""
    answers = (teams.accept_offer, teams.decline_offer)
    return _answer(request, membership_id, answer, answers, Membership.DoesNotExist)
