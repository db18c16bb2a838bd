"""Moving the stage history off the session row into rows of its own keeps every entry, in
order, and moving back restores the list."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("thinking", "0011_followup_extend_followups_notify")]
AFTER = [("thinking", "0012_stage_rows")]


def _apps(target: list[tuple[str, str]]) -> Any:
    return MigrationExecutor(connection).loader.project_state(target).apps


@pytest.fixture
def before_stage_rows(transactional_db: Any) -> Any:
    MigrationExecutor(connection).migrate(BEFORE)
    yield _apps(BEFORE)
    call_command("migrate", verbosity=0)  # leave the database as other tests expect it


def _entry(n: int) -> dict[str, Any]:
    return {"stage": "analysis", "label": "Analysis", "message": f"Entry {n} «ü»", "at": "x"}


def test_the_stage_history_moves_into_rows_and_back(before_stage_rows: Any) -> None:
    old = before_stage_rows
    user = old.get_model("auth", "User").objects.create(username="carol", password="x")
    sessions = old.get_model("thinking", "ThinkingSession").objects
    fields = {"owner": user, "budget_seconds": 60, "synthesis_interval_seconds": 15}
    long = sessions.create(question="Long?", stages=[_entry(n) for n in range(300)], **fields)
    short = sessions.create(question="Short?", stages=[_entry(0), "not an entry"], **fields)
    empty = sessions.create(question="Empty?", **fields)

    MigrationExecutor(connection).migrate(AFTER)

    new = _apps(AFTER)
    rows = new.get_model("thinking", "Stage").objects
    moved = new.get_model("thinking", "ThinkingSession").objects
    assert [r.entry for r in rows.filter(session_id=long.pk).order_by("sequence")] == [
        _entry(n) for n in range(300)
    ]
    assert list(
        rows.filter(session_id=long.pk).order_by("sequence").values_list("sequence", flat=True)
    ) == list(range(1, 301))
    assert [r.entry for r in rows.filter(session_id=short.pk)] == [_entry(0)]
    assert not rows.filter(session_id=empty.pk).exists()
    counts = dict(moved.values_list("question", "stage_count"))
    assert counts == {"Long?": 300, "Short?": 1, "Empty?": 0}

    # The history grows past 300 after the move; back on the session row, the newest 300.
    rows.bulk_create(
        [rows.model(session_id=long.pk, sequence=n + 1, entry=_entry(n)) for n in range(300, 310)]
    )
    moved.filter(pk=long.pk).update(stage_count=310)

    MigrationExecutor(connection).migrate(BEFORE)

    back = _apps(BEFORE).get_model("thinking", "ThinkingSession").objects
    assert back.get(pk=long.pk).stages == [_entry(n) for n in range(10, 310)]
    assert back.get(pk=short.pk).stages == [_entry(0)]
    assert back.get(pk=empty.pk).stages == []
