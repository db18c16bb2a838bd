"""The account page's notification settings (#19): when sessions mail their owner, and where.

Kept apart from account_views so the form can move with the account pages."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from .models import MailChoice, NotificationPreference


class NotificationForm(forms.Form):
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


@login_required
@require_POST
def notification_settings(request: HttpRequest) -> HttpResponse:
    form = NotificationForm.for_user(request.user, request.POST)
    if form.is_valid():
        form.save(request.user)
        messages.success(request, "Notification settings saved.")
    else:
        messages.error(request, " ".join(" ".join(e) for e in form.errors.values()))
    return redirect("api-tokens")
