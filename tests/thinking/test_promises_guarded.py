"""Promises that no test guarded (issue 73; each was broken on purpose and the suite stayed
green): simultaneous starts on the default SQLite database each get a success or a refusal
with its reason, never a 500, and no more than the limit are stored; and a session longer
than one log epoch still puts its early, most confident thoughts into the final review.
(Webhook requests going to the address the check approved: tests/thinking/test_webhooks.py.)
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from tests.browser.app_server import ROOT, USERNAME, serve
from tests.helpers import prompt_of, run
from thinking.deliberation import transcript
from thinking.models import Status, Thought

PARALLEL = 12
LIMIT = 3


@pytest.mark.timeout(240)
def test_simultaneous_starts_on_sqlite_get_a_success_or_a_reason_never_a_500(tmp_path: Path):
    """The app as `make run` serves it (daphne, SQLite, the in-process worker), twelve starts
    for one person at the same moment with a limit of three."""
    limit = {"DEEPTHINK_MAX_CONCURRENT_SESSIONS": str(LIMIT)}
    with serve(tmp_path, **limit) as app:
        assert app.daphne is not None
        token = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "create_api_token", USERNAME],
            env=app.daphne.env, cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        barrier = threading.Barrier(PARALLEL)
        answers: list[tuple[int, str]] = []

        def start() -> None:
            with httpx.Client(base_url=app.url, timeout=60) as client:
                barrier.wait()
                response = client.post(
                    "/api/sessions",
                    json={"question": "Why is the sky blue?", "minutes": 1},
                    headers={"Authorization": f"Bearer {token}"},
                )
                answers.append((response.status_code, response.text))

        threads = [threading.Thread(target=start) for _ in range(PARALLEL)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)

    statuses = sorted(status for status, _ in answers)
    assert statuses == [201] * LIMIT + [422] * (PARALLEL - LIMIT), answers
    for status, body in answers:
        if status == 422:
            [error] = json.loads(body)["detail"]
            assert error["msg"].startswith(f"You already have {LIMIT} sessions thinking"), body
    with sqlite3.connect(tmp_path / "browser.sqlite3") as db:
        [(stored,)] = db.execute("SELECT count(*) FROM thinking_thinkingsession").fetchall()
    assert stored == LIMIT


# --- the final review past one epoch -------------------------------------------------------

CYCLES = transcript.EPOCH_CYCLES + 5  # one whole epoch behind, five cycles into the next
EARLY = "EARLY-CONFIDENT: the tides follow the moon's pull."


def stored_cycles(session: Any) -> None:
    """What a long session stored: three thoughts a cycle, one early one very confident."""

    def thought(cycle: int, n: int) -> Thought:
        early = cycle == 2 and n == 1
        sequence = cycle * 3 + n
        return Thought(
            session=session,
            sequence=sequence,
            cycle=cycle,
            type="insight",
            text=EARLY if early else f"Thought {sequence} of cycle {cycle}: it depends.",
            confidence=0.97 if early else 0.5,
            time_offset_seconds=sequence,
        )

    Thought.objects.bulk_create(thought(cycle, n) for cycle in range(CYCLES) for n in range(3))


@pytest.mark.django_db(transaction=True)
async def test_a_session_longer_than_one_epoch_reviews_its_early_confident_thoughts(
    fake_claude: Any, make_session: Any
):
    session = await sync_to_async(make_session)(
        status=Status.THINKING, research_enabled=False, web_enabled=False,
        budget_seconds=60, active_seconds=60, cycles=CYCLES,
    )  # fmt: skip
    await sync_to_async(stored_cycles)(session)

    assert await run(session) == Status.COMPLETED
    prompts = [prompt_of(request) for request in fake_claude.requests]
    finals = [prompt for prompt in prompts if "Earlier thoughts that mattered most" in prompt]
    [final] = finals
    # The log carries only the latest epoch; the early thought is in the review, once.
    assert f"Cycle {CYCLES}, focus:" in final and "Cycle 3, focus:" not in final
    assert final.count(EARLY) == 1
