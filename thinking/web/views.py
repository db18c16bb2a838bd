from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from config.http import AuthenticatedHttpRequest
from thinking.formatting import counted
from thinking.models import IllegalTransition, Status, ThinkingSession
from thinking.page.presenters import header_context, session_context, source_numbers
from thinking.people import actions, followups, limits
from thinking.provider import llm
from thinking.web.access import get_session_for
from thinking.web.forms import EstimateForm, ExtendForm, StartSessionForm, SteerForm


def _start_page(
    request: AuthenticatedHttpRequest, form: StartSessionForm, status: int = 200
) -> HttpResponse:
    recent = ThinkingSession.objects.visible_to(request.user)[:8]
    advanced = set(StartSessionForm.ADVANCED) & set(form.errors)
    asked = form.data if form.is_bound else {"minutes": form.fields["minutes"].initial}
    context = {
        "form": form,
        "estimate": EstimateForm(asked).estimate(),
        "recent": recent,
        "provider_ready": llm.is_configured(),
        "advanced_errors": bool(advanced),
    }
    return render(request, "thinking/home.html", context, status=status)


@login_required
@require_GET
def home(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _start_page(request, StartSessionForm(user=request.user))


@login_required
@require_http_methods(["GET", "POST"])
def session_create(request: AuthenticatedHttpRequest) -> HttpResponse:
    if request.method == "GET":
        return redirect("home")
    if request.POST.get("parent"):
        # A follow-up of a session this person may not see is a 404, as the session is.
        try:
            get_session_for(request.user, request.POST["parent"])
        except ValidationError:
            raise Http404("No such session.") from None
    form = StartSessionForm(request.POST, user=request.user)
    session = actions.start(form, owner=request.user)
    if session is None:
        return _start_page(request, form, status=422)
    if request.htmx:
        return HttpResponseClientRedirect(session.get_absolute_url())
    return redirect(session)


@login_required
@require_GET
def session_estimate(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The start form's cost estimate, again as the person changes its fields (htmx)."""
    return render(
        request, "thinking/_estimate.html", {"estimate": EstimateForm(request.GET).estimate()}
    )


SEARCH_MAX_CHARS = 200


@login_required
@require_GET
def session_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    """My sessions, newest first: search in the question, filter by status, 25 a page."""
    sessions = ThinkingSession.objects.visible_to(request.user)
    query = " ".join(request.GET.get("q", "").split())[:SEARCH_MAX_CHARS]
    if query:
        sessions = sessions.filter(question__icontains=query)
    shared = request.GET.get("shared") == "1"
    if shared:  # shared with me: my teams' sessions, not my own
        sessions = sessions.exclude(owner=request.user)
    status = request.GET.get("status", "")
    if status in Status.values:
        sessions = sessions.filter(status=status)
    else:
        status = ""
    page = Paginator(sessions, 25).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "rows": page.object_list,
        "query": query,
        "status": status,
        "shared": shared,
        "status_label": Status(status).label if status else "",
        "statuses": Status.choices,
    }
    if request.htmx and request.htmx.target == "session-results":
        template = "thinking/_session_results.html"  # the search form: rows, count and pager
    elif request.htmx:
        template = "thinking/_session_rows.html"
    else:
        template = "thinking/session_list.html"
    return render(request, template, context)


def _follow_up_context(session: ThinkingSession, viewer: Any) -> dict[str, Any]:
    """The session page's follow-up part: links, earlier answers, and what the viewer may do:
    think longer (the owner, once it completed) and ask a follow-up (once it ended, unless
    it was cancelled)."""
    follow_up = None
    if session.is_finished and session.status != Status.CANCELLED:
        follow_up = StartSessionForm(user=viewer, initial={"parent": session.pk})
    return {
        **followups.links(session, viewer),
        "answer_versions": followups.answer_versions(session),
        "may_extend": followups.is_extendable(session) and actions.may_extend(session, viewer),
        "extend_form": ExtendForm(unused_seconds=followups.unused_seconds(session)),
        "follow_up_form": follow_up,
        "extensions": list(session.extensions.all()),
    }


@login_required
@require_GET
def session_detail(request: AuthenticatedHttpRequest, pk: uuid.UUID) -> HttpResponse:
    session = get_session_for(request.user, pk)
    if request.htmx:
        return render(request, "thinking/_header.html", header_context(session, request.user))
    context = session_context(session, request.user)
    context.update(_follow_up_context(session, request.user))
    return render(request, "thinking/session_detail.html", context)


@login_required
@require_GET
def session_followups(request: AuthenticatedHttpRequest, pk: uuid.UUID) -> HttpResponse:
    """The follow-up card alone, for this viewer: what a live page loads once its session
    ends, so "Think longer" and "Ask a follow-up" appear without a reload."""
    session = get_session_for(request.user, pk)
    context = {"session": session, "source_numbers": source_numbers(session)}
    context.update(_follow_up_context(session, request.user))
    return render(request, "thinking/_followups.html", context)


@login_required
@require_POST
def session_extend(request: AuthenticatedHttpRequest, pk: uuid.UUID) -> HttpResponse:
    """Think longer: the finished session continues from what it stored (#19)."""
    session = get_session_for(request.user, pk)
    if not actions.may_extend(session, request.user):
        raise actions.NotAllowed("Only the owner can give this session more time.")
    unused = followups.unused_seconds(session)
    form = ExtendForm(request.POST, unused_seconds=unused)
    if not form.is_valid():
        messages.error(request, " ".join(" ".join(map(str, e)) for e in form.errors.values()))
        return redirect(session)
    minutes, add_remainder = form.cleaned_data["minutes"], form.cleaned_data["add_remainder"]
    try:
        actions.extend(session, user=request.user, minutes=minutes, add_remainder=add_remainder)
    except (followups.CannotExtend, limits.LimitRefused) as error:
        messages.error(request, str(error))
        return redirect(session)
    done = f"Thinking {counted(minutes, 'more minute', 'more minutes')}"
    if add_remainder and unused >= 1:
        done += f", plus the {counted(round(unused / 60, 1), 'minute')} it left unused"
    messages.success(request, f"{done}.")
    return redirect(session)


def _change_state(
    request: AuthenticatedHttpRequest, pk: uuid.UUID, change: Callable[..., None], done: str
) -> HttpResponse:
    session = get_session_for(request.user, pk)
    problem = ""
    try:
        change(session, user=request.user)  # NotAllowed is a 403
    except (IllegalTransition, limits.LimitRefused) as error:
        problem = str(error)
    if request.htmx:
        # The swapped header shows the new state, or why it could not change, in place: a
        # flash message would only surface on some later page.
        context = {**header_context(session, request.user), "problem": problem}
        return render(request, "thinking/_header.html", context)
    if problem:
        messages.error(request, problem)
    else:
        messages.success(request, done)
    return redirect(session)


@login_required
@require_POST
def session_pause(request: AuthenticatedHttpRequest, pk: uuid.UUID) -> HttpResponse:
    return _change_state(request, pk, actions.pause, "Paused.")


@login_required
@require_POST
def session_resume(request: AuthenticatedHttpRequest, pk: uuid.UUID) -> HttpResponse:
    return _change_state(request, pk, actions.resume, "Resumed.")


@login_required
@require_POST
def session_cancel(request: AuthenticatedHttpRequest, pk: uuid.UUID) -> HttpResponse:
    return _change_state(request, pk, actions.cancel, "Cancelled.")


@login_required
@require_POST
def session_conclude(request: AuthenticatedHttpRequest, pk: uuid.UUID) -> HttpResponse:
    """Write the answer now: it stops thinking and writes its final answer from what it has."""
    return _change_state(request, pk, actions.conclude, "Writing the answer now.")


@login_required
@require_POST
def session_steer(request: AuthenticatedHttpRequest, pk: uuid.UUID) -> HttpResponse:
    """A hint for the next prompts, or a sub-question that becomes the next focus."""
    session = get_session_for(request.user, pk)
    form = SteerForm(request.POST)
    notice = ""
    if form.is_valid():
        try:
            thought = actions.steer(
                session,
                user=request.user,
                kind=form.cleaned_data["kind"],
                text=form.cleaned_data["text"],
            )
        except IllegalTransition as error:
            form.add_error(None, str(error))
        else:
            notice = (
                "Added: it will be explored next."
                if thought.type == "question"
                else "Noted: the next prompts include your hint."
            )
            form = SteerForm(initial={"kind": form.cleaned_data["kind"]})
    status = 200 if not form.errors else 422
    if request.htmx:
        context = {"session": session, "steer_form": form, "notice": notice}
        return render(request, "thinking/_steer.html", context, status=status)
    if form.errors:
        messages.error(request, " ".join(" ".join(map(str, e)) for e in form.errors.values()))
    elif notice:
        messages.success(request, notice)
    return redirect(session)
