"""Django's admin app with our site as its default site (accounts.admin_site), in a module of
its own: INSTALLED_APPS imports it before any model can be, and the site's forms need models."""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig as DjangoAdminConfig


class AdminConfig(DjangoAdminConfig):
    default_site = "accounts.admin_site.ThrottledAdminSite"
