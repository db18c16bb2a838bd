"""The API tokens settings page: list, create (the token is shown once), revoke."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import login as auth_login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.views import LoginView
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from . import throttle
from .models import ApiToken
from .notify_views import NotificationForm
from .tokens import create_token, revoke_token


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        strip=True,
        help_text="What will use it, so you know which to revoke: “laptop script”, “CI”.",
    )


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST if request.method == "POST" else None)
    created: tuple[ApiToken, str] | None = None
    status = 200
    if form.is_bound:
        if form.is_valid():
            # Rendered here rather than redirected to: the token exists only in this response.
            created = create_token(request.user, form.cleaned_data["name"])
            form = TokenForm()
        else:
            status = 422
    context = {
        "form": form,
        "tokens": ApiToken.objects.filter(user=request.user),
        "new_token": created[0] if created else None,
        "new_secret": created[1] if created else "",
        "notification_form": NotificationForm.for_user(request.user),
    }
    response = render(request, "thinking/tokens.html", context, status=status)
    if created:
        add_never_cache_headers(response)  # no copy of the secret in any cache
    return response


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    revoke_token(token)
    messages.success(request, f"Revoked “{token.name}”: requests with it are now refused.")
    return redirect("api-tokens")


class ThrottledLoginView(LoginView):
    """Django's login, refusing further attempts for a while after repeated failures, per
    client address and username and per client address alone."""

    def _client(self) -> str:
        return self.request.META.get("REMOTE_ADDR", "") or "unknown"

    def _keys(self) -> list[tuple[str, ...]]:
        username = (self.request.POST.get("username") or "").strip().lower()[:150]
        return [("login", self._client(), username), ("login-ip", self._client())]

    def _limits(self) -> list[int]:
        return [settings.DEEPTHINK_LOGIN_ATTEMPTS, settings.DEEPTHINK_LOGIN_ATTEMPTS * 5]

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if any(
            throttle.too_many(*key, limit=limit)
            for key, limit in zip(self._keys(), self._limits(), strict=True)
        ):
            form = self.get_form()
            minutes = max(1, settings.DEEPTHINK_LOGIN_WINDOW_SECONDS // 60)
            form.add_error(None, f"Too many failed logins. Try again in {minutes} minutes.")
            return self.render_to_response(self.get_context_data(form=form), status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        for key in self._keys():
            throttle.count(*key, window_seconds=settings.DEEPTHINK_LOGIN_WINDOW_SECONDS)
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        throttle.reset(*self._keys()[0])
        return super().form_valid(form)


class SignupForm(UserCreationForm):
    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "email")


@require_http_methods(["GET", "POST"])
def signup(request: HttpRequest) -> HttpResponse:
    """Self-signup, only where the deployment allows it (DEEPTHINK_SIGNUP)."""
    if not settings.DEEPTHINK_SIGNUP:
        raise Http404("Sign-up is closed here; ask an administrator for an account.")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        auth_login(request, user)
        return redirect("home")
    return render(
        request, "registration/signup.html", {"form": form}, status=422 if form.errors else 200
    )
