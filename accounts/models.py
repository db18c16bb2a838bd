"""People's things that are neither research nor thinking: teams, memberships, API tokens.

The tables keep the names they had in `research` and `thinking` (`db_table`), so moving the
models here moved no data (see migration 0001).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower
from django.urls import reverse
from django.utils import timezone

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    MEMBER = "member", "Member"


class TeamQuerySet(models.QuerySet["Team"]):
    def of(self, user: object) -> TeamQuerySet:
        """The teams this user belongs to: invitations they have not accepted do not count,
        so nothing of a team (its knowledge, its sessions) reaches them before they accept."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(
            memberships__user=user, memberships__accepted_at__isnull=False
        ).distinct()

    def owned_by(self, user: object) -> TeamQuerySet:
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(
            memberships__user=user,
            memberships__role=Role.OWNER,
            memberships__accepted_at__isnull=False,
        ).distinct()


class Team(models.Model):
    """People who share sessions and knowledge."""

    # Not unique across the site: a unique name would tell anyone which team names exist.
    name = models.CharField(max_length=100)
    monthly_token_budget = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Tokens the team's shared sessions may use per month."
    )
    monthly_cost_budget_usd = models.DecimalField(
        max_digits=10,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="US dollars (list prices) the team's shared sessions may use per month.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        db_table = "research_team"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("team-detail", args=[self.pk])

    def role_of(self, user: object) -> str | None:
        """The user's role, once they have accepted; None otherwise."""
        if not getattr(user, "is_authenticated", False):
            return None
        # Authenticated: a User (or a stand-in carrying its pk, which is all the lookup reads).
        member = cast("User", user)
        membership = self.memberships.filter(user=member, accepted_at__isnull=False).first()
        return membership.role if membership else None


class MembershipQuerySet(models.QuerySet["Membership"]):
    def accepted(self) -> MembershipQuerySet:
        return self.filter(accepted_at__isnull=False)

    def pending(self) -> MembershipQuerySet:
        return self.filter(accepted_at__isnull=True)


class Membership(models.Model):
    """A person in a team. Until `accepted_at` is set it counts for nothing (invitations are
    `Invitation` rows; migration 0005 moved the pending memberships there). `offered_role` is
    a role offered to them (ownership is never given without the person accepting); it
    becomes `role` when they accept."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships"
    )
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)
    offered_role = models.CharField(max_length=8, choices=Role.choices, blank=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        db_table = "research_membership"
        ordering = ["team", "role", "user"]
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        state = self.role if self.accepted_at else "invited"
        return f"{self.user} in {self.team} ({state})"

    @property
    def is_pending(self) -> bool:
        return self.accepted_at is None


class Invitation(models.Model):
    """An owner's invitation, kept by the name they typed, whether or not an account has it.

    Stored either way, so the owner's list of pending invitations reads the same for every
    name and tells nobody which usernames exist. Whoever has (or later signs up with) that
    name, compared without case, sees it and may accept (it becomes a Membership and is
    gone) or decline (they stop seeing it; it stays listed to the owners, as an unanswered
    one does, until an owner revokes it)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    username = models.CharField(max_length=150, help_text="The name as the owner typed it.")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    declined_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["team", "username"]
        constraints = [
            models.UniqueConstraint(Lower("username"), "team", name="invitation_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.username} to {self.team} ({self.role})"


def team_ids_of(user: object) -> list[int]:
    return list(Team.objects.of(user).values_list("pk", flat=True))


class ApiToken(models.Model):
    """A personal API token. Only a hash is stored; the token is shown once, at creation."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="The first characters, to recognise it.")
    hashed = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "thinking_apitoken"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class MailChoice(models.TextChoices):
    LONG = "long", "For sessions of 10 minutes or more"
    ALWAYS = "always", "For every session"
    NEVER = "never", "Never"


class NotificationPreference(models.Model):
    """A person's default for mail when their sessions end (#19)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    mail = models.CharField(max_length=8, choices=MailChoice.choices, default=MailChoice.LONG)

    def __str__(self) -> str:
        return f"{self.user}: {self.get_mail_display()}"


class WebhookSecret(models.Model):
    """A person's key for signing their sessions' webhooks (Standard Webhooks: `whsec_` and
    base64 of 32 random bytes; accounts.webhook_secrets).

    Stored as it is, not hashed: signing needs the key itself, and a hash could not sign. It
    is shown once, when made or rotated; afterwards pages show only its hint. `previous` is
    the key before the last rotation: deliveries carry a signature with it too for a day, so
    a receiver can switch keys without rejecting anything."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_secret"
    )
    secret = models.CharField(max_length=100)
    previous = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(help_text="When this key was made (its last rotation).")

    def __str__(self) -> str:
        return f"{self.user}: {self.hint}"

    @property
    def hint(self) -> str:
        """Enough to recognise the key, never enough to use it."""
        return f"whsec_…{self.secret[-4:]}"
