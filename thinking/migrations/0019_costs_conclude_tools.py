"""Issue 70: each model call priced by its own model (a cost per call, and per session with
its usage per model), "conclude now", and the search and progress tools chosen per session.

Existing calls are priced at the prices known when this runs (the built-in table and
DEEPTHINK_PRICES).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import migrations, models

BATCH = 1000


def price_stored_calls(apps: Any, schema_editor: Any) -> None:
    from thinking.provider import pricing

    calls = apps.get_model("thinking", "ModelCall")
    sessions = apps.get_model("thinking", "ThinkingSession")
    tallies: dict[Any, dict[str, Any]] = {}
    costs: dict[Any, Decimal] = {}
    unpriced: dict[Any, int] = {}
    priced = []
    rows = calls.objects.order_by("id").values_list(
        "id",
        "session_id",
        "model",
        "purpose",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    )
    for pk, session_id, model, purpose, *tokens in rows.iterator(chunk_size=BATCH):
        cost = pricing.call_cost(
            model,
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            cache_read_tokens=tokens[2],
            cache_write_tokens=tokens[3],
        )
        tallies[session_id] = pricing.tallied(
            tallies.get(session_id, {}),
            model=model,
            purpose=purpose,
            tokens=(tokens[0], tokens[1], tokens[2], tokens[3]),
            cost=cost,
        )
        if cost is None:
            unpriced[session_id] = unpriced.get(session_id, 0) + 1
        else:
            costs[session_id] = costs.get(session_id, Decimal(0)) + cost
            priced.append(calls(pk=pk, cost_usd=cost))
        if len(priced) >= BATCH:
            calls.objects.bulk_update(priced, ["cost_usd"])
            priced = []
    calls.objects.bulk_update(priced, ["cost_usd"])
    for session_id, tally in tallies.items():
        sessions.objects.filter(pk=session_id).update(
            usage_by_model=tally,
            cost_usd=costs.get(session_id, Decimal(0)),
            unpriced_calls=unpriced.get(session_id, 0),
        )


class Migration(migrations.Migration):
    dependencies = [
        ("thinking", "0018_remove_session_log_edits"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelcall",
            name="cost_usd",
            field=models.DecimalField(blank=True, decimal_places=6, max_digits=12, null=True),
        ),
        migrations.AddField(
            model_name="thinkingsession",
            name="conclude_requested",
            field=models.BooleanField(
                default=False,
                help_text="A person asked for the answer now: the loop stops thinking and "
                "writes it.",
            ),
        ),
        migrations.AddField(
            model_name="thinkingsession",
            name="cost_usd",
            field=models.DecimalField(decimal_places=6, default=0, max_digits=14),
        ),
        migrations.AddField(
            model_name="thinkingsession",
            name="progress_tool",
            field=models.BooleanField(
                default=True, help_text="Offer the progress tool (a status line for the page)."
            ),
        ),
        migrations.AddField(
            model_name="thinkingsession",
            name="unpriced_calls",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="thinkingsession",
            name="usage_by_model",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name="thinkingsession",
            name="completion_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("budget", "Time budget used"),
                    ("stop_signal", "Model signalled it was done"),
                    ("token_ceiling", "Token ceiling reached"),
                    ("cost_ceiling", "Cost ceiling reached"),
                    ("concluded", "Concluded on request"),
                    ("cancelled", "Cancelled"),
                    ("error", "Error"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="thinkingsession",
            name="search_tool",
            field=models.BooleanField(
                default=True, help_text="Offer web and knowledge-base search (with research on)."
            ),
        ),
        migrations.AlterField(
            model_name="thinkingsession",
            name="tools_enabled",
            field=models.BooleanField(
                default=True,
                help_text="Offer tools at all while it thinks (the ones chosen below).",
            ),
        ),
        migrations.RunPython(price_stored_calls, migrations.RunPython.noop, elidable=True),
    ]
