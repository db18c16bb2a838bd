from __future__ import annotations

from django.urls import path

from . import account_views, notify_views, views

urlpatterns = [
    path("", views.home, name="home"),
    path("sessions/", views.session_list, name="session-list"),
    path("sessions/new/", views.session_create, name="session-create"),
    path("sessions/<uuid:pk>/", views.session_detail, name="session-detail"),
    path("sessions/<uuid:pk>/pause/", views.session_pause, name="session-pause"),
    path("sessions/<uuid:pk>/resume/", views.session_resume, name="session-resume"),
    path("sessions/<uuid:pk>/cancel/", views.session_cancel, name="session-cancel"),
    path("sessions/<uuid:pk>/steer/", views.session_steer, name="session-steer"),
    path("sessions/<uuid:pk>/extend/", views.session_extend, name="session-extend"),
    path("settings/tokens/", account_views.token_list, name="api-tokens"),
    path(
        "settings/notifications/",
        notify_views.notification_settings,
        name="notification-settings",
    ),
    path("settings/tokens/<int:pk>/revoke/", account_views.token_revoke, name="api-token-revoke"),
]
