from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from fakes.anthropic_server import Reply
from thinking.deliberation import loop
from thinking.models import IllegalTransition, Status, Stopped, ThinkingSession, Thought
from thinking.provider.llm import LLM


@pytest.mark.django_db
def test_elapsed_time_ticks_only_while_thinking(make_session: Any):
    start = timezone.now()
    with time_machine.travel(start, tick=False) as traveller:
        session = make_session(
            status=Status.THINKING, active_seconds=10.0, running_since=start, budget_seconds=60
        )
        traveller.shift(timedelta(seconds=5))
        assert session.elapsed_seconds() == pytest.approx(15)
        assert session.remaining_seconds() == pytest.approx(45)
        assert session.progress_percent() == pytest.approx(25)

        session.pause()
        traveller.shift(timedelta(hours=3))  # paused time never counts
        session.status = Status.PAUSED
        assert session.elapsed_seconds() == pytest.approx(10)

        traveller.shift(timedelta(hours=5))  # elapsed never runs past the budget
        session.status, session.running_since = Status.THINKING, start
        assert session.elapsed_seconds() == 60 and session.remaining_seconds() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "action"),
    [
        (Status.CREATED, "pause"),
        (Status.PAUSED, "pause"),
        (Status.THINKING, "resume"),
        (Status.COMPLETED, "resume"),
        (Status.COMPLETED, "cancel"),
        (Status.FAILED, "cancel"),
        (Status.CANCELLED, "pause"),
    ],
)
def test_illegal_transitions_are_refused_with_a_reason(make_session: Any, status: str, action: str):
    session = make_session(status=status)
    with pytest.raises(IllegalTransition, match=f"Cannot {action} a session that is"):
        getattr(session, action)()
    session.refresh_from_db()
    assert session.status == status


@pytest.mark.django_db
def test_a_transition_bumps_the_revision(make_session: Any):
    session = make_session(status=Status.THINKING, revision=4)
    session.pause()
    assert session.revision == 5


@pytest.mark.django_db
def test_claim_is_exclusive_until_the_lease_goes_stale(make_session: Any):
    session = make_session()
    assert ThinkingSession.claim(session.pk, worker_id="a", lease_seconds=30)
    assert not ThinkingSession.claim(session.pk, worker_id="b", lease_seconds=30)
    with time_machine.travel(timezone.now() + timedelta(seconds=31)):
        assert ThinkingSession.claim(session.pk, worker_id="b", lease_seconds=30)
    session.refresh_from_db()
    assert session.worker_id == "b"


@pytest.mark.django_db
def test_a_heartbeat_renews_only_this_workers_leases_on_the_sessions_it_runs(make_session: Any):
    # A session this worker no longer runs (its task died) goes stale, so a sweep adopts it;
    # a session another worker took over keeps that worker's lease.
    running, abandoned, taken = make_session(), make_session(), make_session()
    for session, worker in ((running, "a"), (abandoned, "a"), (taken, "b")):
        assert ThinkingSession.claim(session.pk, worker_id=worker, lease_seconds=30)
    later = timezone.now() + timedelta(seconds=20)
    with time_machine.travel(later, tick=False):
        assert ThinkingSession.renew([running.pk, taken.pk], worker_id="a") == 1
    beats = dict(ThinkingSession.objects.values_list("pk", "heartbeat_at"))
    assert beats[running.pk] == later
    assert beats[abandoned.pk] < later and beats[taken.pk] < later


@pytest.mark.django_db
def test_the_clock_stops_when_the_worker_stops_renewing_its_lease(make_session: Any, settings: Any):
    # A worker that died mid-session spends none of the budget after its last heartbeat
    # and a grace of 1.5 heartbeats: 10 s run + 3 s grace, not the 100 s since.
    settings.DEEPTHINK_HEARTBEAT_SECONDS = 2
    start = timezone.now() - timedelta(hours=1)
    session = make_session(
        status=Status.THINKING, active_seconds=5.0, running_since=start, budget_seconds=600,
        heartbeat_at=start + timedelta(seconds=10),
    )  # fmt: skip
    now = start + timedelta(seconds=100)
    assert session.elapsed_seconds(now) == pytest.approx(18)
    assert session.remaining_seconds(now) == pytest.approx(582)
    session.heartbeat_at = None  # not leased yet: the clock runs to `now`
    assert session.remaining_seconds(now) == pytest.approx(495)


@pytest.mark.django_db
def test_time_spent_waiting_before_the_stretch_began_adds_nothing(make_session: Any):
    # The provider was already being waited out when this stretch's clock started.
    start = timezone.now() - timedelta(minutes=5)
    session = make_session(
        status=Status.THINKING, active_seconds=5.0, running_since=start, budget_seconds=600,
        waiting_since=start - timedelta(seconds=30),
    )  # fmt: skip
    assert session.elapsed_seconds() == 5.0


@pytest.mark.django_db
def test_a_finished_session_reports_all_the_time_it_used(make_session: Any):
    # Only a running session's clock stops at the budget; the final answer may run past it.
    session = make_session(status=Status.COMPLETED, active_seconds=700.0, budget_seconds=600)
    assert session.elapsed_seconds() == 700.0


@pytest.mark.django_db
@pytest.mark.parametrize("status", [Status.COMPLETED, Status.FAILED, Status.CANCELLED])
def test_a_finished_session_has_no_time_left(make_session: Any, status: str):
    session = make_session(status=status, active_seconds=5.0, budget_seconds=600)
    assert session.remaining_seconds() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("status", "active", "budget", "percent"),
    [
        (Status.COMPLETED, 30.0, 600.0, 100),  # done early: the bar is full
        (Status.FAILED, 700.0, 600.0, 100),  # the final answer ran past the budget: still 100
        (Status.THINKING, 0.25, 0.5, 50),
        (Status.THINKING, 0.0, 0.0, 0),  # a zero budget (the admin allows it): no division
    ],
)
def test_the_progress_bar_shows_the_share_of_the_budget_used(
    make_session: Any, status: str, active: float, budget: float, percent: float
):
    session = make_session(status=status, active_seconds=active, budget_seconds=budget)
    assert session.progress_percent() == percent


@pytest.mark.django_db
def test_progress_is_measured_at_the_time_asked(make_session: Any):
    start = timezone.now() - timedelta(hours=1)
    session = make_session(
        status=Status.THINKING, active_seconds=0.0, running_since=start, budget_seconds=600
    )
    assert session.progress_percent(start + timedelta(seconds=150)) == pytest.approx(25)


@pytest.mark.django_db
@pytest.mark.parametrize(("scheduled", "due"), [(0.0, 90.0), (1.0, 1.0), (200.0, 200.0)])
def test_a_start_schedules_the_first_synthesis_and_a_restart_keeps_the_schedule(
    make_session: Any, scheduled: float, due: float
):
    # 0 is "never scheduled": the first synthesis comes one interval in. Any other time
    # (a session resumed after a restart) stays, however early it is.
    session = make_session(synthesis_interval_seconds=90, next_synthesis_at=scheduled)
    changes = session.begin(now=timezone.now())
    assert changes.get("next_synthesis_at", session.next_synthesis_at) == due


@pytest.mark.django_db
def test_a_persons_question_redraws_the_live_question_list_and_a_note_does_not(
    make_session: Any, alice: Any, django_capture_on_commit_callbacks: Any
):
    from thinking.events import SessionEvent
    from thinking.page.broadcast import render_event

    session = make_session(status=Status.THINKING)
    render_event(SessionEvent(session.pk))  # pages open before: what they have is the base
    events: list[Any] = []
    with django_capture_on_commit_callbacks(execute=True):
        session.steer(user=alice, kind="question", text="What about sleep?", publish=events.append)
        session.steer(user=alice, kind="hint", text="Look at birds", publish=events.append)
    asked, hinted = (render_event(event) for event in events)
    assert ["What about sleep?" in row["html"] for row in asked["questions"]["rows"]] == [True]
    assert "questions" not in hinted


@pytest.mark.django_db
def test_finished_sessions_cannot_be_claimed(make_session: Any):
    for status in (Status.COMPLETED, Status.FAILED, Status.CANCELLED, Status.PAUSED):
        session = make_session(status=status)
        assert not ThinkingSession.claim(session.pk, worker_id="a", lease_seconds=30)


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_cancel_mid_step_waits_for_the_step_to_commit(make_session: Any):
    """A step locks the session's row (on PostgreSQL; SQLite lets one writer in at a time
    anyway): a person's cancel that arrives while the worker's step is open waits for it,
    so neither overwrites the other, and the worker's next step stops."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL)")
    session = make_session(status=Status.THINKING, worker_id="w")
    inside, cancelled = threading.Event(), threading.Event()
    order: list[str] = []
    errors: list[BaseException] = []

    def worker_step() -> None:
        try:
            with ThinkingSession.step(session.pk, worker_id="w") as step:
                inside.set()
                cancelled.wait(timeout=1.0)  # without the lock the cancel ends in here
                step.update(focus="the step's last word")
                order.append("step's last write")  # before its commit: no race with the cancel
        except BaseException as error:  # reported in the test's thread, below
            errors.append(error)
        finally:
            connection.close()  # this thread's own connection

    worker = threading.Thread(target=worker_step)
    worker.start()
    assert inside.wait(timeout=10)
    ThinkingSession.objects.get(pk=session.pk).cancel()
    order.append("cancelled")
    cancelled.set()
    worker.join(timeout=10)
    assert not errors and order == ["step's last write", "cancelled"]
    session.refresh_from_db()
    assert (session.status, session.focus) == (Status.CANCELLED, "the step's last word")
    with pytest.raises(Stopped), ThinkingSession.step(session.pk, worker_id="w"):
        pass


@pytest.mark.django_db(transaction=True)
async def test_active_time_excludes_every_pause(fake_claude: Any, make_session: Any):
    """Three pauses of 0.4 s each: none of that wall time is counted as thinking."""
    session = await sync_to_async(make_session)(budget_seconds=600, synthesis_interval_seconds=600)
    calls = 0

    def pause_every_second_call(body: dict) -> Reply:
        nonlocal calls
        calls += 1
        if calls in (2, 4, 6):
            ThinkingSession.objects.filter(pk=session.pk).update(status=Status.PAUSED)
        if calls == 7:  # end by budget after the third pause, however fast the machine is
            ThinkingSession.objects.filter(pk=session.pk).update(budget_seconds=0.001)
        time.sleep(0.05)
        return Reply(text="THOUGHT: step\nTYPE: insight\nCONFIDENCE: 0.6")

    fake_claude.responder = pause_every_second_call
    began = time.monotonic()
    pauses = 0
    while True:
        assert await sync_to_async(ThinkingSession.claim)(
            session.pk, worker_id="w", lease_seconds=30
        )
        llm = LLM.from_settings()
        try:
            status = await loop.run_session(session.pk, llm=llm, publish=_ignore, worker_id="w")
        finally:
            await llm.close()
        if status != Status.PAUSED:
            break
        pauses += 1
        await asyncio.sleep(0.4)
        await sync_to_async(session.resume)()
    wall = time.monotonic() - began

    await session.arefresh_from_db()
    assert pauses == 3 and session.status == Status.COMPLETED
    assert session.active_seconds >= 7 * 0.05, "every call's time counted"
    assert session.active_seconds <= wall - 3 * 0.4 + 0.05, "no paused time counted"


async def _ignore(event: object) -> None:
    return None


@pytest.mark.django_db
@pytest.mark.parametrize("status", [Status.COMPLETED, Status.FAILED, Status.CANCELLED])
def test_a_finished_sessions_outcome_is_never_overwritten(make_session: Any, status: str):
    """A late worker can neither complete nor fail a session that already ended: its answer,
    error or cancel stays what people saw."""
    session = make_session(status=status)
    now = timezone.now()
    shown = session.get_status_display().lower()
    with pytest.raises(IllegalTransition) as failing:
        session.fail(message="late error", now=now)
    assert str(failing.value) == f"Cannot fail a session that is {shown}."
    with pytest.raises(IllegalTransition) as completing:
        session.complete(reason="budget", answer="late", confidence=0.5, now=now)
    assert str(completing.value) == f"Cannot complete a session that is {shown}."
    with pytest.raises(IllegalTransition) as beginning:
        session.begin(now=now)
    assert str(beginning.value) == f"Cannot begin a session that is {shown}."


@pytest.mark.django_db
def test_the_admin_names_a_session_by_the_start_of_its_question(
    client: Any, django_user_model: Any, make_session: Any
):
    question = "Why " + "x" * 75 + "YZ and what follows?"
    session = make_session(question=question)
    assert str(session) == question[:80]
    Thought.objects.create(
        session=session, sequence=0, text="t", type="insight", confidence=0.5, time_offset_seconds=0
    )
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    page = client.get("/admin/thinking/thought/").content.decode()
    # A row list names its session in one short column: the question's first 59 characters.
    assert f"{question[:59]}…" in page and question[:60] not in page
