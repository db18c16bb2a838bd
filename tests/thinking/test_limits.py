"""Limits: how much one person (or team) may start and resume, what counts against them, and
the words they read when refused. They hold under races: one atomic decision per owner on
start and on resume (issue 21)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection, connections
from django.test import Client
from django.utils import timezone

from accounts.models import Membership, Role, Team
from accounts.tokens import create_token
from tests.helpers import services_available
from thinking.models import CompletionReason, Extension, Status, ThinkingSession

PARALLEL = 12


def start_in_parallel(tokens: list[str], **fields: Any) -> list[int]:
    """POST /api/sessions with each token at the same moment, each on its own connection."""
    barrier = threading.Barrier(len(tokens))
    statuses: list[int] = []

    def post(token: str) -> None:
        try:
            client = Client(headers={"Authorization": f"Bearer {token}"})
            barrier.wait()
            response = client.post(
                "/api/sessions",
                {"question": "Why is the sky blue?", "minutes": 1, **fields},
                content_type="application/json",
            )
            statuses.append(response.status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post, args=(token,)) for token in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return statuses


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_parallel_starts_never_exceed_the_concurrency_limit(alice: Any, settings: Any) -> None:
    ok, reason = services_available()
    if not ok or connection.vendor != "postgresql":
        pytest.skip(reason or "needs PostgreSQL")
    settings.ANTHROPIC_API_KEY = "test-key"  # configured; no worker runs, so nothing is called
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 3
    token = create_token(alice, "race")[1]
    statuses = start_in_parallel([token] * PARALLEL)
    assert sorted(statuses) == [201] * 3 + [422] * (PARALLEL - 3), statuses
    assert ThinkingSession.objects.filter(owner=alice).count() == 3


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_parallel_starts_never_exceed_the_hourly_cap(alice: Any, settings: Any) -> None:
    ok, reason = services_available()
    if not ok or connection.vendor != "postgresql":
        pytest.skip(reason or "needs PostgreSQL")
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 100
    settings.DEEPTHINK_SESSIONS_PER_HOUR = 4
    token = create_token(alice, "race")[1]
    statuses = start_in_parallel([token] * PARALLEL)
    assert statuses.count(201) == 4, statuses
    assert ThinkingSession.objects.filter(owner=alice).count() == 4


@pytest.mark.django_db
def test_resuming_is_checked_against_the_concurrency_limit(
    alice: Any, make_session: Any, settings: Any, client: Any
) -> None:
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 2
    for _ in range(2):
        make_session(status=Status.THINKING)
    paused = make_session(status=Status.PAUSED)
    api = Client(headers={"Authorization": f"Bearer {create_token(alice, 's')[1]}"})
    response = api.post(f"/api/sessions/{paused.pk}/resume")
    assert response.status_code == 409
    assert response.json()["detail"] == (
        "2 sessions of this owner are thinking; the limit is 2. Wait for one to finish, "
        "or pause or cancel one, then resume this."
    )
    client.force_login(alice)
    page = client.post(f"/sessions/{paused.pk}/resume/", follow=True)
    assert "the limit is 2" in page.text
    paused.refresh_from_db()
    assert paused.status == Status.PAUSED
    # With room again, resuming works.
    ThinkingSession.objects.filter(status=Status.THINKING).first().cancel()
    assert api.post(f"/api/sessions/{paused.pk}/resume").status_code == 200
    paused.refresh_from_db()
    assert paused.status == Status.THINKING


@pytest.mark.django_db(transaction=True)
def test_a_limit_decision_outside_a_transaction_is_a_programming_error(alice: Any) -> None:
    from thinking.people import limits

    with pytest.raises(RuntimeError) as error:
        limits.reserve_start(alice, minutes=1)
    assert str(error.value) == "Limit decisions must run inside transaction.atomic()."


# --- what counts, and what people read -------------------------------------------------

# A fixed moment, mid-month and mid-hour with every field non-zero, so the start of its
# month and of its past hour are exact.
NOW = datetime(2026, 3, 15, 13, 47, 31, 250_000, tzinfo=UTC)


def api_for(user: Any) -> Client:
    return Client(headers={"Authorization": f"Bearer {create_token(user, 's')[1]}"})


def start(api: Client, minutes: float = 1) -> Any:
    return api.post(
        "/api/sessions", {"question": "Why?", "minutes": minutes}, content_type="application/json"
    )


def refusal(response: Any) -> str:
    """The reason on a refused start (a 422 from the start form)."""
    assert response.status_code == 422, response.content
    return " ".join(error["msg"] for error in response.json()["detail"])


def created_at(row: Any, when: datetime) -> None:
    """Backdate a row (sessions and extensions take the time of their insert)."""
    type(row).objects.filter(pk=row.pk).update(created_at=when)


@pytest.mark.django_db
def test_only_my_own_running_sessions_count_against_my_limit(
    alice: Any, bob: Any, make_session: Any, settings: Any
) -> None:
    settings.ANTHROPIC_API_KEY = "test-key"  # configured; no worker runs, so nothing is called
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 2
    make_session(owner=bob, status=Status.THINKING)
    make_session(owner=bob, status=Status.THINKING)
    paused = make_session(status=Status.PAUSED)
    api = api_for(alice)
    assert start(api).status_code == 201, "bob's sessions are not alice's"
    assert api.post(f"/api/sessions/{paused.pk}/resume").status_code == 200
    assert refusal(start(api)) == (
        "You already have 2 sessions thinking; the limit is 2. Wait for one to finish, "
        "or pause or cancel one."
    )


@pytest.mark.django_db
def test_resuming_a_session_that_already_thinks_says_so_not_that_the_limit_is_reached(
    alice: Any, make_session: Any, settings: Any
) -> None:
    """A page opened before a teammate resumed it: the person learns it is thinking again."""
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 2
    thinking = make_session(status=Status.THINKING)
    make_session(status=Status.THINKING)
    response = api_for(alice).post(f"/api/sessions/{thinking.pk}/resume")
    assert response.status_code == 409
    assert response.json()["detail"] == "Cannot resume a session that is thinking."


@pytest.mark.django_db
def test_the_hourly_limit_counts_my_starts_and_extensions_of_the_past_hour(
    alice: Any, bob: Any, make_session: Any, settings: Any
) -> None:
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.DEEPTHINK_SESSIONS_PER_HOUR = 3
    done = {"status": Status.COMPLETED, "completion_reason": CompletionReason.BUDGET}
    with time_machine.travel(NOW, tick=False):
        # Before the hour: neither counts.
        before_the_hour = NOW - timedelta(hours=1, minutes=1)
        earlier = make_session(**done)
        created_at(earlier, before_the_hour)
        created_at(Extension.objects.create(session=earlier, by=alice, minutes=1), before_the_hour)
        # Within the hour (its first instant included): one start and one extension.
        recent = make_session(**done)
        created_at(recent, NOW - timedelta(hours=1))
        created_at(
            Extension.objects.create(session=recent, by=alice, minutes=1),
            NOW - timedelta(minutes=30),
        )
        # Bob's start and extension are his own.
        bobs = make_session(owner=bob, **done)
        Extension.objects.create(session=bobs, by=bob, minutes=1)

        api = api_for(alice)
        assert start(api).status_code == 201  # her third this hour
        # Giving a session more time is a start too: the fourth is refused.
        response = api.post(
            f"/api/sessions/{recent.pk}/extend", {"minutes": 1}, content_type="application/json"
        )
        assert response.status_code == 409
        assert response.json()["detail"] == (
            "You have started 3 sessions in the past hour; the limit is 3. Try again later."
        )
        recent.refresh_from_db()
        assert recent.status == Status.COMPLETED and recent.extensions.count() == 1


@pytest.mark.django_db
def test_a_session_of_exactly_the_longest_budget_may_start(alice: Any, settings: Any) -> None:
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.DEEPTHINK_MAX_MINUTES = 30
    api = api_for(alice)
    assert start(api, minutes=30).status_code == 201
    assert refusal(start(api, minutes=30.5)) == "The longest budget here is 30 minutes."


def lab(alice: Any, **budgets: Any) -> Team:
    team = Team.objects.create(name="Lab", **budgets)
    Membership.objects.create(team=team, user=alice, role=Role.OWNER, accepted_at=timezone.now())
    return team


@pytest.mark.django_db
def test_a_paused_team_session_resumes_only_within_this_months_team_budget(
    alice: Any, make_session: Any
) -> None:
    with time_machine.travel(NOW, tick=False):
        team = lab(alice, monthly_token_budget=10_000)
        # Created at the first instant of March, it has spent 9,999 tokens of every kind.
        paused = make_session(
            team=team, status=Status.PAUSED, input_tokens=1000, output_tokens=1000,
            cache_read_tokens=4000, cache_write_tokens=3999,
        )  # fmt: skip
        created_at(paused, datetime(2026, 3, 1, tzinfo=UTC))
        # Neither the team's last instant of February nor alice's own spending counts.
        february = make_session(team=team, status=Status.COMPLETED, input_tokens=50_000)
        created_at(february, datetime(2026, 3, 1, tzinfo=UTC) - timedelta(microseconds=1))
        make_session(status=Status.COMPLETED, input_tokens=50_000)

        api = api_for(alice)
        assert api.post(f"/api/sessions/{paused.pk}/resume").status_code == 200
        # Paused again after one more token: the team has now used all 10,000.
        assert api.post(f"/api/sessions/{paused.pk}/pause").status_code == 200
        ThinkingSession.objects.filter(pk=paused.pk).update(cache_write_tokens=4000)
        response = api.post(f"/api/sessions/{paused.pk}/resume")
        assert response.status_code == 409
        assert response.json()["detail"] == "The team Lab has used its 10000 tokens for this month."
        paused.refresh_from_db()
        assert paused.status == Status.PAUSED


@pytest.mark.django_db
def test_more_time_for_a_team_session_is_refused_once_the_team_budget_is_used(
    alice: Any, make_session: Any
) -> None:
    team = lab(alice, monthly_token_budget=10_000)
    session = make_session(
        team=team, status=Status.COMPLETED, completion_reason=CompletionReason.BUDGET,
        input_tokens=10_000,
    )  # fmt: skip
    response = api_for(alice).post(
        f"/api/sessions/{session.pk}/extend", {"minutes": 1}, content_type="application/json"
    )
    assert response.status_code == 409
    assert response.json()["detail"] == (
        "The team Lab has used its 10000 tokens for this month (running sessions count at "
        "their ceilings until they finish)."
    )


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_teammates_starting_at_the_same_moment_never_share_out_more_than_the_budget(
    alice: Any, django_user_model: Any, settings: Any
) -> None:
    """Different people take different owner locks: only the team's row lock stops them all
    counting the same budget left at once."""
    ok, reason = services_available()
    if not ok or connection.vendor != "postgresql":
        pytest.skip(reason or "needs PostgreSQL")
    settings.ANTHROPIC_API_KEY = "test-key"
    team = lab(alice, monthly_token_budget=10_000)
    people = [alice]
    for n in range(PARALLEL - 1):
        mate = django_user_model.objects.create_user(f"mate{n}", password="mate-pass-123")
        Membership.objects.create(team=team, user=mate, role=Role.MEMBER, accepted_at=NOW)
        people.append(mate)
    tokens = [create_token(person, "race")[1] for person in people]
    statuses = start_in_parallel(tokens, team=team.pk, token_ceiling=3_000)
    assert sorted(statuses) == [201] * 4 + [422] * (PARALLEL - 4), statuses
    ceilings = ThinkingSession.objects.filter(team=team).order_by("token_ceiling")
    # Three whole asks, the last 1,000 of the 10,000, then nothing for the other eight.
    assert list(ceilings.values_list("token_ceiling", flat=True)) == [1_000, 3_000, 3_000, 3_000]
