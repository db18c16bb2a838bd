"""Account pages: API tokens (list, create — the token is shown once — revoke), notification
settings, the throttled login and self-signup."""

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
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from config.http import AuthenticatedHttpRequest

from . import login_throttle, webhook_secrets
from .login_throttle import ThrottledAuthenticationForm
from .models import ApiToken, MailChoice, NotificationPreference
from .tokens import create_token, revoke_token


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        strip=True,
        help_text="What will use it, so you know which to revoke: “laptop script”, “CI”.",
    )


class NotificationForm(forms.Form):
    """When sessions mail their owner (#19): the default for new sessions, and where to."""

    mail = forms.ChoiceField(
        label="Mail me when a session ends",
        choices=MailChoice.choices,
        help_text="The default for new sessions; each session can say otherwise.",
    )
    email = forms.EmailField(label="Mail address", required=False, max_length=254)

    @classmethod
    def for_user(cls, user: Any, data: Any = None) -> NotificationForm:
        pref = NotificationPreference.objects.filter(user=user).first()
        initial = {"mail": pref.mail if pref else MailChoice.LONG, "email": user.email}
        return cls(data, initial=initial)

    def save(self, user: Any) -> None:
        NotificationPreference.objects.update_or_create(
            user=user, defaults={"mail": self.cleaned_data["mail"]}
        )
        if self.cleaned_data["email"] != user.email:
            user.email = self.cleaned_data["email"]
            user.save(update_fields=["email"])


def _tokens_page(
    request: AuthenticatedHttpRequest,
    *,
    form: TokenForm | None = None,
    status: int = 200,
    **shown: Any,
) -> HttpResponse:
    """The tokens page; `shown` carries a token made by this request, which exists only in
    this response (never cached)."""
    context = {
        "form": form or TokenForm(),
        "tokens": ApiToken.objects.filter(user=request.user),
        "new_token": None,
        "new_secret": "",
        **shown,
    }
    response = render(request, "accounts/tokens.html", context, status=status)
    if shown:
        add_never_cache_headers(response)  # no copy of the secret in any cache
    return response


def _account_page(request: AuthenticatedHttpRequest, *, new_webhook_key: str = "") -> HttpResponse:
    """The account page: when sessions mail you, and your webhook signing key (a new one is
    shown only in the response that made it, never cached)."""
    context = {
        "webhook_key": webhook_secrets.of(request.user),
        "new_webhook_key": new_webhook_key,
        "notification_form": NotificationForm.for_user(request.user),
    }
    response = render(request, "accounts/account.html", context)
    if new_webhook_key:
        add_never_cache_headers(response)
    return response


@login_required
@require_GET
def account(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _account_page(request)


@login_required
@require_http_methods(["GET", "POST"])
def token_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = TokenForm(request.POST if request.method == "POST" else None)
    if not form.is_bound:
        return _tokens_page(request, form=form)
    if not form.is_valid():
        return _tokens_page(request, form=form, status=422)
    # Rendered here rather than redirected to: the token exists only in this response.
    token, secret = create_token(request.user, form.cleaned_data["name"])
    return _tokens_page(request, new_token=token, new_secret=secret)


@login_required
@require_POST
def webhook_key(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Make the person's webhook signing key, or a new one in place of it; shown only in this
    response, like a new token."""
    return _account_page(request, new_webhook_key=webhook_secrets.rotate(request.user))


@login_required
@require_POST
def token_revoke(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    revoke_token(token)
    messages.success(request, f"Revoked “{token.name}”: requests with it are now refused.")
    return redirect("api-tokens")


@login_required
@require_POST
def notification_settings(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = NotificationForm.for_user(request.user, request.POST)
    if form.is_valid():
        form.save(request.user)
        messages.success(request, "Notification settings saved.")
    else:
        messages.error(request, " ".join(" ".join(map(str, e)) for e in form.errors.values()))
    return redirect("account")


class ThrottledLoginView(LoginView):
    """Django's login, refusing further attempts for a while after repeated failures, per
    client and username and per client alone (accounts.login_throttle, shared with the
    admin's login). A refused attempt answers 429 and never checks the password."""

    authentication_form = ThrottledAuthenticationForm

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        # The page links to sign-up only where the deployment allows it.
        return {**super().get_context_data(**kwargs), "signup_open": settings.DEEPTHINK_SIGNUP}

    def form_invalid(self, form: Any) -> HttpResponse:
        response = super().form_invalid(form)
        if login_throttle.was_throttled(form):
            response.status_code = 429
        return response


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
        request, "accounts/signup.html", {"form": form}, status=422 if form.errors else 200
    )
