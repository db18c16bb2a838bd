"""Parts of a session page loaded on demand, each a page on an index (keyset by sequence,
number or id, never OFFSET), so each costs the same at any depth of a long session:
earlier thoughts, one sub-question's thoughts, all sources, all sub-questions, earlier
syntheses, and the follow-up card once the session has ended."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET

from thinking.models import ThinkingSession
from thinking.page.presenters import (
    focus_thoughts,
    source_numbers,
    source_page,
    sub_question_page,
    syntheses_context,
    thought_page,
)
from thinking.web.access import get_session_for

BAD_NUMBER = "before, after and focus are whole numbers."


def _number(value: str | None) -> int | None:
    if value is None or not value.isdigit() or len(value) > 10:
        return None
    return int(value)


class BadNumber(ValueError):
    pass


def _numbers(request: HttpRequest, *names: str) -> dict[str, int | None]:
    """The named query parameters as whole numbers (None when absent); BadNumber when one is
    given and is not one."""
    found = {}
    for name in names:
        raw = request.GET.get(name)
        found[name] = _number(raw)
        if raw is not None and found[name] is None:
            raise BadNumber(name)
    return found


@login_required
@require_GET
def session_thoughts(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
    """`?before=N`: the page of thoughts before sequence N (with the next "Show earlier"
    row), the newest page without it; `?focus=ID` (and `before`): the same on the thoughts
    about that sub-question, for the stream filter."""
    session = get_session_for(request.user, pk)
    try:
        given = _numbers(request, "before", "focus")
    except BadNumber:
        return HttpResponseBadRequest(BAD_NUMBER)
    if given["focus"] is not None:
        context = focus_thoughts(session, given["focus"], before=given["before"])
    else:  # the page before a sequence, or the newest page
        context = thought_page(session, before=given["before"])
    context.update(session=session, source_numbers=source_numbers(session))
    return render(request, "thinking/_thought_page.html", context)


def _list_page(
    name: str, template: str, build: Callable[[ThinkingSession, int | None], dict[str, Any]]
) -> Callable[[HttpRequest, uuid.UUID], HttpResponse]:
    """A view of one page of a list, from the whole number in `?<name>=`."""

    @login_required
    @require_GET
    def view(request: HttpRequest, pk: uuid.UUID) -> HttpResponse:
        session = get_session_for(request.user, pk)
        try:
            key = _numbers(request, name)[name]
        except BadNumber:
            return HttpResponseBadRequest(BAD_NUMBER)
        context = {**build(session, key), "session": session}
        return render(request, f"thinking/{template}", context)

    return view


def _syntheses(session: ThinkingSession, before: int | None) -> dict[str, Any]:
    return {**syntheses_context(session, before), "source_numbers": source_numbers(session)}


# `?after=N`: the next page of "All sources", numbered after N.
session_sources = _list_page(
    "after", "_source_page.html", lambda session, after: source_page(session, after or 0)
)
# `?after=ID`: the next page of "All sub-questions", asked after that one.
session_sub_questions = _list_page(
    "after",
    "_sub_question_page.html",
    lambda session, after: sub_question_page(session, after or 0),
)
# `?before=N`: the syntheses before sequence N, with the next "Show earlier" row.
session_syntheses = _list_page("before", "_synthesis_page.html", _syntheses)
