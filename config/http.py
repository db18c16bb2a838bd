"""Request types for views: what the middleware stack adds to Django's `HttpRequest`."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    """A request through django-htmx's `HtmxMiddleware`: `request.htmx` is always set."""

    htmx: HtmxDetails


class AuthenticatedHttpRequest(HtmxHttpRequest):
    """A request to a `login_required` view: the user is a signed-in `User`."""

    user: User


class ApiRequest(HttpRequest):
    """A request to an authenticated django-ninja endpoint: `request.auth` is the `User` the
    API's authenticators returned (thinking/web/api.py: a bearer token or a session cookie)."""

    auth: User
