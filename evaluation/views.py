"""The runs' pages: a list, one run with its reliability diagram, its JSON and Markdown, and
two runs compared. Only the person who ran it may see a run (anyone else gets a 404, as
for a session; staff browse runs in the admin)."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from config.http import AuthenticatedHttpRequest

from . import report
from .models import EvaluationRun, ItemStatus


def visible_runs(user: User | AnonymousUser) -> QuerySet[EvaluationRun]:
    """A person's own runs (staff browse everyone's in the admin): a run shows its sessions'
    questions and answers, which are the owner's."""
    runs = EvaluationRun.objects.select_related("owner")
    if not user.is_authenticated:
        return runs.none()
    return runs.filter(owner=user)


def _run_for(user: User | AnonymousUser, pk: int | str) -> EvaluationRun:
    try:
        return visible_runs(user).get(pk=pk)
    except (EvaluationRun.DoesNotExist, ValueError):
        raise Http404("No such evaluation run.") from None


@login_required
@require_GET
def run_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    runs = visible_runs(request.user).annotate(
        questions=Count("items"),
        graded=Count("items", filter=Q(items__status=ItemStatus.GRADED)),
        correct=Count("items", filter=Q(items__grade="correct")),
    )
    return render(request, "evaluation/run_list.html", {"runs": runs[:200]})


@login_required
@require_GET
def run_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    found = report.build(_run_for(request.user, pk))
    context = {
        "report": found,
        "run": found.run,
        "summary": report.summary_lines(found),
        "settings_line": report.settings_line(found.run),
        "diagram": report.diagram(found.calibration),
        "offline_note": report.OFFLINE_NOTE,
        "others": visible_runs(request.user).exclude(pk=pk)[:100],
    }
    return render(request, "evaluation/run_detail.html", context)


@login_required
@require_GET
def run_json(request: AuthenticatedHttpRequest, pk: int) -> JsonResponse:
    found = report.build(_run_for(request.user, pk))
    response = JsonResponse(found.as_json(), json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="evaluation-{pk}.json"'
    return response


@login_required
@require_GET
def run_markdown(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    found = report.build(_run_for(request.user, pk))
    text = report.markdown(found, site=request.build_absolute_uri("/").rstrip("/"))
    response = HttpResponse(text, content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="evaluation-{pk}.md"'
    return response


@login_required
@require_GET
def run_compare(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Two runs side by side (?a=ID&b=ID); without both, the form to choose them."""
    if not (request.GET.get("a") and request.GET.get("b")):
        runs = visible_runs(request.user)[:200]
        return render(request, "evaluation/run_compare.html", {"runs": runs})
    a = _run_for(request.user, request.GET.get("a", ""))
    b = _run_for(request.user, request.GET.get("b", ""))
    paired = report.compare_runs(a, b)
    if request.GET.get("format") == "json":
        return HttpResponse(json.dumps(paired.as_json(), indent=2), content_type="application/json")
    context = {"paired": paired, "lines": report.comparison_lines(paired)}
    return render(request, "evaluation/run_compare.html", context)
