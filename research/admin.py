from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .knowledge import replace_passages
from .models import KnowledgeItem, Passage, SearchCache


class PassageInline(admin.TabularInline):
    """Read-only: passages are rebuilt from the document whenever it changes."""

    model = Passage
    fields = ("position", "page", "heading", "text")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(KnowledgeItem)
class KnowledgeItemAdmin(admin.ModelAdmin):
    list_display = ("title", "owner", "source", "created_at", "updated_at")
    list_filter = ("source", "owner")
    search_fields = ("title", "body", "url", "owner__username")
    list_select_related = ("owner",)
    raw_id_fields = ("owner",)
    date_hierarchy = "created_at"
    readonly_fields = ("created_at", "updated_at")
    fields = ("owner", "title", "body", "url", "source", "origin", "created_at", "updated_at")
    inlines = (PassageInline,)

    def save_model(self, request: HttpRequest, obj: KnowledgeItem, form: Any, change: bool) -> None:
        """An edited title or text is what search finds at once: the passages (which carry
        both) are rebuilt from it."""
        super().save_model(request, obj, form, change)
        if not change or {"title", "body"} & set(form.changed_data):
            cut = [note for note in replace_passages(obj) if note not in obj.notes]
            if cut:
                obj.notes = [*obj.notes, *cut]
                obj.save(update_fields=["notes"])


@admin.register(SearchCache)
class SearchCacheAdmin(admin.ModelAdmin):
    """Read-only: rows are written by searches. Deleting one makes the next search fresh."""

    list_display = ("query", "kind", "scope", "result_count", "created_at", "expires_at", "expired")
    list_filter = ("kind",)
    search_fields = ("query", "scope")
    date_hierarchy = "created_at"

    @admin.display(boolean=True, description="Expired")
    def expired(self, entry: SearchCache) -> bool:
        return entry.is_expired

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
