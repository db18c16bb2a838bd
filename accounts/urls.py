from __future__ import annotations

from django.urls import path

from . import team_views, views

# Included at the site root by config/urls.py; the addresses are the ones people know.
urlpatterns = [
    # Before Django's auth URLs, so the throttled login answers /accounts/login/.
    path("accounts/login/", views.ThrottledLoginView.as_view(), name="login"),
    path("accounts/signup/", views.signup, name="signup"),
    path("settings/account/", views.account, name="account"),
    path("settings/tokens/", views.token_list, name="api-tokens"),
    path("settings/tokens/<int:pk>/revoke/", views.token_revoke, name="api-token-revoke"),
    path("settings/notifications/", views.notification_settings, name="notification-settings"),
    path("settings/webhook-key/", views.webhook_key, name="webhook-key"),
    path("teams/", team_views.team_list, name="team-list"),
    path("teams/<int:pk>/", team_views.team_detail, name="team-detail"),
    path(
        "teams/<int:pk>/members/<int:user_id>/remove/",
        team_views.team_remove_member,
        name="team-remove-member",
    ),
    path(
        "teams/<int:pk>/invitations/<int:invitation_id>/revoke/",
        team_views.team_revoke_invitation,
        name="team-revoke-invitation",
    ),
    path(
        "teams/invitations/<int:invitation_id>/<str:answer>/",
        team_views.invitation_answer,
        name="team-invitation-answer",
    ),
    path(
        "teams/offers/<int:membership_id>/<str:answer>/",
        team_views.offer_answer,
        name="team-offer-answer",
    ),
]
