"""Parts of a session page loaded on demand: earlier thoughts, and one sub-question's."""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET

from .access import get_session_for
from .presenters import focus_thoughts, source_numbers, thought_page


def _number(value: str | None) -> int | None:
    if value is None or not value.isdigit() or len(value) > 10:
        return None
    return int(value)


@login_required
@require_GET
def session_thoughts(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """`?before=N`: the page of thoughts before sequence N (with the next "Show earlier"
    row), the newest page without it; `?focus=ID`: every thought on that sub-question."""
    session = get_session_for(request.user, pk)
    raw_before, raw_focus = request.GET.get("before"), request.GET.get("focus")
    before, focus = _number(raw_before), _number(raw_focus)
    if (raw_before is not None and before is None) or (raw_focus is not None and focus is None):
        return HttpResponseBadRequest("before and focus are whole numbers.")
    if focus is not None:
        context = focus_thoughts(session, focus)
    else:  # the page before a sequence, or the newest page
        context = thought_page(session, before=before)
    context.update(session=session, source_numbers=source_numbers(session))
    return render(request, "thinking/_thought_page.html", context)
