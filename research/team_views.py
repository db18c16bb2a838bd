"""Team pages: people see the teams they belong to; owners manage the members."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from .models import Membership, Role, Team


class TeamForm(forms.Form):
    name = forms.CharField(max_length=100, strip=True)

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if Team.objects.filter(name__iexact=name).exists():
            raise forms.ValidationError("There is already a team with that name.")
        return name


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_username(self) -> object:
        try:
            return get_user_model().objects.get(username=self.cleaned_data["username"])
        except get_user_model().DoesNotExist:
            raise forms.ValidationError("There is no user with that name.") from None


def get_team_for(user: object, pk: int) -> Team:
    """The team if this user belongs to it; otherwise 404, whether or not it exists."""
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
            with transaction.atomic():
                team = Team.objects.create(name=form.cleaned_data["name"])
                Membership.objects.create(team=team, user=request.user, role=Role.OWNER)
        except IntegrityError:  # created by someone else a moment ago
            form.add_error("name", "There is already a team with that name.")
        else:
            messages.success(request, f"Created the team {team.name}.")
            return redirect(team)
    teams = Team.objects.of(request.user).prefetch_related("memberships__user")
    status = 422 if form.errors else 200
    return render(request, "research/teams.html", {"teams": teams, "form": form}, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def team_detail(request: HttpRequest, pk: int) -> HttpResponse:
    team = get_team_for(request.user, pk)
    form = MemberForm(request.POST or None)
    if request.method == "POST":
        _owner_only(team, request.user)
        if form.is_valid():
            user = form.cleaned_data["username"]
            Membership.objects.update_or_create(
                team=team, user=user, defaults={"role": form.cleaned_data["role"]}
            )
            messages.success(
                request, f"{user.get_username()} is now a {form.cleaned_data['role']}."
            )
            return redirect(team)
    context = {
        "team": team,
        "memberships": team.memberships.select_related("user"),
        "is_owner": team.role_of(request.user) == Role.OWNER,
        "form": form,
    }
    return render(request, "research/team_detail.html", context, status=422 if form.errors else 200)


@login_required
@require_POST
def team_remove_member(request: HttpRequest, pk: int, user_id: int) -> HttpResponse:
    team = get_team_for(request.user, pk)
    leaving = user_id == request.user.pk
    if not leaving:
        _owner_only(team, request.user)
    membership = get_object_or_404(team.memberships, user_id=user_id)
    owners = team.memberships.filter(role=Role.OWNER)
    if membership.role == Role.OWNER and owners.count() == 1:
        messages.error(request, "A team needs an owner: make someone else an owner first.")
        return redirect(team)
    membership.delete()
    if leaving:
        messages.success(request, f"You left {team.name}.")
        return redirect("team-list")
    messages.success(request, f"Removed {membership.user.get_username()} from {team.name}.")
    return redirect(team)
