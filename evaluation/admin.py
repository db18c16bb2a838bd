from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from .models import EvaluationItem, EvaluationRun


class EvaluationItemInline(admin.TabularInline):
    """Read-only: `manage.py evaluate` writes the items."""

    model = EvaluationItem
    fields = ("position", "status", "grade", "question", "reference", "session", "grader_why")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(EvaluationRun)
class EvaluationRunAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "question_set", "created_at", "finished_at", "offline")
    list_filter = ("offline",)
    search_fields = ("name", "question_set")
    readonly_fields = ("created_at", "updated_at", "finished_at", "grader_model", "offline")
    raw_id_fields = ("owner",)
    inlines = [EvaluationItemInline]


@admin.register(EvaluationItem)
class EvaluationItemAdmin(admin.ModelAdmin):
    list_display = ("run", "position", "status", "grade", "grader_cost_usd")
    list_filter = ("status", "grade")
    search_fields = ("question", "reference")
    raw_id_fields = ("run", "session")
