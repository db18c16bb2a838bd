"""Sessions, thoughts, sub-questions and syntheses: the database is the truth.

State changes are model methods that guard the current state. Time spent thinking is
accumulated by the worker per stored step (`active_seconds`), so pauses, restarts and dead
workers never count; `running_since` lets a page show the clock ticking in between.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.contrib.auth.models import User
from django.db import models, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from thinking.events import SessionEvent
from thinking.provider import pricing
from thinking.provider.capabilities import ThinkingSettings
from thinking.provider.parsing import question_digest

if TYPE_CHECKING:
    from thinking.provider.llm import Reply


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
    COST_CEILING = "cost_ceiling", "Cost ceiling reached"
    CONCLUDED = "concluded", "Concluded on request"
    CANCELLED = "cancelled", "Cancelled"
    ERROR = "error", "Error"


class ThinkingMode(models.TextChoices):
    AUTO = "auto", "Best for the model (adaptive, else manual, else off)"
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


class LeaseLost(Exception):
    """Another worker took the session over; this one must stop without writing."""


class Stopped(Exception):
    """The session was cancelled while a step was in flight."""


class Lap(Protocol):
    """Active time handed out in laps (the worker's meter, `thinking.deliberation.run.Meter`)."""

    def lap(self) -> float: ...


@dataclass
class Step:
    """One stored change to a session, opened by `ThinkingSession.step`: the row (locked and
    fresh), the field changes to apply with the checkpoint, and the events to publish once
    committed."""

    session: ThinkingSession
    changes: dict[str, Any] = field(default_factory=dict)
    events: list[SessionEvent] = field(default_factory=list)

    def update(self, **changes: Any) -> None:
        self.changes.update(changes)

    def add(self, **amounts: Any) -> None:
        """Add to counters of the session. The row is locked for the step, so the sum of the
        value read and the amount is what the UPDATE stores (and nothing is read back)."""
        for name, amount in amounts.items():
            self.changes[name] = self.changes.get(name, getattr(self.session, name)) + amount

    def record_calls(self, purpose: str, replies: Sequence[Reply]) -> None:
        """Each model call of `replies` as a row (a cut-off attempt was spent too), priced by
        the model that made it, and its tokens and cost on the session's counters and its
        usage per model (`usage_by_model`)."""
        session = self.session
        rows = []
        tally = session.usage_by_model
        spent = Decimal(0)
        unpriced = 0
        for call in (call for reply in replies for call in reply.attempts):
            model = call.model or session.model_id
            usage = call.usage
            tokens = (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
            )
            cost = pricing.call_cost(
                model,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
            )
            rows.append(
                ModelCall(
                    session_id=session.pk,
                    purpose=purpose,
                    model=model,
                    thinking_mode=call.thinking_mode,
                    stop_reason=call.stop_reason or "",
                    duration_ms=call.duration_ms,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cache_read_tokens=usage.cache_read_tokens,
                    cache_write_tokens=usage.cache_write_tokens,
                    cost_usd=cost,
                    content=call.content,
                )
            )
            tally = pricing.tallied(tally, model=model, purpose=purpose, tokens=tokens, cost=cost)
            if cost is None:
                unpriced += 1
            else:
                spent += cost
        ModelCall.objects.bulk_create(rows)
        if rows:
            self.update(usage_by_model=tally)
            self.add(cost_usd=spent, unpriced_calls=unpriced)
        if not replies:
            return
        usages = [reply.total_usage for reply in replies]
        truncated = sum(1 for reply in replies if reply.truncated)
        if truncated:
            self.add(truncated_replies=truncated)
        self.add_usage(
            input_tokens=sum(u.input_tokens for u in usages),
            output_tokens=sum(u.output_tokens for u in usages),
            cache_read_tokens=sum(u.cache_read_tokens for u in usages),
            cache_write_tokens=sum(u.cache_write_tokens for u in usages),
        )

    def add_usage(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int,
        cache_write_tokens: int,
    ) -> None:
        """Add to the session's token counters in the same UPDATE."""
        self.add(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
        )

    def announce(self, event: SessionEvent) -> None:
        """Publish this event once (and only if) the step commits."""
        self.events.append(event)


def _open_step(
    cls: type[ThinkingSession],
    pk: uuid.UUID | str,
    *,
    worker_id: str | None,
    meter: Lap | None,
    stop_on_cancel: bool,
    on_commit: Callable[[SessionEvent], None] | None,
    only: Sequence[str] = (),
) -> Iterator[Step]:
    """`ThinkingSession.step`'s body: the one door every write goes through."""
    with transaction.atomic():
        rows = cls.objects.select_for_update()
        if only:
            rows = rows.only("status", "worker_id", "revision", "active_seconds", *only)
        session = rows.get(pk=pk)
        if worker_id is not None and session.worker_id != worker_id:
            raise LeaseLost(pk)
        if stop_on_cancel and session.status == Status.CANCELLED:
            raise Stopped(pk)
        step = Step(session)
        yield step
        # The row stays locked until the commit, so new values are worked out from what was
        # read: the session object is the row as stored, with nothing to read back.
        now = timezone.now()
        changes: dict[str, Any] = {"revision": session.revision + 1}
        if worker_id is not None:
            changes["heartbeat_at"] = now
        if meter is not None:
            changes.update(active_seconds=session.active_seconds + meter.lap(), running_since=now)
        changes.update(step.changes)
        cls.objects.filter(pk=pk).update(**changes)
        # An expression a caller wrote (rare: the steps add with `Step.add`) is read back.
        computed = [name for name, value in changes.items() if hasattr(value, "resolve_expression")]
        for name, value in changes.items():
            if name not in computed:
                setattr(session, name, value)
        if computed:
            session.refresh_from_db(fields=computed)
        if on_commit is not None:
            for event in step.events:
                transaction.on_commit(partial(on_commit, event))


class SessionQuerySet(models.QuerySet["ThinkingSession"]):
    def visible_to(self, user: object) -> SessionQuerySet:
        """Sessions this user may see: their own, and those shared with one of their teams.
        Every page, API route and WebSocket looks sessions up through here."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        # Accepted memberships only: an invitation shows nothing of the team (issue 21).
        return self.filter(
            Q(owner=user)
            | Q(team__memberships__user=user, team__memberships__accepted_at__isnull=False)
        ).distinct()

    def runnable(self) -> SessionQuerySet:
        return self.filter(status__in=[Status.CREATED, Status.THINKING])

    def unclaimed_or_stale(self, *, now: datetime, lease_seconds: float) -> SessionQuerySet:
        stale = now - timedelta(seconds=lease_seconds)
        return self.runnable().filter(Q(worker_id="") | Q(heartbeat_at__lt=stale))


class SearchRecency(models.TextChoices):
    """How recent a session's web results must be (research/results.py RECENCY_DAYS)."""

    ANY = "", "Any time"
    DAY = "day", "The past day"
    WEEK = "week", "The past week"
    MONTH = "month", "The past month"
    YEAR = "year", "The past year"


class ThinkingSession(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="thinking_sessions"
    )
    # Shared with this team: its members can watch, pause, resume, steer and export it.
    team = models.ForeignKey(
        "accounts.Team",
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
    max_cost_usd = models.DecimalField(
        max_digits=10,
        decimal_places=4,
        null=True,
        blank=True,
        help_text="After this many US dollars (list prices) the session writes its final answer.",
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
    conclude_requested = models.BooleanField(
        default=False,
        help_text="A person asked for the answer now: the loop stops thinking and writes it.",
    )
    # How each thought reply was read: {"tags": n, "lines": n, "prose": n, "empty": n}.
    parse_routes = models.JSONField(default=dict, blank=True)

    # Research (#3). The plan: {"steps": [...], "current": i, "terms": [...], "web_queries":
    # [...], "memory_queries": [...], "source": "model" | "heuristic"}.
    plan = models.JSONField(default=dict, blank=True)
    # What people should know about the research: "web search is off", a failed query, ...
    research_notes = models.JSONField(default=list, blank=True)
    # The latest stage entry, the loop's or the model's: stage, label, message, step, confidence.
    progress = models.JSONField(default=dict, blank=True)
    # The tools its thought cycles offer the model (thinking/deliberation/tools.py `offered`).
    tools_enabled = models.BooleanField(
        default=True, help_text="Offer tools at all while it thinks (the ones chosen below)."
    )
    search_tool = models.BooleanField(
        default=True, help_text="Offer web and knowledge-base search (with research on)."
    )
    think_tool = models.BooleanField(
        default=True, help_text="Offer the think tool (a scratchpad) while it thinks."
    )
    progress_tool = models.BooleanField(
        default=True, help_text="Offer the progress tool (a status line for the page)."
    )
    # Citations [n] in answers that match no stored source: counted, not linked.
    unknown_citations = models.PositiveIntegerField(default=0)
    # Replies still cut off by max_tokens after one retry with more room (kept as parsed).
    truncated_replies = models.PositiveIntegerField(default=0)
    # Per search tool ("plan", "web_search", "memory_search"): searches, new sources, and
    # sources found again that already had a number.
    search_tally = models.JSONField(default=dict, blank=True)
    # Bumped on every stored change, so a reconnecting page knows whether it missed anything.
    revision = models.PositiveIntegerField(default=0)

    confidence_evolution = models.JSONField(default=list, blank=True)
    final_answer = models.TextField(blank=True)
    final_confidence = models.FloatField(null=True, blank=True)

    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    # Each call priced by its own model when it was stored (thinking/provider/pricing.py); calls of
    # a model without a price are counted instead.
    cost_usd = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    unpriced_calls = models.PositiveIntegerField(default=0)
    # Calls, tokens and cost per model and kind of call (pricing.tallied).
    usage_by_model = models.JSONField(default=dict, blank=True)

    # Set while the model provider is unavailable and the loop waits to try again.
    waiting_since = models.DateTimeField(null=True, blank=True)
    waiting_reason = models.CharField(max_length=300, blank=True)

    # Lease: which worker runs the session, and when it last said so.
    worker_id = models.CharField(max_length=100, blank=True, db_index=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    # The whole seed (#12). Research switches (seed 003's isDeepThinkMode / isWebSearchEnabled).
    research_enabled = models.BooleanField(
        default=True, help_text="Plan and search (knowledge base, and the web if on)."
    )
    web_enabled = models.BooleanField(default=True, help_text="Let research use web search.")
    # Its web searches (#72): the providers (empty: DEEPTHINK_WEB_SEARCH), the domains its
    # results must (or must not) be on, and how recent they must be.
    web_search = models.JSONField(
        default=list, blank=True, help_text="Web search providers; empty: the default."
    )
    include_domains = models.JSONField(default=list, blank=True)
    exclude_domains = models.JSONField(default=list, blank=True)
    search_recency = models.CharField(
        max_length=8, blank=True, choices=SearchRecency.choices, default=SearchRecency.ANY
    )
    # The language its thoughts, syntheses and answer are written in; empty: the question's.
    language = models.CharField(max_length=40, blank=True)
    # Stage entries recorded so far (each a `Stage` row; the newest 300 are served: stages.py).
    stage_count = models.PositiveIntegerField(default=0)
    # Format extraction problems per thought cycle: [{"cycle", "route", "errors"}] (signals.py).
    format_errors = models.JSONField(default=list, blank=True)
    # When the open sub-questions were last re-ranked (rerank.py).
    cycles_at_last_rerank = models.PositiveIntegerField(default=0)
    sources_at_last_rerank = models.PositiveIntegerField(default=0)
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

    # Set by the step that stored a cycle's thoughts (their count, read under the row lock),
    # so the loop needs no hop to count them; None on a row read any other way.
    thought_count: int | None = None

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
            end = min(now, self.clock_stops_at() or now)
            elapsed += max(0.0, (end - self.running_since).total_seconds())
        return min(elapsed, self.budget_seconds) if not self.is_finished else elapsed

    def clock_stops_at(self) -> datetime | None:
        """Nothing thinks while the provider is awaited or once the worker stops renewing its
        lease (it renews every heartbeat): the clock stands still from then, never runs on."""
        grace = timedelta(seconds=settings.DEEPTHINK_HEARTBEAT_SECONDS * 1.5)
        beat = self.heartbeat_at + grace if self.heartbeat_at else None
        stops = [t for t in (self.waiting_since, beat) if t is not None]
        return min(stops) if stops else None

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
        """US dollars at list prices, each call priced by its own model; None once a call
        had no known price (and, before the first call, when the session's model has none)."""
        if self.unpriced_calls:
            return None
        if not self.usage_by_model and pricing.price_for(self.model_id) is None:
            return None
        return float(self.cost_usd)

    @property
    def model_usage(self) -> list[tuple[str, pricing.Spent]]:
        """Calls, tokens and cost per model, by model id."""
        return pricing.by_model(self.usage_by_model)

    @property
    def thinking_settings(self) -> ThinkingSettings:
        return ThinkingSettings(
            mode=self.thinking_mode,
            budget_tokens=self.thinking_budget,
            effort=self.effort,
            max_tokens=self.max_tokens,
        )

    # --- the one door for writes ----------------------------------------------------

    @classmethod
    @contextmanager
    def step(
        cls,
        pk: uuid.UUID | str,
        *,
        worker_id: str | None = None,
        meter: Lap | None = None,
        stop_on_cancel: bool = True,
        on_commit: Callable[[SessionEvent], None] | None = None,
        only: Sequence[str] = (),
    ) -> Iterator[Step]:
        """Every write to a session and its rows goes through here, in one transaction.
        `only`: the fields the body reads, when it reads few (`QuerySet.only`: the locked read
        then skips the rest, and any other field is read when first used):

        lock the row; check the lease (`worker_id`: the worker that must hold it; None for a
        person, who holds none) and cancel (a cancelled session takes no more writes,
        unless `stop_on_cancel=False`); run the body, which adds rows and `step.update`s
        fields; then one UPDATE applies those changes with the checkpoint (active time from
        the `meter`, the heartbeat) and bumps the revision. Announced events are handed to
        `on_commit` after the commit; without it the caller publishes `step.events` itself
        once the block has exited (async code cannot publish from inside the transaction).
        """
        yield from _open_step(
            cls,
            pk,
            worker_id=worker_id,
            meter=meter,
            stop_on_cancel=stop_on_cancel,
            on_commit=on_commit,
            only=only,
        )

    # --- state changes requested by people (views, API, CLI, admin: thinking/people/actions.py) ---
    # Each goes through a step, so it is ordered with the worker's writes by the row lock:
    # whoever moves first wins and the other sees the new state.

    def _transition(
        self,
        action: str,
        allowed: tuple[str, ...],
        publish: Callable[[SessionEvent], None] | None = None,
        **changes: object,
    ) -> None:
        try:
            with type(self).step(self.pk, stop_on_cancel=False, on_commit=publish) as step:
                if step.session.status not in allowed:
                    raise IllegalTransition(step.session, action)
                step.update(**changes)
                finished = changes.get("status") in FINISHED
                step.announce(SessionEvent(self.pk, finished=finished))
        finally:
            self.refresh_from_db()

    # `publish` (e.g. `broadcast.publish_sync`) gets the change once it is committed.

    def pause(self, *, publish: Callable[[SessionEvent], None] | None = None) -> None:
        self._transition("pause", (Status.THINKING,), publish, status=Status.PAUSED)

    def resume(self, *, publish: Callable[[SessionEvent], None] | None = None) -> None:
        # The worker that paused released its lease; a fresh claim picks the session up.
        self._transition("resume", (Status.PAUSED,), publish, status=Status.THINKING)

    def conclude(self, *, publish: Callable[[SessionEvent], None] | None = None) -> None:
        """Write the answer now: the loop stops thinking (a call in flight is stopped) and
        writes its final answer from what it has. A paused session thinks again, straight to
        its answer; the worker that paused it let go, so a fresh claim picks it up."""
        self._transition(
            "conclude", self.STEERABLE, publish, status=Status.THINKING, conclude_requested=True
        )

    def cancel(self, *, publish: Callable[[SessionEvent], None] | None = None) -> None:
        self._transition(
            "cancel",
            (Status.CREATED, Status.THINKING, Status.PAUSED),
            publish,
            status=Status.CANCELLED,
            completion_reason=CompletionReason.CANCELLED,
            finished_at=timezone.now(),
            running_since=None,
        )

    # --- the lifecycle as the worker runs it -----------------------------------------
    # Each verb guards the current state and returns the field changes, which the step
    # applies together with its checkpoint in one UPDATE (see thinking/deliberation/steps.py).

    def begin(self, *, now: datetime) -> dict[str, Any]:
        """Move to `thinking` and start the clock."""
        if self.status not in (Status.CREATED, Status.THINKING):
            raise IllegalTransition(self, "begin")
        changes: dict[str, Any] = {"status": Status.THINKING, "running_since": now}
        if self.started_at is None:
            changes["started_at"] = now
        if self.next_synthesis_at <= 0:
            changes["next_synthesis_at"] = self.synthesis_interval_seconds
        return changes

    def complete(
        self, *, reason: str, answer: str, confidence: float, now: datetime
    ) -> dict[str, Any]:
        """The final answer is stored: done, and the lease let go."""
        if self.is_finished:
            raise IllegalTransition(self, "complete")
        return {
            "status": Status.COMPLETED,
            "completion_reason": reason,
            "final_answer": answer,
            "final_confidence": confidence,
            "finished_at": now,
            **self.release(),
        }

    def fail(self, *, message: str, now: datetime) -> dict[str, Any]:
        """The error in words; everything already stored stays."""
        if self.is_finished:
            raise IllegalTransition(self, "fail")
        return {
            "status": Status.FAILED,
            "completion_reason": CompletionReason.ERROR,
            "error_message": message[:2000],
            "finished_at": now,
            **self.stop(),
        }

    def stop(self) -> dict[str, Any]:
        """A pause or cancel seen at a step boundary: keep the time, stop the clock, let go."""
        return {**self.release(), "waiting_since": None, "waiting_reason": ""}

    def release(self) -> dict[str, Any]:
        """Let go of the lease (a worker shutting down): another worker continues at once."""
        return {"worker_id": "", "heartbeat_at": None, "running_since": None}

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

    def next_thought_sequence(self) -> int:
        """The number the next thought takes: thoughts are numbered 0..n-1 under the
        session's row lock, so this is also their count."""
        top = self.thoughts.aggregate(top=models.Max("sequence"))["top"]
        return 0 if top is None else top + 1

    STEERABLE = (Status.CREATED, Status.THINKING, Status.PAUSED)

    def steer(
        self,
        *,
        user: User | None,
        kind: str,
        text: str,
        publish: Callable[[SessionEvent], None] | None = None,
    ) -> Thought:
        """A person's hint (included in the next prompts) or sub-question (explored next, at
        top priority). Both are stored in the thought stream as theirs."""
        try:
            # The step's row lock orders this insert with the worker's, which takes it too
            # before numbering thoughts, so sequences stay unique and gapless.
            with type(self).step(self.pk, stop_on_cancel=False, on_commit=publish) as step:
                locked = step.session
                if locked.status not in self.STEERABLE:
                    raise IllegalTransition(locked, "steer")
                sub_question = None
                if kind == ThoughtType.QUESTION:
                    sub_question = SubQuestion.objects.create(
                        session=locked,
                        text=text,
                        priority=10,
                        why="Asked by a person",
                        added_by=user,
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
                step.announce(
                    SessionEvent(
                        self.pk, thoughts=(thought.sequence,), questions=sub_question is not None
                    )
                )
        finally:
            self.refresh_from_db()
        return thought


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
    # Its cycle's reply was cut off by max_tokens even after a retry: what parsed was kept.
    truncated = models.BooleanField(default=False)
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
        # The session log reads an epoch's thoughts and the last cycle on every model call
        # (transcript.py): by cycle, so its cost does not grow with the session. Every
        # thought cycle reads the newest hints (transcript.recent_hints), by type: without this
        # index it walked every thought of the session to find few or none.
        indexes = [
            models.Index(fields=["session", "cycle"], name="thought_session_cycle"),
            models.Index(fields=["session", "type", "sequence"], name="thought_session_type"),
            # The stream filter pages one sub-question's thoughts by sequence (keyset).
            models.Index(fields=["sub_question", "sequence"], name="thought_subq_sequence"),
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
    # The priority it was created with, and each re-ranking that moved it:
    # [{"from", "to", "why", "cycle", "at"}] (rerank.py).
    initial_priority = models.PositiveSmallIntegerField(null=True, blank=True)
    priority_changes = models.JSONField(default=list, blank=True)
    answer = models.TextField(blank=True, help_text="A short insight once explored.")
    created_at = models.DateTimeField(auto_now_add=True)
    # question_digest(text), set by save() and by the loop's own inserts: a new question's
    # duplicate is looked up by index, where reading every row's text grew with the session.
    text_key = models.CharField(max_length=32, blank=True, default="", editable=False)

    class Meta:
        ordering = ["explored", "-priority", "created_at", "id"]
        indexes = [
            models.Index(fields=["session", "explored", "-priority"]),
            models.Index(fields=["session", "text_key"], name="subquestion_text_key"),
        ]

    def __str__(self) -> str:
        return f"[{self.priority}] {self.text[:70]}"

    def save(self, **kwargs: Any) -> None:
        self.text_key = question_digest(self.text)
        fields = kwargs.get("update_fields")
        if fields is not None:
            fields = frozenset(fields)  # any iterable, as Django takes it: read once here
            kwargs["update_fields"] = fields | {"text_key"} if "text" in fields else fields
        super().save(**kwargs)


class Stage(models.Model):
    """One entry of a session's stage history (stages.py): {"stage", "label", "message",
    "at", "by", ...}. A row each, so a stage entered inserts one small row instead of
    rewriting the whole history on the session's row, which every step reads under its lock."""

    # No index of its own: the unique (session, sequence) index serves every lookup by session.
    session = models.ForeignKey(
        ThinkingSession, on_delete=models.CASCADE, related_name="stage_entries", db_index=False
    )
    sequence = models.PositiveIntegerField()  # 1, 2, ... per session: `stage_count` then
    entry = models.JSONField()

    class Meta:
        ordering = ["session", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["session", "sequence"], name="stage_seq_unique"),
        ]

    def __str__(self) -> str:
        entry = self.entry if isinstance(self.entry, dict) else {}
        return f"#{self.sequence} {entry.get('stage', '')}: {str(entry.get('message', ''))[:60]}"


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
    truncated = models.BooleanField(default=False, help_text="The reply was cut off.")
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
    # What it cost at its model's price when stored; null for a model without a price.
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
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
    # "passage:<id>" (or "item:<id>") for the knowledge base, the URL for the web: how
    # duplicates are spotted.
    key = models.CharField(max_length=2000)
    # What found it first: "plan" (the research plan's searches), "web_search" or
    # "memory_search" (the model's own tool calls).
    found_by = models.CharField(max_length=16, default="plan", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "number"]
        constraints = [
            models.UniqueConstraint(fields=["session", "number"], name="source_number_unique"),
            models.UniqueConstraint(fields=["session", "kind", "key"], name="source_key_unique"),
        ]

    def __str__(self) -> str:
        return f"[{self.number}] {self.title[:70]}"


class Verdict(models.TextChoices):
    SUPPORTED = "supported", "Supported"
    PARTIAL = "partial", "Partly supported"
    UNSUPPORTED = "unsupported", "Unsupported"
    UNCHECKED = "unchecked", "Not checked"


class CitationCheck(models.Model):
    """One cited claim of a synthesis, judged against the passage of the source it cites
    (thinking/deliberation/citations.py). `occurrence` says which citation of `number` in the text
    it is, so the page can mark that very citation."""

    synthesis = models.ForeignKey(
        Synthesis, on_delete=models.CASCADE, related_name="citation_checks"
    )
    number = models.PositiveIntegerField()
    occurrence = models.PositiveIntegerField(default=0)
    claim = models.TextField()
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    why = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["synthesis", "id"]

    def __str__(self) -> str:
        return f"[{self.number}] {self.verdict}: {self.claim[:60]}"


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
    # The webhook's `webhook-id` (Standard Webhooks): the same on every attempt, so a
    # receiver can tell a retry (same id, fresh timestamp) from a new event.
    message_id = models.UUIDField(default=uuid.uuid4, editable=False)
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


# --- Worker heartbeats (/healthz, config/health.py) -------------------------------------------


class WorkerHeartbeat(models.Model):
    """A worker process alive at `seen_at`: its supervisor beats every tick
    (thinking/deliberation/worker.py) and deletes the row when it stops. `/healthz` calls the
    workers healthy while one has beaten within the lease (DEEPTHINK_LEASE_SECONDS), the time after
    which a session's worker counts as gone too. A killed worker's row just goes stale; a
    starting worker prunes rows stale for a day."""

    worker_id = models.CharField(max_length=100, unique=True)
    seen_at = models.DateTimeField(db_index=True)

    PRUNE_AFTER = timedelta(days=1)

    def __str__(self) -> str:
        return f"{self.worker_id} at {self.seen_at:%Y-%m-%d %H:%M:%S}"

    @classmethod
    def beat(cls, worker_id: str) -> None:
        now = timezone.now()
        if cls.objects.filter(worker_id=worker_id).update(seen_at=now):
            return
        cls.objects.filter(seen_at__lt=now - cls.PRUNE_AFTER).delete()  # once per worker
        cls.objects.update_or_create(worker_id=worker_id, defaults={"seen_at": now})

    @classmethod
    def forget(cls, worker_id: str) -> None:
        cls.objects.filter(worker_id=worker_id).delete()

    @classmethod
    def last_seen(cls) -> datetime | None:
        """When the most recently seen worker beat (None: no worker is known)."""
        return cls.objects.aggregate(last=models.Max("seen_at"))["last"]
