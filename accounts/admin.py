from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from .models import (
    ApiToken,
    Invitation,
    Membership,
    NotificationPreference,
    Team,
    WebhookSecret,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    fk_name = "team"
    extra = 0
    raw_id_fields = ("user", "invited_by")
    fields = ("user", "role", "offered_role", "accepted_at", "invited_by")


class InvitationInline(admin.TabularInline):
    model = Invitation
    extra = 0
    raw_id_fields = ("invited_by",)
    fields = ("username", "role", "invited_by", "created_at", "declined_at")


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("name", "monthly_token_budget", "monthly_cost_budget_usd", "created_at")
    search_fields = ("name",)
    inlines = (MembershipInline, InvitationInline)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created on the tokens page or with create_api_token (the only places the
    token itself can be shown); here they can be inspected, renamed and revoked."""

    list_display = ("name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix", "user__username")
    raw_id_fields = ("user",)
    # Never the hash: nothing to see in it, and editing it would break or forge a token.
    fields = ("name", "user", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("user", "prefix", "created_at", "last_used_at")
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).")


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(admin.ModelAdmin):
    list_display = ("user", "mail")


@admin.register(WebhookSecret)
class WebhookSecretAdmin(admin.ModelAdmin):
    """Keys are made on the account page or with `webhook_key` (the only places one is shown);
    here only their hints, and deleting one stops its owner's webhooks until they make another."""

    list_display = ("user", "hint", "created_at")
    search_fields = ("user__username",)
    fields = ("user", "hint", "created_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
