"""Running an evaluation: each question becomes a real session started through people's
actions (`thinking.people.actions.start`: the start form, its limits and ceilings), run in this
process as `manage.py think` runs one (`actions.think_here`), then graded.

Resuming: a run is found by its name. Graded questions are kept; a question whose session
was interrupted thinks on from where it stopped; one whose session completed but was not
graded is only graded; one that failed is asked again.

The dollar ceiling: before each question starts, what is left of the ceiling (minus what the
sessions still running may spend) is shared among the questions not yet started, and that
share is the session's own cost ceiling (it writes its answer within it). The run stops
starting questions once too little is left; it can be resumed with a higher ceiling.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from thinking.events import SessionEvent
from thinking.models import Status, ThinkingSession
from thinking.page import broadcast
from thinking.people import actions
from thinking.provider.llm import LLM
from thinking.web.forms import StartSessionForm

from . import grading
from .models import EvaluationItem, EvaluationRun, ItemStatus
from .questions import Question

GRADER_RESERVE = Decimal("0.02")  # kept back per question for its grading
MIN_SESSION_DOLLARS = Decimal("0.05")  # below this share a session is not started


class RunError(ValueError):
    """The run cannot start or resume as asked (said in words)."""


@dataclass(frozen=True)
class Options:
    minutes: float
    model: str = ""
    web: bool = True
    research: bool = True
    concurrency: int = 1

    def as_json(self) -> dict[str, Any]:
        return {
            "minutes": self.minutes,
            "model": self.model,
            "web": self.web,
            "research": self.research,
            "concurrency": self.concurrency,
        }

    @classmethod
    def of(cls, stored: dict[str, Any]) -> Options:
        return cls(
            minutes=float(stored["minutes"]),
            model=str(stored.get("model") or ""),
            web=bool(stored.get("web", True)),
            research=bool(stored.get("research", True)),
            concurrency=int(stored.get("concurrency") or 1),
        )


def is_local_server() -> bool:
    """The model is served from this machine (the fake Claude server, or a local model)."""
    host = urlsplit(settings.ANTHROPIC_BASE_URL or "").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_run(
    *,
    name: str,
    owner: Any,
    question_set: str,
    questions: Sequence[Question],
    options: Options,
    max_dollars: Decimal | None,
    default_dollars: Decimal,
) -> tuple[EvaluationRun, bool]:
    """The run named `name`, created with its items, or found again (then its own stored
    options are kept, the items up to `questions` are added, and a given ceiling replaces
    its own). (run, resumed)."""
    with transaction.atomic():
        run = EvaluationRun.objects.select_for_update().filter(name=name).first()
        resumed = run is not None
        if run is None:
            run = EvaluationRun.objects.create(
                name=name,
                owner=owner,
                question_set=question_set,
                options=options.as_json(),
                max_dollars=max_dollars if max_dollars is not None else default_dollars,
                offline=is_local_server(),
            )
        else:
            if run.owner_id != owner.pk:
                raise RunError(f"The run {name!r} belongs to {run.owner}; choose another name.")
            if run.question_set != question_set:
                raise RunError(
                    f"The run {name!r} asks the set {run.question_set!r}, not {question_set!r}."
                )
            if max_dollars is not None:
                run.max_dollars = max_dollars
            run.finished_at = None
            run.stop_reason = ""
            run.save(update_fields=["max_dollars", "finished_at", "stop_reason", "updated_at"])
        have = set(run.items.values_list("position", flat=True))
        EvaluationItem.objects.bulk_create(
            EvaluationItem(run=run, position=q.position, question=q.question, reference=q.reference)
            for q in questions
            if q.position not in have
        )
    return run, resumed


@dataclass
class Progress:
    total: int
    done: int = 0
    correct: int = 0
    spent: Decimal = Decimal(0)
    last: str = ""


@dataclass
class Runner:
    run: EvaluationRun
    positions: Sequence[int]  # the questions this invocation covers
    report: Callable[[Progress], None] = lambda progress: None
    reserved: dict[int, Decimal] = field(default_factory=dict)  # item id -> its session's cap
    stop_reason: str = ""

    # -- database (sync; called through sync_to_async) --------------------------------

    def _todo(self) -> list[EvaluationItem]:
        return list(
            self.run.items.filter(position__in=self.positions)
            .exclude(status=ItemStatus.GRADED)
            .select_related("session")
        )

    def _progress(self) -> Progress:
        items = self.run.items.filter(position__in=self.positions)
        return Progress(
            total=items.count(),
            done=items.filter(status=ItemStatus.GRADED).count(),
            correct=items.filter(grade="correct").count(),
            spent=self.run.spent(),
        )

    def _share(self, item: EvaluationItem) -> Decimal | None:
        """This question's cost ceiling, or None when the run's ceiling is reached."""
        reserved = sum(self.reserved.values(), Decimal(0))
        running = ThinkingSession.objects.filter(
            evaluation_items__pk__in=list(self.reserved)
        ).aggregate(total=Sum("cost_usd"))["total"] or Decimal(0)
        spent = self.run.spent() - running  # what the running ones spend is in `reserved`
        unstarted = (
            self.run.items.filter(position__in=self.positions)
            .exclude(status=ItemStatus.GRADED)
            .exclude(pk__in=list(self.reserved))
            .count()
        )
        left = self.run.max_dollars - spent - reserved - GRADER_RESERVE * max(1, unstarted)
        share = (left / max(1, unstarted)).quantize(Decimal("0.0001"), rounding=ROUND_DOWN)
        if share < MIN_SESSION_DOLLARS:
            self.stop_reason = (
                f"The run's ceiling of ${self.run.max_dollars} is reached (${spent:.2f} spent, "
                f"${reserved:.2f} held by sessions still running); resume with a higher "
                "--max-dollars to go on."
            )
            return None
        return share

    def _start(self, item: EvaluationItem, cap: Decimal) -> ThinkingSession | str:
        options = Options.of(self.run.options)
        form = StartSessionForm(
            user=self.run.owner,
            data={
                "question": item.question,
                "minutes": options.minutes,
                "model": options.model,
                "max_cost_usd": str(cap),
                "research": "on" if options.research else "off",
                "web": "on" if options.web else "off",
                "notify": "false",
            },
        )
        # Run here, in this process (as `manage.py think`): no doorbell for another worker.
        session = actions.start(form, owner=self.run.owner, doorbell=False)
        if session is None:
            return "; ".join(
                f"{'' if k == '__all__' else k + ': '}{' '.join(map(str, v))}"
                for k, v in form.errors.items()
            )
        earlier = item.session
        if earlier is not None:  # a failed attempt: its cost stays counted in the run
            item.earlier_cost_usd += earlier.cost_usd
        item.session = session
        item.status = ItemStatus.THINKING
        item.error = ""
        item.save(update_fields=["session", "status", "error", "earlier_cost_usd"])
        return session

    def _fail(self, item: EvaluationItem, error: str) -> None:
        item.status = ItemStatus.FAILED
        item.error = error[:2000]
        item.save(update_fields=["status", "error"])

    def _store_grade(self, item: EvaluationItem, graded: grading.Graded) -> None:
        item.grader_input_tokens += graded.input_tokens
        item.grader_output_tokens += graded.output_tokens
        item.grader_cost_usd += graded.cost_usd
        if graded.grade:
            item.grade, item.grader_why, item.error = graded.grade, graded.why, ""
            item.status = ItemStatus.GRADED
            item.graded_at = timezone.now()
        else:
            item.status, item.error = ItemStatus.FAILED, graded.error
        item.save()
        if graded.model and self.run.grader_model != graded.model:
            self.run.grader_model = graded.model
            self.run.save(update_fields=["grader_model", "updated_at"])

    def _finish(self) -> None:
        self.run.stop_reason = self.stop_reason
        left = self.run.items.exclude(status=ItemStatus.GRADED).exists()
        self.run.finished_at = None if left else timezone.now()
        self.run.save(update_fields=["stop_reason", "finished_at", "updated_at"])

    # -- the run ----------------------------------------------------------------------

    async def execute(self) -> None:
        todo = await sync_to_async(self._todo)()
        options = Options.of(self.run.options)
        gate = asyncio.Semaphore(max(1, options.concurrency))
        grader = LLM.from_settings()
        progress = await sync_to_async(self._progress)()
        self.report(progress)

        async def one(item: EvaluationItem) -> None:
            async with gate:
                if self.stop_reason:
                    return
                await self._answer(item, grader)
                progress = await sync_to_async(self._progress)()
                progress.last = f"#{item.position} {item.grade or item.status}"
                self.report(progress)

        try:
            await asyncio.gather(*(one(item) for item in todo))
        finally:
            await grader.close()
            await sync_to_async(self._finish)()

    async def _answer(self, item: EvaluationItem, grader: LLM) -> None:
        session = item.session
        if session is not None:
            await sync_to_async(session.refresh_from_db)()
        if session is None or session.status in (Status.FAILED, Status.CANCELLED, Status.PAUSED):
            cap = await sync_to_async(self._share)(item)
            if cap is None:
                return
            started = await sync_to_async(self._start)(item, cap)
            if isinstance(started, str):
                await sync_to_async(self._fail)(item, f"not started: {started}")
                return
            session = started
            self.reserved[item.pk] = cap
        if session.status != Status.COMPLETED:
            try:
                claimed = await actions.think_here(session, publish=_publish)
            finally:
                self.reserved.pop(item.pk, None)
            await sync_to_async(session.refresh_from_db)()
            if not claimed:
                await sync_to_async(self._fail)(item, "another worker holds its session")
                return
        if session.status != Status.COMPLETED:
            await sync_to_async(self._fail)(
                item, f"session {session.get_status_display().lower()}: {session.error_message}"
            )
            return
        graded = await grading.grade(
            grader,
            question=item.question,
            reference=item.reference,
            answer=session.final_answer,
            main_model=session.model_id,
        )
        await sync_to_async(self._store_grade)(item, graded)


async def _publish(event: SessionEvent) -> None:
    if settings.REDIS_URL:  # pages watching through other processes
        await broadcast.publish(event)
