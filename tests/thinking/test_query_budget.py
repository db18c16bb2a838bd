"""What one step of the loop costs the database: queries and hops (counts, not times).

A model call takes seconds, so a few queries per step are invisible; what must not happen is a
step whose queries grow with the session, or a change that quietly adds a query to every
thought cycle. Each budget below is what the loop needs today; a step over it fails here.

The steps run under `async_to_sync` from a synchronous test, so their database hops (with
SQLite's one hop thread, asgiref's thread-sensitive ones) run on the test's own thread and
its connection, where `CaptureQueriesContext` sees them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.helpers import WORKER, count_hops, without_tools
from thinking.deliberation import evidence, loop
from thinking.deliberation.run import Meter, Run
from thinking.deliberation.steps import Focus
from thinking.events import SessionEvent
from thinking.models import Source, Status, SubQuestion, ThinkingSession, Thought
from thinking.provider.llm import LLM

pytestmark = pytest.mark.django_db(transaction=True)

# Queries and hops a step may take, at any length of session.
THOUGHT_CYCLE = {"queries": 20, "hops": 2}  # its stage and reads; its store
SUB_QUESTIONS = {"queries": 14, "hops": 2}
SYNTHESIS = {"queries": 29, "hops": 4}  # and its citation check's read and store
CYCLE_START = {"queries": 2, "hops": 1}


def measured(
    step: Callable[[Run], Awaitable[Any]], monkeypatch: pytest.MonkeyPatch
) -> dict[str, int]:
    """Run `step` with a fresh run of the settings' model; its queries and hops."""

    async def go() -> None:
        llm = LLM.from_settings()

        async def publish(event: SessionEvent) -> None:
            pass

        run_ = Run(
            llm=llm,
            research=evidence.Research(owner_ids=[], scope="test"),
            publish=publish,
            worker_id=WORKER,
            meter=Meter(),
        )
        try:
            await step(run_)
        finally:
            await llm.close()

    with monkeypatch.context() as patched, CaptureQueriesContext(connection) as queries:
        hops = count_hops(patched)
        async_to_sync(go)()
    return {"queries": len(queries.captured_queries), "hops": len(hops)}


def grown(make_session: Any, *, cycles: int) -> ThinkingSession:
    """A thinking session held by the test's worker, with `cycles` cycles of thoughts, a
    sub-question and a source for every few of them already stored."""
    session = make_session(
        status=Status.THINKING, worker_id=WORKER, cycles=cycles, budget_seconds=600
    )
    Thought.objects.bulk_create(
        Thought(
            session=session,
            sequence=n,
            cycle=n // 3,
            text=f"Thought {n} about scattering.",
            type="insight",
            confidence=0.5,
            time_offset_seconds=n,
        )
        for n in range(cycles * 3)
    )
    SubQuestion.objects.bulk_create(
        SubQuestion(session=session, text=f"Why {n}?", priority=n % 9, explored=n % 2 == 0)
        for n in range(cycles // 2)
    )
    Source.objects.bulk_create(
        Source(session=session, number=n + 1, kind="web", key=f"k{n}", title=f"S{n}", snippet="A.")
        for n in range(cycles // 4)
    )
    return session


@pytest.fixture
def quiet_model(fake_claude: Any, settings: Any) -> Any:
    settings.DEEPTHINK_CITATION_CHECK = True
    fake_claude.responder = without_tools(fake_claude)
    return fake_claude


def cycle_cost(session: ThinkingSession, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    return measured(
        lambda run_: loop.generate_thoughts(
            session=session, focus=Focus(text=session.question), run=run_
        ),
        monkeypatch,
    )


@pytest.mark.parametrize("cycles", [1, 120])
def test_a_thought_cycle_stays_within_its_query_and_hop_budget(
    quiet_model: Any, make_session: Any, monkeypatch: pytest.MonkeyPatch, cycles: int
):
    cost = cycle_cost(grown(make_session, cycles=cycles), monkeypatch)
    assert cost["hops"] <= THOUGHT_CYCLE["hops"], cost
    assert cost["queries"] <= THOUGHT_CYCLE["queries"], cost
    assert len(quiet_model.requests) == 1


def test_a_thought_cycle_costs_the_same_early_and_late_in_a_session(
    quiet_model: Any, make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    # Both past the first epoch (its log carries the synthesis before it: one read more).
    early = cycle_cost(grown(make_session, cycles=40), monkeypatch)
    late = cycle_cost(grown(make_session, cycles=400), monkeypatch)
    assert early == late


def test_sub_questions_stay_within_their_budget(
    quiet_model: Any, make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    session = grown(make_session, cycles=40)
    cost = measured(
        lambda run_: loop.generate_questions(
            session=session, focus=Focus(text=session.question), run=run_
        ),
        monkeypatch,
    )
    assert cost["hops"] <= SUB_QUESTIONS["hops"], cost
    assert cost["queries"] <= SUB_QUESTIONS["queries"], cost


def test_a_synthesis_and_its_check_stay_within_their_budget(
    quiet_model: Any, make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    session = grown(make_session, cycles=40)
    cost = measured(lambda run_: loop.synthesise(session=session, run=run_), monkeypatch)
    assert session.syntheses.count() == 1
    assert cost["hops"] <= SYNTHESIS["hops"], cost
    assert cost["queries"] <= SYNTHESIS["queries"], cost


def test_a_cycles_start_reads_the_session_and_its_focus_in_one_hop(
    quiet_model: Any, make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    session = grown(make_session, cycles=40)

    async def start(run_: Run) -> None:
        opened, focus = await loop.open_cycle(session, worker_id=WORKER)
        assert opened.status == Status.THINKING and focus.sub_question_id is not None

    cost = measured(start, monkeypatch)
    assert cost == CYCLE_START, cost
