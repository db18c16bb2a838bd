"""The API tokens settings page: list, create (the token is shown once), revoke."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from .models import ApiToken
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
