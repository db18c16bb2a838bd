"""Limits hold under races: one atomic decision per owner on start and on resume (issue 21)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections
from django.test import Client

from accounts.tokens import create_token
from tests.helpers import services_available
from thinking.models import Status, ThinkingSession

PARALLEL = 12


def start_in_parallel(token: str, count: int) -> list[int]:
    """`count` POST /api/sessions at the same moment, each on its own connection."""
    barrier = threading.Barrier(count)
    statuses: list[int] = []

    def post() -> None:
        try:
            client = Client(headers={"Authorization": f"Bearer {token}"})
            barrier.wait()
            response = client.post(
                "/api/sessions",
                {"question": "Why is the sky blue?", "minutes": 1},
                content_type="application/json",
            )
            statuses.append(response.status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=post) for _ in range(count)]
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
    statuses = start_in_parallel(token, PARALLEL)
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
    statuses = start_in_parallel(token, PARALLEL)
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
    assert response.status_code == 409 and "the limit is 2" in response.json()["detail"]
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
    from thinking import limits

    with pytest.raises(RuntimeError, match="transaction"):
        limits.reserve_start(alice, minutes=1)
