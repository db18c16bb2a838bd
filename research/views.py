from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from accounts.models import team_ids_of
from config.http import AuthenticatedHttpRequest

from .documents import DocumentError
from .forms import KnowledgeItemForm, SearchForm, UploadForm
from .knowledge import Change, save_item, store_reading
from .memory import MemoryResult, search_memory
from .models import KnowledgeItem, KnowledgeSource

SEARCH_LIMIT = 20
PAGE_SIZE = 25


def get_item_for(user: object, pk: int) -> KnowledgeItem:
    """The item if this user may see it; otherwise 404, whether or not it exists."""
    return get_object_or_404(KnowledgeItem.objects.visible_to(user), pk=pk)


def _search(user: Any, query: str) -> list[MemoryResult]:
    results = search_memory(
        owner_ids=[user.pk],
        team_ids=team_ids_of(user),
        query=query,
        limit=SEARCH_LIMIT,
        per_item=1,  # one row per item: the passage that matches best
    )
    # Visibility has one definition (visible_to); results outside it are never shown, even
    # if search scopes and visibility drift apart when teams arrive.
    visible = set(
        KnowledgeItem.objects.visible_to(user)
        .filter(pk__in=[r.item_id for r in results])
        .values_list("pk", flat=True)
    )
    return [r for r in results if r.item_id in visible]


def _with_relevance(results: list[MemoryResult]) -> list[tuple[MemoryResult, int]]:
    """Each result with its score as a percentage of the best one: raw scores only compare
    within one search, and on a small knowledge base they can be tiny."""
    top = max((r.score for r in results), default=0.0)
    return [(r, round(100 * r.score / top) if top > 0 else 0) for r in results]


def _list_page(
    request: AuthenticatedHttpRequest,
    *,
    item_form: KnowledgeItemForm | None = None,
    upload_form: UploadForm | None = None,
    status: int = 200,
) -> HttpResponse:
    search_form = SearchForm(request.GET)
    query = search_form.cleaned_data["q"] if search_form.is_valid() else ""
    items = KnowledgeItem.objects.visible_to(request.user)
    page = Paginator(items, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {
        "search_form": search_form,
        "query": query,
        "results": _with_relevance(_search(request.user, query)) if query else [],
        "page": page,
        "item_form": item_form or KnowledgeItemForm(user=request.user),
        "upload_form": upload_form or UploadForm(),
        "total": page.paginator.count,
    }
    if request.htmx and request.method == "GET":
        # The search box swaps only the results (see knowledge_list.html).
        return render(request, "research/knowledge_list.html#results", context, status=status)
    return render(request, "research/knowledge_list.html", context, status=status)


@login_required
@require_GET
def knowledge_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    return _list_page(request)


@login_required
@require_POST
def knowledge_add(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = KnowledgeItemForm(request.POST, user=request.user)
    if not form.is_valid():
        return _list_page(request, item_form=form, status=422)
    item = save_item(
        owner=request.user,
        title=form.cleaned_data["title"],
        body=form.cleaned_data["body"],
        url=form.cleaned_data["url"],
        source=KnowledgeSource.NOTE,
        team=form.cleaned_data.get("team"),
    ).item
    messages.success(request, f"Added “{item.title}”.")
    for note in item.notes:  # a note over the passage limit says so
        messages.warning(request, note)
    return redirect("knowledge-list")


@login_required
@require_POST
def knowledge_upload(request: AuthenticatedHttpRequest) -> HttpResponse:
    # The file is read while the form is validated, in a process of its own
    # (knowledge.read_upload): this thread only waits, and every other request goes on.
    form = UploadForm(request.POST, request.FILES)
    if not form.is_valid():
        return _list_page(request, upload_form=form, status=422)
    reading = form.cleaned_data["reading"]
    try:
        saved = store_reading(reading, owner=request.user, source=KnowledgeSource.UPLOAD)
    except DocumentError as error:
        form.add_error("file", str(error))
        return _list_page(request, upload_form=form, status=422)
    if saved.change is Change.DUPLICATE:
        messages.info(
            request,
            f"“{reading.name}” was already imported as “{saved.item.title}”; nothing new "
            "was stored.",
        )
        return redirect(saved.item)
    messages.success(request, f"Uploaded “{reading.name}” as “{saved.item.title}”.")
    for note in saved.item.notes:
        messages.warning(request, note)
    return redirect(saved.item)


@login_required
@require_GET
def knowledge_detail(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    item = get_item_for(request.user, pk)
    return render(request, "research/knowledge_detail.html", {"item": item})


@login_required
@require_http_methods(["GET", "POST"])
def knowledge_delete(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    item = get_item_for(request.user, pk)
    if item.owner_id != request.user.pk:
        # Teammates see shared items; only the person who added one may delete it.
        raise PermissionDenied("Only the person who added this item can delete it.")
    if request.method == "GET":
        return render(request, "research/knowledge_confirm_delete.html", {"item": item})
    title = item.title
    item.delete()
    messages.success(request, f"Deleted “{title}”.")
    return redirect("knowledge-list")
