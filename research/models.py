"""The knowledge base and the search cache.

Full-text search is over passages and is not an ORM field: on SQLite an FTS5 table kept in
step by triggers, on PostgreSQL a stored generated `tsvector` column with a GIN index (both
made in migration 0007, each only on its own database). `research/memory.py` is the only
module that queries them.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from accounts.models import Team


class KnowledgeSource(models.TextChoices):
    """How a knowledge item got here (not a session's cited source: that is thinking's)."""

    NOTE = "note", "Note"
    UPLOAD = "upload", "Upload"
    IMPORT = "import", "Import"
    SESSION = "session", "Session"


class KnowledgeItemQuerySet(models.QuerySet["KnowledgeItem"]):
    def visible_to(self, user: object) -> KnowledgeItemQuerySet:
        """Items this user may see: their own and those shared with one of their teams.
        Every view looks items up through it."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(models.Q(owner=user) | models.Q(team__in=Team.objects.of(user)))


class KnowledgeItem(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="knowledge_items"
    )
    # Shared with this team (its members see it and their sessions search it); else private.
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="knowledge_items"
    )
    title = models.CharField(max_length=300)
    body = models.TextField()
    url = models.URLField(max_length=2000, blank=True)
    source = models.CharField(
        max_length=16, choices=KnowledgeSource.choices, default=KnowledgeSource.NOTE
    )
    # Where the item came from (an imported file's path, "session:<uuid>"), so adding the
    # same thing again updates the item instead of duplicating it. Empty for notes.
    origin = models.CharField(max_length=1000, blank=True)
    # A hash of the cleaned text (knowledge.content_digest): the same text is stored once per
    # owner and team.
    digest = models.CharField(max_length=64, blank=True, editable=False)
    # What a person should know about how a file was read ("Truncated at 5,000 passages",
    # pages left out, the parser's warnings), one sentence each.
    notes = models.JSONField(default=list, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = KnowledgeItemQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="knowledge_owner_created"),
            models.Index(fields=["owner", "origin"], name="knowledge_owner_origin"),
            models.Index(fields=["owner", "digest"], name="knowledge_owner_digest"),
        ]

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("knowledge-detail", args=[self.pk])


class Passage(models.Model):
    """A part of a knowledge item, with the page or heading it sits under: what search
    results and citations point to, so a long document is cited by the part that says it."""

    item = models.ForeignKey(KnowledgeItem, on_delete=models.CASCADE, related_name="passages")
    # The item's title, copied so each passage's full-text index holds it (a title hit ranks
    # every passage of the item; the best of them is the one whose text matches too).
    # knowledge.replace_passages writes it whenever the item changes.
    title = models.CharField(max_length=300, blank=True, default="", editable=False)
    position = models.PositiveIntegerField()
    heading = models.CharField(max_length=300, blank=True)
    page = models.PositiveIntegerField(null=True, blank=True)
    text = models.TextField()

    class Meta:
        ordering = ["item", "position"]
        constraints = [
            models.UniqueConstraint(fields=["item", "position"], name="passage_position_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.item_id} #{self.position} {self.locator}"

    @property
    def locator(self) -> str:
        """Where in the document it is: "p. 3", "§ Results", "p. 3 · § Results"."""
        parts = [f"p. {self.page}"] if self.page else []
        if self.heading:
            parts.append(f"§ {self.heading}")
        return " · ".join(parts)


class SearchCacheQuerySet(models.QuerySet["SearchCache"]):
    def fresh(self, now: datetime | None = None) -> SearchCacheQuerySet:
        return self.filter(expires_at__gt=now or timezone.now())

    def expired(self, now: datetime | None = None) -> SearchCacheQuerySet:
        return self.filter(expires_at__lte=now or timezone.now())


class SearchCache(models.Model):
    """Results of one search, kept for a while so an identical search costs nothing.

    `key` hashes the kind, the scope ("user:5"; later "team:3"), the normalised query and the
    options, so one scope never sees another's queries or results.
    """

    key = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=16, default="web")
    scope = models.CharField(max_length=100, db_index=True)
    query = models.TextField()
    options = models.JSONField(default=dict)
    results = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    objects = SearchCacheQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "search cache entry"
        verbose_name_plural = "search cache"

    def __str__(self) -> str:
        return f"{self.kind}: {self.query[:80]}"

    @property
    def result_count(self) -> int:
        return len(self.results) if isinstance(self.results, list) else 0

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()
