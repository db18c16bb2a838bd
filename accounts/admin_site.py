"""The admin site, with the site's login throttle on its login form.

Django's admin has a login page of its own (`/admin/login/`); left as it comes, it would let
anyone guess passwords there without limit while `/accounts/login/` is throttled. This site
uses Django's admin login form with the same throttle (accounts.login_throttle: the counts are
shared) and answers 429 when it refuses. It is the default site (accounts.admin_apps, named in
INSTALLED_APPS in place of "django.contrib.admin"), so `admin.site` and `@admin.register` are
this site everywhere.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.http import HttpRequest, HttpResponse

from . import login_throttle


class ThrottledAdminAuthenticationForm(
    login_throttle.ThrottledAuthenticationForm, AdminAuthenticationForm
):
    """The admin's login form (staff only), refused while the login throttle says so."""


class ThrottledAdminSite(admin.AdminSite):
    login_form = ThrottledAdminAuthenticationForm

    def login(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        response: HttpResponse = super().login(request, extra_context)
        context = getattr(response, "context_data", None) or {}
        if login_throttle.was_throttled(context.get("form")):
            response.status_code = 429
        return response
