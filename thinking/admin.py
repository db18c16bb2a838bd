"""The admin: a session's own fields on its page, and its rows (thoughts, sub-questions,
syntheses, sources, stages, model calls) as change lists filtered to it, linked from that
page. No inline of every row: a page costs the same for a session of any length."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar, cast
from urllib.parse import urlsplit

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.text import Truncator

from thinking.deliberation import stages
from thinking.formatting import duration, percent
from thinking.models import (
    CitationCheck,
    Delivery,
    Extension,
    ModelCall,
    Source,
    Stage,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
)
from thinking.web.export import MODEL_CALL_COLUMNS, reference_summary

# The newest stage entries shown on a session's page; the rest are on the Stage list.
STAGES_SHOWN = 10
EXCERPT = 120


def excerpt(text: str, length: int = EXCERPT) -> str:
    """Untrusted text on one line, cut for a list column (escaped by the admin)."""
    return Truncator(" ".join(str(text).split())).chars(length)


def _rows_link(model: type[Model], session: ThinkingSession, count: int, label: str) -> str:
    meta = model._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
    return format_html('<a href="{}?session={}">{} {}</a>', url, session.pk, count, label)


class SessionFilter(admin.SimpleListFilter):
    """`?session=<id>`: one session's rows. The sidebar names the chosen session only (a
    choice of every session would grow with the table)."""

    title = "session"
    parameter_name = "session"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        chosen = self.value()
        if not chosen:
            return []
        try:
            session = ThinkingSession.objects.only("question").get(pk=uuid.UUID(chosen))
        except (ValueError, ThinkingSession.DoesNotExist):
            return []
        return [(chosen, excerpt(session.question, 60))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        chosen = self.value()
        if not chosen:
            return queryset
        try:
            return queryset.filter(session_id=uuid.UUID(chosen))
        except ValueError:
            return queryset.none()


class SessionRows(ChangeList):
    """A list of a session's rows reads only the columns it shows (the admin's `list_only`,
    `list_related`): no thought's reasoning, no model call's content, not the whole session
    row for each line."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        rows = super().get_queryset(request, exclude_parameters)
        model_admin = cast(SessionRowAdmin, self.model_admin)
        related = model_admin.list_related
        columns = [f"{name}__{column}" for name, column in related]
        return rows.select_related(*(name for name, _ in related)).only(
            *model_admin.list_only, *(name for name, _ in related), *columns
        )


class SessionRowAdmin(admin.ModelAdmin):
    """A session's rows: filtered by session, the session named by its question."""

    raw_id_fields: ClassVar[tuple[str, ...]] = ("session",)
    list_per_page = 100
    # The row's own columns a list reads, and (relation, column) pairs read beside them.
    list_only: tuple[str, ...] = ()
    list_related: tuple[tuple[str, str], ...] = (("session", "question"),)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return SessionRows

    @admin.display(description="Session", ordering="session__created_at")
    def session_question(self, obj: Any) -> str:
        return excerpt(obj.session.question, 60)

    @admin.display(description="Text")
    def text_excerpt(self, obj: Any) -> str:
        return excerpt(obj.text)


class ReadOnlyRowAdmin(SessionRowAdmin):
    """Rows written by the loop that an edit would only falsify: viewed, never changed."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class CitationCheckInline(admin.TabularInline):
    """Read-only: verdicts are written by the citation check
    (thinking/deliberation/citations.py)."""

    model = CitationCheck
    fields = ("number", "verdict", "claim", "why")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


ROWS = (
    (Thought, "thoughts", "thoughts"),
    (SubQuestion, "sub_questions", "sub-questions"),
    (Synthesis, "syntheses", "syntheses"),
    (Source, "sources", "sources"),
    (Stage, "stage_entries", "stages"),
    (ModelCall, "model_calls", "model calls"),
)


@admin.register(ThinkingSession)
class ThinkingSessionAdmin(admin.ModelAdmin):
    list_display = (
        "question_short",
        "owner",
        "status",
        "completion_reason",
        "progress",
        "final_confidence",
        "created_at",
    )
    list_filter = ("status", "completion_reason", "format_mode", "model_id", "team")
    search_fields = ("question", "final_answer", "owner__username")
    date_hierarchy = "created_at"
    raw_id_fields = ("owner", "parent", "team")
    list_select_related = ("owner",)
    readonly_fields = (
        "id",
        "rows",
        "created_at",
        "started_at",
        "finished_at",
        "active_seconds",
        "running_since",
        "cycles",
        "thoughts_at_last_questions",
        "next_synthesis_at",
        "revision",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "worker_id",
        "heartbeat_at",
        "waiting_since",
        "waiting_reason",
        "confidence_shown",
        "parse_routes",
        "stop_requested",
        "conclude_requested",
        "truncated_replies",
        "unknown_citations",
        "plan_shown",
        "research_notes_shown",
        "search_shown",
        "stage_history",
        "format_errors",
        "children_shown",
        "parent_context",
        "cost_usd",
        "unpriced_calls",
        "usage_per_model",
    )
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "owner",
                    "team",
                    "question",
                    "model_id",
                    "status",
                    "completion_reason",
                    "completion_note",
                )
            },
        ),
        ("Its rows", {"fields": ("rows",)}),
        (
            "Settings",
            {
                "fields": (
                    "budget_seconds",
                    "synthesis_interval_seconds",
                    "token_ceiling",
                    "max_cost_usd",
                )
            },
        ),
        (
            "Thinking settings",
            {"fields": ("thinking_mode", "thinking_budget", "effort", "max_tokens")},
        ),
        (
            "Tools",
            {"fields": ("tools_enabled", "search_tool", "think_tool", "progress_tool")},
        ),
        (
            "Research and stages",
            {
                "fields": (
                    "research_enabled",
                    "web_enabled",
                    "web_search",
                    "include_domains",
                    "exclude_domains",
                    "search_recency",
                    "language",
                    "plan_shown",
                    "research_notes_shown",
                    "search_shown",
                    "stage_history",
                )
            },
        ),
        ("Format", {"fields": ("format_mode", "format_spec", "parse_routes", "format_errors")}),
        (
            "Follow-ups and notifications",
            {"fields": ("parent", "children_shown", "notify_email", "webhook_url")},
        ),
        ("Answer", {"fields": ("final_answer", "final_confidence", "confidence_shown")}),
        ("Error", {"fields": ("error_message",), "classes": ("collapse",)}),
        (
            "Timing",
            {
                "fields": (
                    "created_at",
                    "started_at",
                    "finished_at",
                    "active_seconds",
                    "running_since",
                    "waiting_since",
                    "waiting_reason",
                )
            },
        ),
        (
            "Loop checkpoint",
            {
                "fields": (
                    "cycles",
                    "thoughts_at_last_questions",
                    "next_synthesis_at",
                    "focus",
                    "stop_requested",
                    "conclude_requested",
                    "revision",
                ),
                "classes": ("collapse",),
            },
        ),
        (
            "Usage",
            {
                "fields": (
                    "input_tokens",
                    "output_tokens",
                    "cache_read_tokens",
                    "cache_write_tokens",
                    "truncated_replies",
                    "unknown_citations",
                    "cost_usd",
                    "unpriced_calls",
                    "usage_per_model",
                )
            },
        ),
        (
            "The parent's context (a follow-up's prompts carry it)",
            {"fields": ("parent_context",), "classes": ("collapse",)},
        ),
        ("Worker lease", {"fields": ("worker_id", "heartbeat_at"), "classes": ("collapse",)}),
    )

    def save_model(
        self, request: HttpRequest, obj: ThinkingSession, form: Any, change: bool
    ) -> None:
        if not change:
            super().save_model(request, obj, form, change)
            return
        # Only the fields edited here, through the one door: a plain save() would write back
        # the checkpoint as it was when the page loaded, over a running worker's progress.
        edited = {name: form.cleaned_data[name] for name in form.changed_data}
        with ThinkingSession.step(obj.pk, stop_on_cancel=False) as step:
            step.update(**edited)
        obj.refresh_from_db()

    @admin.display(description="Rows")
    def rows(self, obj: ThinkingSession) -> str:
        """Each kind of row as a list filtered to this session, with its count."""
        if obj.pk is None:
            return "—"
        links = [
            _rows_link(model, obj, getattr(obj, related).count(), label)
            for model, related, label in ROWS
        ]
        return format_html_join(" · ", "{}", ((link,) for link in links))

    @admin.display(description="Plan")
    def plan_shown(self, obj: ThinkingSession) -> str:
        plan = obj.plan if isinstance(obj.plan, dict) else {}
        steps = [str(step) for step in plan.get("steps") or []]
        if not steps:
            return "—"
        current = plan.get("current")
        items = format_html_join(
            "",
            "<li>{}{}</li>",
            ((step, " (current)" if i == current else "") for i, step in enumerate(steps)),
        )
        extras = format_html_join(
            "",
            "<p>{}: {}</p>",
            (
                (label, "; ".join(str(value) for value in plan.get(key) or []))
                for key, label in (
                    ("terms", "Key terms"),
                    ("web_queries", "Web queries"),
                    ("memory_queries", "Knowledge-base queries"),
                )
                if plan.get(key)
            ),
        )
        source = plan.get("source")
        made = format_html("<p>Made by: {}</p>", source) if source else ""
        return format_html("<ol>{}</ol>{}{}", items, extras, made)

    @admin.display(description="Research notes")
    def research_notes_shown(self, obj: ThinkingSession) -> str:
        notes = obj.research_notes if isinstance(obj.research_notes, list) else []
        if not notes:
            return "—"
        return format_html(
            "<ul>{}</ul>", format_html_join("", "<li>{}</li>", ((n,) for n in notes))
        )

    @admin.display(description="Searches")
    def search_shown(self, obj: ThinkingSession) -> str:
        rows = reference_summary(obj)
        if not rows:
            return "—"
        return format_html_join(
            "",
            "<p>{}: {} searches, {} new sources, {} found again</p>",
            ((row["label"], row["searches"], row["new"], row["known"]) for row in rows),
        )

    @admin.display(description="Stages")
    def stage_history(self, obj: ThinkingSession) -> str:
        # format_html_join escapes every value: stage messages can come from the model.
        if obj.pk is None:
            return "—"
        newest = list(obj.stage_entries.order_by("-sequence")[:STAGES_SHOWN])[::-1]
        rows = format_html_join(
            "",
            "<li>{} · <strong>{}</strong> {}: {}</li>",
            (
                (item.get("at", ""), item.get("stage", ""), item.get("label", ""), item["message"])
                for item in (row.entry for row in newest)
                if isinstance(item, dict) and "message" in item
            ),
        )
        if not newest:
            return "—"
        note = (
            format_html(
                "<p>The newest {} of {}; all of them under Stages above.</p>",
                len(newest),
                obj.stage_count,
            )
            if obj.stage_count > len(newest)
            else ""
        )
        return format_html("{}<ol>{}</ol>", note, rows)

    @admin.display(description="Follow-ups")
    def children_shown(self, obj: ThinkingSession) -> str:
        if obj.pk is None:
            return "—"
        children = obj.children.only("question")[:20]
        return (
            format_html_join(
                "",
                '<p><a href="{}">{}</a></p>',
                (
                    (
                        reverse("admin:thinking_thinkingsession_change", args=[child.pk]),
                        excerpt(child.question, 90),
                    )
                    for child in children
                ),
            )
            or "—"
        )

    @admin.display(description="Confidence over the syntheses")
    def confidence_shown(self, obj: ThinkingSession) -> str:
        values = obj.confidence_evolution if isinstance(obj.confidence_evolution, list) else []
        return " → ".join(percent(v) for v in values if isinstance(v, int | float)) or "—"

    @admin.display(description="Usage per model")
    def usage_per_model(self, obj: ThinkingSession) -> str:
        """Calls, tokens and cost per model (each call at its own model's list price)."""
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (model, spent.calls, spent.tokens, spent.shown_cost)
                for model, spent in obj.model_usage
            ),
        )
        if not obj.model_usage:
            return "—"
        return format_html(
            "<table><tr><th>Model</th><th>Calls</th><th>Tokens</th><th>Cost</th></tr>{}</table>",
            rows,
        )

    @admin.display(description="Question", ordering="question")
    def question_short(self, obj: ThinkingSession) -> str:
        return obj.question[:90]

    @admin.display(description="Progress")
    def progress(self, obj: ThinkingSession) -> str:
        return f"{obj.progress_percent():.0f}%"


@admin.register(Thought)
class ThoughtAdmin(SessionRowAdmin):
    list_display = (
        "sequence",
        "session_question",
        "type",
        "confidence_shown",
        "at",
        "text_excerpt",
        "on_sub_question",
    )
    list_display_links = ("sequence",)
    list_filter = (SessionFilter, "type", "truncated")
    search_fields = ("text",)
    raw_id_fields = ("session", "sub_question")
    readonly_fields = ("session", "sequence", "cycle", "time_offset_seconds", "created_at")
    list_only = ("sequence", "type", "confidence", "time_offset_seconds", "text")
    list_related = (("session", "question"), ("sub_question", "text"))

    @admin.display(description="Confidence", ordering="confidence")
    def confidence_shown(self, obj: Thought) -> str:
        return percent(obj.confidence)

    @admin.display(description="At", ordering="time_offset_seconds")
    def at(self, obj: Thought) -> str:
        return duration(obj.time_offset_seconds)

    @admin.display(description="Sub-question")
    def on_sub_question(self, obj: Thought) -> str:
        return excerpt(obj.sub_question.text, 60) if obj.sub_question else "—"


@admin.register(SubQuestion)
class SubQuestionAdmin(SessionRowAdmin):
    list_display = ("text_excerpt", "session_question", "priority", "initial_priority", "explored")
    list_filter = (SessionFilter, "explored")
    search_fields = ("text", "answer")
    raw_id_fields = ("session", "parent", "added_by")
    readonly_fields = ("session", "initial_priority", "priority_moves", "explored_at", "created_at")
    exclude = ("priority_changes",)
    list_only = ("text", "priority", "initial_priority", "explored")

    @admin.display(description="Priority changes")
    def priority_moves(self, obj: SubQuestion) -> str:
        moves = obj.priority_changes if isinstance(obj.priority_changes, list) else []
        return (
            format_html_join(
                "",
                "<p>{} → {} at cycle {}: {}</p>",
                (
                    (
                        move.get("from", ""),
                        move.get("to", ""),
                        move.get("cycle", ""),
                        move.get("why", ""),
                    )
                    for move in moves
                    if isinstance(move, dict)
                ),
            )
            or "—"
        )


@admin.register(Synthesis)
class SynthesisAdmin(SessionRowAdmin):
    list_display = (
        "sequence",
        "session_question",
        "is_final",
        "confidence_shown",
        "at",
        "text_excerpt",
    )
    list_display_links = ("sequence",)
    list_filter = (SessionFilter, "is_final", "truncated")
    search_fields = ("text",)
    readonly_fields = ("session", "sequence", "time_offset_seconds", "created_at")
    inlines = (CitationCheckInline,)
    list_only = ("sequence", "is_final", "confidence", "time_offset_seconds", "text")

    @admin.display(description="Confidence", ordering="confidence")
    def confidence_shown(self, obj: Synthesis) -> str:
        return percent(obj.confidence)

    @admin.display(description="At", ordering="time_offset_seconds")
    def at(self, obj: Synthesis) -> str:
        return duration(obj.time_offset_seconds)


@admin.register(Source)
class SourceAdmin(ReadOnlyRowAdmin):
    """What a search found, cited by number: an edit would change what the session's
    answers cite, so it is read here, not changed."""

    list_display = (
        "number",
        "title_excerpt",
        "session_question",
        "kind",
        "found_by",
        "site",
        "score",
    )
    list_display_links = ("number",)
    list_filter = (SessionFilter, "kind", "found_by")
    search_fields = ("title", "url", "query")
    fields = (
        "session",
        "number",
        "kind",
        "title",
        "url",
        "snippet",
        "score",
        "query",
        "found_by",
        "created_at",
    )
    readonly_fields = fields
    list_only = ("number", "title", "kind", "found_by", "url", "score")

    @admin.display(description="Title", ordering="title")
    def title_excerpt(self, obj: Source) -> str:
        return excerpt(obj.title, 90)

    @admin.display(description="Site")
    def site(self, obj: Source) -> str:
        return urlsplit(obj.url).netloc if obj.url else "—"


class StageKindFilter(admin.SimpleListFilter):
    title = "stage"
    parameter_name = "stage"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(stages.LABELS.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        chosen = self.value()
        return queryset.filter(entry__stage=chosen) if chosen else queryset


@admin.register(Stage)
class StageAdmin(ReadOnlyRowAdmin):
    """A session's stage history, one row an entry (thinking/deliberation/stages.py)."""

    list_display = ("sequence", "session_question", "stage", "label", "message", "at")
    list_display_links = ("sequence",)
    list_filter = (SessionFilter, StageKindFilter)
    fields = ("session", "sequence", "stage", "label", "message", "at", "details")
    readonly_fields = fields
    list_only = ("sequence", "entry")

    def _entry(self, obj: Stage) -> dict[str, Any]:
        return obj.entry if isinstance(obj.entry, dict) else {}

    @admin.display(description="Stage")
    def stage(self, obj: Stage) -> str:
        return str(self._entry(obj).get("stage", ""))

    @admin.display(description="Label")
    def label(self, obj: Stage) -> str:
        return excerpt(self._entry(obj).get("label", ""), 60)

    @admin.display(description="Message")
    def message(self, obj: Stage) -> str:
        return excerpt(self._entry(obj).get("message", ""))

    @admin.display(description="At")
    def at(self, obj: Stage) -> str:
        return str(self._entry(obj).get("at", ""))

    @admin.display(description="Everything else it carries")
    def details(self, obj: Stage) -> str:
        shown = {"stage", "label", "message", "at"}
        rest = [(key, value) for key, value in self._entry(obj).items() if key not in shown]
        return format_html_join("", "<p>{}: {}</p>", rest) or "—"


# The export's columns (never `content`), the cost shown in dollars.
CALL_COLUMNS = tuple("cost" if name == "cost_usd" else name for name in MODEL_CALL_COLUMNS)


@admin.register(ModelCall)
class ModelCallAdmin(ReadOnlyRowAdmin):
    """Usage per call. Never the content: it holds thinking signatures (models.ModelCall)."""

    list_display = ("created_at", "session_question", *CALL_COLUMNS[:-1])
    list_display_links = ("created_at",)
    list_filter = (SessionFilter, "purpose", "model", "thinking_mode", "stop_reason")
    search_fields = ("model", "purpose")
    fields = readonly_fields = ("session", *CALL_COLUMNS)
    list_only = MODEL_CALL_COLUMNS

    @admin.display(description="Cost", ordering="cost_usd")
    def cost(self, obj: ModelCall) -> str:
        return "no price" if obj.cost_usd is None else f"${obj.cost_usd:.4f}"


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    """Mails and webhook calls for finished sessions (#19): what was sent, what is retrying."""

    list_display = ("session", "kind", "target", "status", "attempts", "next_at")
    list_filter = (SessionFilter, "kind", "status")
    list_select_related = ("session",)
    readonly_fields = ("session", "kind", "target", "subject", "body", "created_at")

    def get_queryset(self, request: HttpRequest) -> Any:
        # A webhook URL (and any secret in its path) is its owner's: staff who are not
        # superusers see the deliveries of their own sessions only.
        rows = super().get_queryset(request)
        if getattr(request.user, "is_superuser", False):
            return rows
        return rows.filter(session__owner_id=getattr(request.user, "pk", None))


@admin.register(Extension)
class ExtensionAdmin(admin.ModelAdmin):
    list_display = ("session", "minutes", "by", "created_at")
    list_filter = (SessionFilter,)
    readonly_fields = ("session", "by", "minutes")
