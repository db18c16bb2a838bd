from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from . import stages
from .models import (
    CitationCheck,
    Delivery,
    Extension,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
)


class CitationCheckInline(admin.TabularInline):
    """Read-only: verdicts are written by the citation check (thinking/citations.py)."""

    model = CitationCheck
    fields = ("number", "verdict", "claim", "why")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class ThoughtInline(admin.TabularInline):
    model = Thought
    extra = 0
    fields = (
        "sequence",
        "cycle",
        "type",
        "confidence",
        "text",
        "parts",
        "sub_question",
        "time_offset_seconds",
    )
    readonly_fields = ("time_offset_seconds",)
    raw_id_fields = ("sub_question",)
    show_change_link = True


class SubQuestionInline(admin.TabularInline):
    model = SubQuestion
    fk_name = "session"
    extra = 0
    fields = (
        "priority",
        "initial_priority",
        "priority_changes",
        "text",
        "why",
        "explored",
        "explored_at",
        "answer",
        "parent",
    )
    readonly_fields = ("explored_at", "initial_priority", "priority_changes")
    raw_id_fields = ("parent",)


class SynthesisInline(admin.StackedInline):
    model = Synthesis
    extra = 0
    fields = (
        ("sequence", "is_final", "confidence", "time_offset_seconds"),
        "text",
        "key_insights",
        "remaining_questions",
    )
    readonly_fields = ("time_offset_seconds",)


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
    list_filter = ("status", "completion_reason", "format_mode", "owner", "model_id")
    search_fields = ("question", "final_answer")
    date_hierarchy = "created_at"
    raw_id_fields = ("owner", "parent")
    inlines = (SynthesisInline, SubQuestionInline, ThoughtInline)
    readonly_fields = (
        "id",
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
        "confidence_evolution",
        "parse_routes",
        "stop_requested",
        "conclude_requested",
        "truncated_replies",
        "stage_history",
        "format_errors",
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
                    "question",
                    "model_id",
                    "status",
                    "completion_reason",
                    "completion_note",
                )
            },
        ),
        ("Format", {"fields": ("format_mode", "format_spec", "parse_routes", "format_errors")}),
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
                    "stage_history",
                )
            },
        ),
        (
            "Budget",
            {
                "fields": (
                    "budget_seconds",
                    "synthesis_interval_seconds",
                    "token_ceiling",
                    "max_cost_usd",
                )
            },
        ),
        ("Answer", {"fields": ("final_answer", "final_confidence", "confidence_evolution")}),
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
                    "cost_usd",
                    "unpriced_calls",
                    "usage_per_model",
                )
            },
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

    @admin.display(description="Stages")
    def stage_history(self, obj: ThinkingSession) -> str:
        # format_html_join escapes every value: stage messages can come from the model.
        history = stages.served(obj)
        rows = format_html_join(
            "",
            "<li>{} · <strong>{}</strong> {}: {}</li>",
            (
                (item.get("at", ""), item.get("stage", ""), item.get("label", ""), item["message"])
                for item in history
                if isinstance(item, dict) and "message" in item
            ),
        )
        return format_html("<ol>{}</ol>", rows) if history else "—"

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
class ThoughtAdmin(admin.ModelAdmin):
    list_display = ("session", "sequence", "type", "confidence")
    list_filter = ("type",)
    search_fields = ("text",)
    raw_id_fields = ("session", "sub_question")


@admin.register(SubQuestion)
class SubQuestionAdmin(admin.ModelAdmin):
    list_display = ("text", "session", "priority", "explored")
    list_filter = ("explored",)
    search_fields = ("text",)
    raw_id_fields = ("session", "parent")


@admin.register(Synthesis)
class SynthesisAdmin(admin.ModelAdmin):
    list_display = ("session", "sequence", "is_final", "confidence")
    list_filter = ("is_final",)
    search_fields = ("text",)
    raw_id_fields = ("session",)
    inlines = (CitationCheckInline,)


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    """Mails and webhook calls for finished sessions (#19): what was sent, what is retrying."""

    list_display = ("session", "kind", "target", "status", "attempts", "next_at")
    list_filter = ("kind", "status")
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
    readonly_fields = ("session", "by", "minutes")
