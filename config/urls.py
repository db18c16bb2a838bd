from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from research.urls import team_urlpatterns
from thinking.account_views import ThrottledLoginView, signup
from thinking.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    # Before Django's auth URLs, so the throttled login answers /accounts/login/.
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/signup/", signup, name="signup"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", api.urls),
    path("knowledge/", include("research.urls")),
    path("teams/", include(team_urlpatterns)),
    path("", include("thinking.urls")),
]
