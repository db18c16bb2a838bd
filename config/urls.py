from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from config.health import healthz
from thinking.web.api import api

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("", include("accounts.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", api.urls),
    path("knowledge/", include("research.urls")),
    path("evaluations/", include("evaluation.urls")),
    path("", include("thinking.web.urls")),
]
