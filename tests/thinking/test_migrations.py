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


BEFORE_COSTS = [("thinking", "0018_remove_session_log_edits")]
AFTER_COSTS = [("thinking", "0019_costs_conclude_tools")]


@pytest.fixture
def before_costs(transactional_db: Any) -> Any:
    MigrationExecutor(connection).migrate(BEFORE_COSTS)
    yield _apps(BEFORE_COSTS)
    call_command("migrate", verbosity=0)


def test_stored_calls_are_priced_by_their_own_model(before_costs: Any) -> None:
    """Issue 70: each stored call gets its model's price; its session, the sum and its usage
    per model; a call of a model without a price is counted, not priced."""
    from decimal import Decimal

    old = before_costs
    user = old.get_model("auth", "User").objects.create(username="dora", password="x")
    sessions = old.get_model("thinking", "ThinkingSession").objects
    calls = old.get_model("thinking", "ModelCall").objects
    fields = {"owner": user, "budget_seconds": 60, "synthesis_interval_seconds": 15}
    priced = sessions.create(question="Priced?", model_id="claude-opus-5-5", **fields)
    local = sessions.create(question="Local?", model_id="local-llm", **fields)
    idle = sessions.create(question="Idle?", model_id="claude-opus-5-5", **fields)
    # $4 / $20 per million on the main model; the plan on the fast one at $0.10 / $0.50.
    calls.create(session=priced, purpose="thoughts", model="claude-opus-5-5",
                 input_tokens=1_000_000, output_tokens=100_000)  # fmt: skip
    calls.create(session=priced, purpose="plan", model="claude-haiku-5-5", input_tokens=1_000_000)
    calls.create(session=local, purpose="thoughts", model="local-llm", input_tokens=5)

    MigrationExecutor(connection).migrate(AFTER_COSTS)

    new = _apps(AFTER_COSTS)
    rows = new.get_model("thinking", "ModelCall").objects
    stored = new.get_model("thinking", "ThinkingSession").objects
    assert sorted(rows.values_list("model", "cost_usd")) == [
        ("claude-haiku-5-5", Decimal("0.1")),
        ("claude-opus-5-5", Decimal("6")),
        ("local-llm", None),
    ]
    after = stored.get(pk=priced.pk)
    assert (after.cost_usd, after.unpriced_calls) == (Decimal("6.1"), 0)
    assert after.usage_by_model["claude-haiku-5-5"]["plan"] == {
        "calls": 1, "input": 1_000_000, "output": 0, "cache_read": 0, "cache_write": 0,
        "cost": 0.1,
    }  # fmt: skip
    assert stored.get(pk=local.pk).unpriced_calls == 1
    assert stored.get(pk=local.pk).usage_by_model["local-llm"]["thoughts"]["cost"] is None
    assert (stored.get(pk=idle.pk).cost_usd, stored.get(pk=idle.pk).usage_by_model) == (0, {})
