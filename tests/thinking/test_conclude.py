"""Conclude now (issue 70): a running or paused session told to write its answer stops
thinking, writes its final answer from what it has, checks its citations and completes as
"concluded". Only the owner or a team owner may ask; others are refused as for pause."""

from __future__ import annotations

import asyncio
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from accounts.models import Membership, Role, Team
from accounts.tokens import create_token
from tests.helpers import bearer, post, run, stopped_mid_stream
from thinking.deliberation import interrupt
from thinking.models import (
    CitationCheck,
    CompletionReason,
    IllegalTransition,
    Source,
    Status,
    ThinkingSession,
)
from thinking.people import actions

pytestmark = pytest.mark.django_db(transaction=True)


def with_sources(session: ThinkingSession) -> ThinkingSession:
    """Two sources the answer cites, with passages its citation check reads."""
    for number in (1, 2):
        Source.objects.create(
            session=session,
            number=number,
            kind="web",
            title=f"Source {number}",
            url=f"https://example.org/{number}",
            snippet="The outcome depends mainly on context and scale in typical cases.",
            key=f"https://example.org/{number}",
        )
    return session


async def final_is_checked(session: ThinkingSession) -> None:
    final = await session.syntheses.aget(is_final=True)
    assert final.text == session.final_answer and "[1]" in final.text
    assert await CitationCheck.objects.filter(synthesis=final).aexists(), "its citations checked"


async def test_conclude_stops_the_thought_call_in_flight_and_writes_a_checked_answer(
    fake_claude: Any, make_session: Any, alice: Any, settings: Any, rang: list
):
    settings.DEEPTHINK_INTERRUPT_POLL_SECONDS = 0.05
    session = await sync_to_async(lambda: with_sources(make_session(budget_seconds=600)))()
    status, events = await stopped_mid_stream(
        session,
        fake_claude,
        lambda: actions.conclude(session, user=alice),
        after=0.5,
        timeout=15,  # well before the stream would end
    )

    await session.arefresh_from_db()
    assert status == Status.COMPLETED
    assert session.completion_reason == CompletionReason.CONCLUDED
    assert session.get_completion_reason_display() == "Concluded on request"
    assert session.cycles == 0 and not await session.thoughts.aexists(), "the cut step is dropped"
    await final_is_checked(session)
    purposes = [p async for p in session.model_calls.values_list("purpose", flat=True)]
    assert purposes[0] == "final" and set(purposes) == {"final", "check"}
    assert any(e.finished for e in events)


async def test_a_paused_session_told_to_conclude_goes_straight_to_its_answer(
    fake_claude: Any, make_session: Any, alice: Any, rang: list
):
    # Paused before its plan: it does not plan or research now, it answers.
    session = await sync_to_async(
        lambda: with_sources(make_session(status=Status.PAUSED, plan={}, active_seconds=12))
    )()

    await sync_to_async(actions.conclude)(session, user=alice)

    await session.arefresh_from_db()
    assert (session.status, session.conclude_requested) == (Status.THINKING, True)
    assert rang == [session.pk], "a worker is rung to pick it up"
    assert await run(session) == Status.COMPLETED
    await session.arefresh_from_db()
    assert session.completion_reason == CompletionReason.CONCLUDED
    await final_is_checked(session)
    prompts = [r["body"]["messages"][0] for r in fake_claude.requests]
    assert len(prompts) == 2, "the answer and its check, nothing else"


def test_conclude_is_refused_for_a_finished_session(make_session: Any, alice: Any, rang: list):
    session = make_session(status=Status.COMPLETED, completion_reason=CompletionReason.BUDGET)
    with pytest.raises(IllegalTransition, match=r"^Cannot conclude a session that is completed\.$"):
        actions.conclude(session, user=alice)
    assert rang == []


@pytest.fixture
def team_session(make_session: Any, alice: Any, django_user_model: Any) -> dict[str, Any]:
    """alice's thinking session shared with her team: carol is a member, dave its owner."""
    team = Team.objects.create(name="Lab")
    users = {"alice": alice}
    for name, role in [("alice", Role.MEMBER), ("carol", Role.MEMBER), ("dave", Role.OWNER)]:
        users[name] = users.get(name) or django_user_model.objects.create_user(name)
        Membership.objects.create(
            team=team, user=users[name], role=role, accepted_at=timezone.now()
        )
    return {"users": users, "session": make_session(status=Status.THINKING, team=team)}


@pytest.mark.parametrize(("who", "allowed"), [("alice", True), ("dave", True), ("carol", False)])
def test_the_owner_or_a_team_owner_may_conclude_a_member_may_not(
    team_session: dict[str, Any], rang: list, who: str, allowed: bool
):
    session, user = team_session["session"], team_session["users"][who]
    response = post(bearer(create_token(user, "t")[1]), f"/api/sessions/{session.pk}/conclude")
    session.refresh_from_db()
    if allowed:
        assert response.status_code == 200 and response.json()["conclude_requested"] is True
        assert session.conclude_requested
    else:
        assert response.status_code == 403
        assert response.json() == {
            "detail": "Only the owner can ask this session for its answer now."
        }
        assert not session.conclude_requested and rang == []


def test_a_stranger_gets_404_from_the_api_and_the_page(make_session: Any, bob: Any, client: Any):
    session = make_session(status=Status.THINKING)
    response = post(bearer(create_token(bob, "t")[1]), f"/api/sessions/{session.pk}/conclude")
    assert response.status_code == 404
    client.force_login(bob)
    assert client.post(reverse("session-conclude", args=[session.pk])).status_code == 404
    session.refresh_from_db()
    assert not session.conclude_requested


def test_the_page_offers_conclude_to_the_owner_and_asks_for_it(
    make_session: Any, alice: Any, client: Any, rang: list
):
    session = make_session(status=Status.PAUSED)
    client.force_login(alice)
    page = client.get(session.get_absolute_url()).content.decode()
    assert reverse("session-conclude", args=[session.pk]) in page and "Conclude now" in page
    response = client.post(reverse("session-conclude", args=[session.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert "Writing the answer…" in response.content.decode()
    session.refresh_from_db()
    assert (session.status, session.conclude_requested) == (Status.THINKING, True)


def test_the_cli_concludes_a_paused_session_here(fake_claude: Any, make_session: Any, alice: Any):
    session = with_sources(make_session(status=Status.PAUSED))
    out = StringIO()
    call_command("think", "--conclude", str(session.pk), "--owner", "alice", stdout=out)
    session.refresh_from_db()
    assert session.status == Status.COMPLETED
    assert session.completion_reason == CompletionReason.CONCLUDED
    assert "Writing the answer now for" in out.getvalue() and "Final answer" in out.getvalue()


def test_the_cli_leaves_a_running_session_to_its_worker(
    make_session: Any, alice: Any, settings: Any
):
    settings.ANTHROPIC_API_KEY = "test-key"
    session = make_session(status=Status.THINKING, worker_id="a-worker")
    out = StringIO()
    call_command("think", "--conclude", str(session.pk), "--owner", "alice", stdout=out)
    session.refresh_from_db()
    assert session.conclude_requested and session.status == Status.THINKING
    assert "the worker running it does that" in out.getvalue()


async def test_a_thinking_call_stops_when_told_to_conclude_the_answer_does_not(
    make_session: Any, settings: Any
):
    settings.DEEPTHINK_INTERRUPT_POLL_SECONDS = 0.05
    session = await sync_to_async(make_session)(status=Status.THINKING)
    finished = asyncio.Event()

    async def call() -> str:
        await finished.wait()
        return "reply"

    thinking = asyncio.ensure_future(
        interrupt.watched(call(), session_id=session.pk, concludes=True)
    )
    answer = asyncio.ensure_future(interrupt.watched(call(), session_id=session.pk))
    await asyncio.sleep(0.15)
    assert not thinking.done()
    await ThinkingSession.objects.filter(pk=session.pk).aupdate(conclude_requested=True)
    with pytest.raises(interrupt.Concluding):
        await asyncio.wait_for(thinking, timeout=2)
    await asyncio.sleep(0.15)
    assert not answer.done()
    finished.set()
    assert await answer == "reply"
