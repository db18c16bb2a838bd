"""Sessions, thoughts, sub-questions and syntheses: the database is the truth.

State changes are model methods that guard the current state. Time spent thinking is
accumulated by the worker per stored step (`active_seconds`), so pauses, restarts and dead
workers never count; `running_since` lets a page show the clock ticking in between.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Max, Q
from django.urls import reverse
from django.utils import timezone

from . import pricing
from .capabilities import ThinkingSettings


class Status(models.TextChoices):
    CREATED = "created", "Created"
    THINKING = "thinking", "Thinking"
    PAUSED = "paused", "Paused"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class CompletionReason(models.TextChoices):
    BUDGET = "budget", "Time budget used"
    STOP_SIGNAL = "stop_signal", "Model signalled it was done"
    TOKEN_CEILING = "token_ceiling", "Token ceiling reached"
    CANCELLED = "cancelled", "Cancelled"
    ERROR = "error", "Error"


class ThinkingMode(models.TextChoices):
    OFF = "off", "Off"
    ADAPTIVE = "adaptive", "Adaptive (the model decides how much)"
    MANUAL = "manual", "Manual (a fixed thinking budget)"


class Effort(models.TextChoices):
    DEFAULT = "", "Model default"
    LOW = "low", "Low"
    MEDIUM = "medium", "Medium"
    HIGH = "high", "High"
    XHIGH = "xhigh", "Extra high"
    MAX = "max", "Max"


class FormatMode(models.TextChoices):
    STANDARD = "standard", "Standard: <think> and <interactive>"
    ENHANCED = "enhanced", "Enhanced: analysis, plan and reasoning"
    CUSTOM = "custom", "Custom tag spec"


FINISHED = (Status.COMPLETED, Status.FAILED, Status.CANCELLED)


class IllegalTransition(Exception):
    """A state change that the session's current status does not allow."""

    def __init__(self, session: ThinkingSession, action: str) -> None:
        self.status = session.status
        self.action = action
        super().__init__(
            f"Cannot {action} a session that is {session.get_status_display().lower()}."
        )


class SessionQuerySet(models.QuerySet["ThinkingSession"]):
    def visible_to(self, user: object) -> SessionQuerySet:
        """Sessions this user may see: their own, and those shared with one of their teams.
        Every page, API route and WebSocket looks sessions up through here."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(Q(owner=user) | Q(team__memberships__user=user)).distinct()

    def runnable(self) -> SessionQuerySet:
        return self.filter(status__in=[Status.CREATED, Status.THINKING])

    def unclaimed_or_stale(self, *, now: datetime, lease_seconds: float) -> SessionQuerySet:
        stale = now - timedelta(seconds=lease_seconds)
        return self.runnable().filter(Q(worker_id="") | Q(heartbeat_at__lt=stale))


class ThinkingSession(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="thinking_sessions"
    )
    # Shared with this team: its members can watch, pause, resume, steer and export it.
    team = models.ForeignKey(
        "research.Team",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="thinking_sessions",
    )
    question = models.TextField()
    budget_seconds = models.FloatField(help_text="Thinking time budget, in seconds of active time.")
    synthesis_interval_seconds = models.FloatField(
        help_text="A periodic synthesis after each interval of active thinking."
    )
    model_id = models.CharField(max_length=100)
    format_mode = models.CharField(
        max_length=16, choices=FormatMode.choices, default=FormatMode.ENHANCED
    )
    format_spec = models.JSONField(
        null=True, blank=True, help_text="The tag spec of a custom format (JSON)."
    )
    thinking_mode = models.CharField(
        max_length=16, choices=ThinkingMode.choices, default=ThinkingMode.OFF
    )
    thinking_budget = models.PositiveIntegerField(
        null=True, blank=True, help_text="Thinking budget tokens, for manual thinking."
    )
    effort = models.CharField(max_length=8, choices=Effort.choices, blank=True)
    max_tokens = models.PositiveIntegerField(default=4096, help_text="Per model call.")
    token_ceiling = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="After this many tokens the session goes to its final synthesis.",
    )

    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.CREATED, db_index=True
    )
    completion_reason = models.CharField(
        max_length=16, choices=CompletionReason.choices, blank=True
    )
    completion_note = models.TextField(blank=True, help_text="Why it ended, in words.")
    error_message = models.TextField(blank=True)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Committed active thinking time, and when the uncommitted running stretch began.
    active_seconds = models.FloatField(default=0.0)
    running_since = models.DateTimeField(null=True, blank=True)

    # Checkpoint of the loop, committed with every step.
    cycles = models.PositiveIntegerField(default=0)
    thoughts_at_last_questions = models.PositiveIntegerField(default=0)
    next_synthesis_at = models.FloatField(default=0.0)
    focus = models.TextField(blank=True, help_text="What the loop is thinking about now.")
    stop_requested = models.BooleanField(
        default=False, help_text="The model signalled that its understanding is sufficient."
    )
    # How each thought reply was read: {"tags": n, "lines": n, "prose": n, "empty": n}.
    parse_routes = models.JSONField(default=dict, blank=True)

    # Research (#3). The plan: {"steps": [...], "current": i, "terms": [...], "web_queries":
    # [...], "memory_queries": [...], "source": "model" | "heuristic"}.
    plan = models.JSONField(default=dict, blank=True)
    # What people should know about the research: "web search is off", a failed query, ...
    research_notes = models.JSONField(default=list, blank=True)
    # The latest `progress` the model reported: stage, label, message, step, confidence.
    progress = models.JSONField(default=dict, blank=True)
    tools_enabled = models.BooleanField(
        default=True, help_text="Let the model search the web and memory while it thinks."
    )
    think_tool = models.BooleanField(
        default=True, help_text="Offer the think tool (a scratchpad) while it thinks."
    )
    # Citations [n] in answers that match no stored source: counted, not linked.
    unknown_citations = models.PositiveIntegerField(default=0)
    # Bumped on every stored change, so a reconnecting page knows whether it missed anything.
    revision = models.PositiveIntegerField(default=0)

    confidence_evolution = models.JSONField(default=list, blank=True)
    final_answer = models.TextField(blank=True)
    final_confidence = models.FloatField(null=True, blank=True)

    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)

    # Set while the model provider is unavailable and the loop waits to try again.
    waiting_since = models.DateTimeField(null=True, blank=True)
    waiting_reason = models.CharField(max_length=300, blank=True)

    # Lease: which worker runs the session, and when it last said so.
    worker_id = models.CharField(max_length=100, blank=True, db_index=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    # A follow-up: its prompts carry the parent's answer, last synthesis and sources, frozen
    # at creation in `parent_context` so the cached prompt prefix stays the same (#19).
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    parent_context = models.TextField(blank=True)
    # Hearing when it ends (#19): a mail to the owner, and/or a signed POST to a webhook.
    notify_email = models.BooleanField(default=False)
    webhook_url = models.URLField(max_length=2000, blank=True)

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"])]

    def __str__(self) -> str:
        return self.question[:80]

    def get_absolute_url(self) -> str:
        return reverse("session-detail", args=[self.pk])

    def is_owned_by(self, user: object) -> bool:
        """Only the owner may cancel; teammates may watch, pause, resume, steer, export."""
        return getattr(user, "pk", None) == self.owner_id

    # --- reading ---------------------------------------------------------------------

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def is_live(self) -> bool:
        return self.status in (Status.CREATED, Status.THINKING)

    def elapsed_seconds(self, now: datetime | None = None) -> float:
        """Active thinking time, including the stretch running since the last stored step."""
        elapsed = self.active_seconds
        if self.status == Status.THINKING and self.running_since is not None:
            now = now or timezone.now()
            elapsed += max(0.0, (now - self.running_since).total_seconds())
        return min(elapsed, self.budget_seconds) if not self.is_finished else elapsed

    def remaining_seconds(self, now: datetime | None = None) -> float:
        if self.is_finished:
            return 0.0
        return max(0.0, self.budget_seconds - self.elapsed_seconds(now))

    def progress_percent(self, now: datetime | None = None) -> float:
        if self.status == Status.COMPLETED:
            return 100.0
        if self.budget_seconds <= 0:
            return 0.0
        return min(100.0, 100.0 * self.elapsed_seconds(now) / self.budget_seconds)

    @property
    def budget_exhausted(self) -> bool:
        return self.active_seconds >= self.budget_seconds

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    @property
    def over_token_ceiling(self) -> bool:
        return self.token_ceiling is not None and self.total_tokens >= self.token_ceiling

    @property
    def estimated_cost(self) -> float | None:
        """US dollars, from the model's list prices; None for a model without a known price."""
        return pricing.estimate(
            self.model_id,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cache_read_tokens=self.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens,
        )

    @property
    def thinking_settings(self) -> ThinkingSettings:
        return ThinkingSettings(
            mode=self.thinking_mode,
            budget_tokens=self.thinking_budget,
            effort=self.effort,
            max_tokens=self.max_tokens,
        )

    # --- state changes requested by people (views, CLI, admin) ------------------------
    # Each is one conditional UPDATE, so a worker changing the status at the same moment
    # cannot be overwritten: whoever moves first wins and the other sees the new state.

    def _transition(self, action: str, allowed: tuple[str, ...], **changes: object) -> None:
        changes.setdefault("revision", F("revision") + 1)
        updated = type(self).objects.filter(pk=self.pk, status__in=allowed).update(**changes)
        self.refresh_from_db()
        if not updated:
            raise IllegalTransition(self, action)

    def pause(self) -> None:
        self._transition("pause", (Status.THINKING,), status=Status.PAUSED)

    def resume(self) -> None:
        # The worker that paused released its lease; a fresh claim picks the session up.
        self._transition("resume", (Status.PAUSED,), status=Status.THINKING)

    def cancel(self) -> None:
        self._transition(
            "cancel",
            (Status.CREATED, Status.THINKING, Status.PAUSED),
            status=Status.CANCELLED,
            completion_reason=CompletionReason.CANCELLED,
            finished_at=timezone.now(),
            running_since=None,
        )

    # --- state changes made by the worker ------------------------------------------

    @classmethod
    def claim(cls, pk: uuid.UUID | str, *, worker_id: str, lease_seconds: float) -> bool:
        """Take the lease on a runnable session that no live worker holds. Atomic."""
        now = timezone.now()
        updated = (
            cls.objects.filter(pk=pk)
            .unclaimed_or_stale(now=now, lease_seconds=lease_seconds)
            .update(worker_id=worker_id, heartbeat_at=now)
        )
        return bool(updated)

    @classmethod
    def renew(cls, pks: list[uuid.UUID], *, worker_id: str) -> int:
        return cls.objects.filter(pk__in=pks, worker_id=worker_id).update(
            heartbeat_at=timezone.now()
        )

    def release(self, *, worker_id: str) -> None:
        type(self).objects.filter(pk=self.pk, worker_id=worker_id).update(
            worker_id="", heartbeat_at=None
        )

    def next_thought_sequence(self) -> int:
        top = self.thoughts.aggregate(top=Max("sequence"))["top"]
        return 0 if top is None else top + 1

    STEERABLE = (Status.CREATED, Status.THINKING, Status.PAUSED)

    def steer(self, *, user: object, kind: str, text: str) -> Thought:
        """A person's hint (included in the next prompts) or sub-question (explored next, at
        top priority). Both are stored in the thought stream as theirs."""
        if self.status not in self.STEERABLE:
            raise IllegalTransition(self, "steer")
        with transaction.atomic():
            # The row lock orders this insert with the worker's, which also takes it before
            # numbering thoughts, so sequences stay unique and gapless.
            locked = type(self).objects.select_for_update().get(pk=self.pk)
            sub_question = None
            if kind == ThoughtType.QUESTION:
                sub_question = SubQuestion.objects.create(
                    session=locked, text=text, priority=10, why="Asked by a person", added_by=user
                )
            thought = Thought.objects.create(
                session=locked,
                sequence=locked.next_thought_sequence(),
                cycle=locked.cycles,
                text=text,
                type=kind,
                confidence=1.0,
                time_offset_seconds=round(locked.elapsed_seconds(), 2),
                sub_question=sub_question,
            )
            type(self).objects.filter(pk=self.pk).update(revision=F("revision") + 1)
        self.refresh_from_db()
        return thought

    def next_synthesis_sequence(self) -> int:
        top = self.syntheses.aggregate(top=Max("sequence"))["top"]
        return 0 if top is None else top + 1


class ThoughtType(models.TextChoices):
    EXPLORATION = "exploration", "Exploration"
    CRITIQUE = "critique", "Critique"
    CONNECTION = "connection", "Connection"
    INSIGHT = "insight", "Insight"
    # Written by the model with the think tool: internal, shown in a collapsible scratchpad.
    SCRATCHPAD = "scratchpad", "Scratchpad"
    # Steering by a person: a hint for the next prompts, or the sub-question they added.
    HINT = "hint", "Your hint"
    QUESTION = "question", "Your question"


class ThoughtQuerySet(models.QuerySet["Thought"]):
    def for_session(self, session: ThinkingSession) -> ThoughtQuerySet:
        return self.filter(session=session)

    def after(self, sequence: int) -> ThoughtQuerySet:
        return self.filter(sequence__gt=sequence)


class Thought(models.Model):
    session = models.ForeignKey(ThinkingSession, on_delete=models.CASCADE, related_name="thoughts")
    sequence = models.PositiveIntegerField()
    cycle = models.PositiveIntegerField(default=0, help_text="The loop cycle that produced it.")
    text = models.TextField()
    type = models.CharField(max_length=16, choices=ThoughtType.choices)
    # The structured parts of the reply it came from: analysis / plan / reasoning, ...
    parts = models.JSONField(default=dict, blank=True)
    # The model's own (summarized) thinking before the reply, on the cycle's first thought.
    reasoning = models.TextField(blank=True)
    confidence = models.FloatField()
    time_offset_seconds = models.FloatField(help_text="Active thinking time when it was stored.")
    sub_question = models.ForeignKey(
        "SubQuestion", null=True, blank=True, on_delete=models.SET_NULL, related_name="thoughts"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ThoughtQuerySet.as_manager()

    class Meta:
        ordering = ["session", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["session", "sequence"], name="thought_seq_unique"),
        ]

    def __str__(self) -> str:
        return f"#{self.sequence} {self.type}: {self.text[:60]}"


class SubQuestion(models.Model):
    session = models.ForeignKey(
        ThinkingSession, on_delete=models.CASCADE, related_name="sub_questions"
    )
    text = models.TextField()
    priority = models.PositiveSmallIntegerField()
    why = models.TextField(blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    # Asked by a person watching: it goes to the front of the queue.
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    explored = models.BooleanField(default=False)
    explored_at = models.DateTimeField(null=True, blank=True)
    answer = models.TextField(blank=True, help_text="A short insight once explored.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["explored", "-priority", "created_at", "id"]
        indexes = [models.Index(fields=["session", "explored", "-priority"])]

    def __str__(self) -> str:
        return f"[{self.priority}] {self.text[:70]}"


class Synthesis(models.Model):
    session = models.ForeignKey(ThinkingSession, on_delete=models.CASCADE, related_name="syntheses")
    sequence = models.PositiveIntegerField()
    text = models.TextField()
    key_insights = models.JSONField(default=list, blank=True)
    confidence = models.FloatField()
    remaining_questions = models.JSONField(default=list, blank=True)
    time_offset_seconds = models.FloatField()
    is_final = models.BooleanField(default=False)
    reasoning = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "sequence"]
        verbose_name_plural = "syntheses"
        constraints = [
            models.UniqueConstraint(fields=["session", "sequence"], name="synthesis_seq_unique"),
        ]

    def __str__(self) -> str:
        return (
            f"{'Final' if self.is_final else 'Synthesis'} #{self.sequence} ({self.confidence:.2f})"
        )


class ModelCall(models.Model):
    """One call to the model, for usage accounting and inspection. `content` is the assistant
    message exactly as streamed, signatures included: it never leaves the server (not shown
    in pages, the admin, the API or exports)."""

    session = models.ForeignKey(
        ThinkingSession, on_delete=models.CASCADE, related_name="model_calls"
    )
    purpose = models.CharField(max_length=16)  # thoughts / questions / synthesis / final
    model = models.CharField(max_length=100)
    thinking_mode = models.CharField(max_length=16, default="off")
    stop_reason = models.CharField(max_length=32, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    content = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "id"]

    def __str__(self) -> str:
        return f"{self.purpose} ({self.input_tokens} in / {self.output_tokens} out)"


class SourceKind(models.TextChoices):
    WEB = "web", "Web"
    MEMORY = "memory", "Knowledge base"


class Source(models.Model):
    """Evidence a session found, cited as [number] in its syntheses and answer."""

    session = models.ForeignKey(ThinkingSession, on_delete=models.CASCADE, related_name="sources")
    number = models.PositiveIntegerField(help_text="The citation number, stable for the session.")
    kind = models.CharField(max_length=8, choices=SourceKind.choices)
    title = models.CharField(max_length=500)
    url = models.URLField(max_length=2000, blank=True)
    snippet = models.TextField(blank=True)
    score = models.FloatField(default=0.0)
    query = models.TextField(blank=True, help_text="The query that found it.")
    # A knowledge-base item's id, or the URL for the web: how duplicates are spotted.
    key = models.CharField(max_length=2000)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "number"]
        constraints = [
            models.UniqueConstraint(fields=["session", "number"], name="source_number_unique"),
            models.UniqueConstraint(fields=["session", "kind", "key"], name="source_key_unique"),
        ]

    def __str__(self) -> str:
        return f"[{self.number}] {self.title[:70]}"


class ApiToken(models.Model):
    """A personal API token. Only a hash is stored; the token is shown once, at creation."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, help_text="The first characters, to recognise it.")
    hashed = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


# --- think longer, hear when it ends (#19) -----------------------------------------------


class Extension(models.Model):
    """A finished session given more time: counted by the hourly limit, shown on the page."""

    session = models.ForeignKey(
        ThinkingSession, on_delete=models.CASCADE, related_name="extensions"
    )
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    minutes = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["session", "created_at"]

    def __str__(self) -> str:
        return f"+{self.minutes:g} min"


class MailChoice(models.TextChoices):
    LONG = "long", "For sessions of 10 minutes or more"
    ALWAYS = "always", "For every session"
    NEVER = "never", "Never"


class NotificationPreference(models.Model):
    """A person's default for mail when their sessions end."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preference"
    )
    mail = models.CharField(max_length=8, choices=MailChoice.choices, default=MailChoice.LONG)

    def __str__(self) -> str:
        return f"{self.user}: {self.get_mail_display()}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class Delivery(models.Model):
    """A notification to send (a mail or a webhook POST), stored so it survives restarts;
    a worker's sweep sends what is due and retries with backoff."""

    session = models.ForeignKey(
        ThinkingSession, on_delete=models.CASCADE, related_name="deliveries"
    )
    kind = models.CharField(max_length=8)  # mail / webhook
    target = models.CharField(max_length=2000, help_text="The address or URL.")
    body = models.TextField(help_text="The webhook's JSON exactly as signed, or the mail text.")
    subject = models.CharField(max_length=300, blank=True)
    status = models.CharField(
        max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_at = models.DateTimeField(default=timezone.now, db_index=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.kind} to {self.target[:60]} ({self.status})"
