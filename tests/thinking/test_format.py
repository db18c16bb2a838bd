"""The structured thinking format in the loop: modes, parts, parse routes, the stop signal."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.urls import reverse

from fakes.anthropic_server import Reply
from tests.helpers import FrozenClock, prompt_of, run
from thinking.models import CompletionReason, Status, Synthesis, ThinkingSession

ENHANCED_REPLY = """Sure, here you go.
```xml
<think>
<analysis>The focus asks whether minds are layered.</analysis>
<plan>1. Look at evidence 2. Check a counterexample</plan>
<reasoning>Layering explains both reflexes and reflection.</reasoning>
</think>
<interactive>
<response>
THOUGHT: Minds look layered
TYPE: insight
CONFIDENCE: 0.7
---
THOUGHT: Reflexes skip the top layer
TYPE: connection
CONFIDENCE: 0.6
</response>
<stop_signal type="boolean">{stop}</stop_signal>
</interactive>
```"""


async def new_session(make_session: Any, **fields: Any) -> ThinkingSession:
    fields.setdefault("budget_seconds", 0.3)
    fields.setdefault("synthesis_interval_seconds", 60)
    return await sync_to_async(make_session)(**fields)


@pytest.mark.django_db(transaction=True)
async def test_enhanced_replies_keep_their_parts_on_each_thought(
    fake_claude: Any, make_session: Any
):
    session = await new_session(make_session)
    fake_claude.enqueue(Reply(text=ENHANCED_REPLY.format(stop="false")))

    await run(session)

    prompt = prompt_of(fake_claude.requests[0])
    assert "<analysis>" in prompt and "<stop_signal" in prompt and "Inside <response>" in prompt
    first, second = [t async for t in session.thoughts.order_by("sequence")][:2]
    assert (first.text, first.type, first.confidence) == ("Minds look layered", "insight", 0.7)
    assert second.text == "Reflexes skip the top layer"
    assert first.parts == {
        "analysis": "The focus asks whether minds are layered.",
        "plan": "1. Look at evidence 2. Check a counterexample",
        "reasoning": "Layering explains both reflexes and reflection.",
    }
    assert second.parts == first.parts and second.cycle == first.cycle == 0
    await session.arefresh_from_db()
    assert session.parse_routes["tags"] >= 1


@pytest.mark.django_db(transaction=True)
async def test_each_fallback_route_is_counted(fake_claude: Any, make_session: Any):
    session = await new_session(make_session, format_mode="standard", budget_seconds=0.4)
    replies = iter(
        [
            Reply(text="<think>hmm</think><interactive><response>THOUGHT: tagged</response>"),
            Reply(text="THOUGHT: plain lines\nTYPE: critique\nCONFIDENCE: 0.4"),
            Reply(text="Just prose about the question."),
        ]
    )
    frozen = FrozenClock()

    def each_call_takes_a_tenth(body: dict) -> Reply:
        # Four cycles fill the budget however busy the machine is; then the final.
        frozen.advance(0.1)
        return next(replies, Reply(text=""))

    fake_claude.responder = each_call_takes_a_tenth
    await run(session, clock=frozen.clock)

    await session.arefresh_from_db()
    routes = session.parse_routes
    assert routes["tags"] == 1 and routes["lines"] == 1 and routes["prose"] == 1
    assert routes.get("empty", 0) >= 1
    texts = [t async for t in session.thoughts.order_by("sequence").values_list("text", "parts")]
    assert texts[0] == ("tagged", {"thinking": "hmm"})
    assert texts[1:] == [("plain lines", {}), ("Just prose about the question.", {})]


@pytest.mark.django_db(transaction=True)
async def test_a_stop_signal_after_the_first_synthesis_ends_the_session_early(
    fake_claude: Any, make_session: Any
):
    session = await new_session(make_session, budget_seconds=600)
    await Synthesis.objects.acreate(
        session=session, sequence=0, text="so far", confidence=0.6, time_offset_seconds=1
    )
    fake_claude.enqueue(Reply(text=ENHANCED_REPLY.format(stop="true")))

    status = await run(session)

    await session.arefresh_from_db()
    assert status == Status.COMPLETED
    assert session.completion_reason == CompletionReason.STOP_SIGNAL
    assert session.active_seconds < 60
    assert "Stopped early" in session.completion_note
    assert "Layering explains both reflexes" in session.completion_note
    assert await session.syntheses.filter(is_final=True).aexists()


@pytest.mark.django_db(transaction=True)
async def test_a_stop_signal_before_any_synthesis_is_not_obeyed(
    fake_claude: Any, make_session: Any
):
    session = await new_session(make_session, budget_seconds=0.4)
    fake_claude.enqueue(Reply(text=ENHANCED_REPLY.format(stop="true")))

    await run(session)

    await session.arefresh_from_db()
    assert session.completion_reason == CompletionReason.BUDGET
    assert session.completion_note == "" and await session.thoughts.acount() > 2


@pytest.mark.django_db(transaction=True)
async def test_a_stop_signal_buried_in_prose_is_found(fake_claude: Any, make_session: Any):
    session = await new_session(make_session, budget_seconds=600)
    await Synthesis.objects.acreate(
        session=session, sequence=0, text="so far", confidence=0.6, time_offset_seconds=1
    )
    fake_claude.enqueue(
        Reply(text="THOUGHT: done\nTYPE: insight\n\nI think <stop_signal>yes</stop_signal> now.")
    )
    await run(session)
    await session.arefresh_from_db()
    assert session.completion_reason == CompletionReason.STOP_SIGNAL


CUSTOM_SPEC = [
    {"tag": "think", "children": [{"tag": "doubts"}, {"tag": "hunch"}]},
    {
        "tag": "interactive",
        "children": [{"tag": "response"}, {"tag": "stop_signal", "supported_types": ["boolean"]}],
    },
]


@pytest.mark.django_db(transaction=True)
async def test_a_custom_format_asks_for_and_keeps_its_own_parts(
    fake_claude: Any, make_session: Any
):
    session = await new_session(make_session, format_mode="custom", format_spec=CUSTOM_SPEC)
    fake_claude.enqueue(
        Reply(
            text="<think><doubts>Maybe not.</doubts><hunch>Probably yes.</hunch></think>"
            "<interactive><response>THOUGHT: custom one</response>"
            '<stop_signal type="boolean">false</stop_signal></interactive>'
        )
    )
    await run(session)

    prompt = prompt_of(fake_claude.requests[0])
    assert "<doubts>" in prompt and "<hunch>" in prompt
    first = await session.thoughts.order_by("sequence").afirst()
    assert first.text == "custom one"
    assert first.parts == {"doubts": "Maybe not.", "hunch": "Probably yes."}


BROKEN_SPEC = [{"tag": "think"}, {"tag": "think"}]  # the same tag twice


@pytest.mark.django_db(transaction=True)
async def test_a_custom_spec_left_on_a_session_in_another_mode_is_not_read(
    fake_claude: Any, make_session: Any, caplog: Any
):
    # A session switched away from the custom format keeps its old spec (e.g. in the admin).
    session = await new_session(make_session, format_mode="standard", format_spec=BROKEN_SPEC)

    with caplog.at_level(logging.WARNING, logger="thinking"):
        status = await run(session)

    assert status == Status.COMPLETED and await session.thoughts.aexists()
    assert not [r for r in caplog.records if r.name == "thinking.deliberation.loop"]


@pytest.mark.django_db(transaction=True)
async def test_an_invalid_stored_custom_spec_reads_plain_lines_and_says_so_in_the_log(
    fake_claude: Any, make_session: Any, caplog: Any
):
    # Validated by the form and the API; a spec edited in the admin can still be broken.
    session = await new_session(make_session, format_mode="custom", format_spec=BROKEN_SPEC)
    fake_claude.enqueue(Reply(text="THOUGHT: read as a line\nTYPE: insight"))

    with caplog.at_level(logging.WARNING, logger="thinking"):
        status = await run(session)

    assert status == Status.COMPLETED
    first = await session.thoughts.order_by("sequence").afirst()
    assert first.text == "read as a line"
    warnings = {r.getMessage() for r in caplog.records if r.name == "thinking.deliberation.signals"}
    assert warnings == {f"Session {session.pk} has an invalid custom spec; reading lines"}


@pytest.mark.django_db
def test_the_form_refuses_a_bad_custom_spec_with_the_reason(
    client: Any, alice: Any, fake_claude: Any
):
    client.force_login(alice)
    bad = json.dumps([{"tag": "think"}, {"tag": "think"}])
    response = client.post(
        reverse("session-create"),
        {"question": "Q?", "minutes": "1", "format_mode": "custom", "format_spec": bad},
    )
    html = response.content.decode()
    assert response.status_code == 422
    assert "Not a valid tag spec" in html and "duplicate tag" in html
    for spec, message in [
        ("", "needs a tag spec"),
        ("{not json", "Not valid JSON"),
    ]:
        response = client.post(
            reverse("session-create"),
            {"question": "Q?", "minutes": "1", "format_mode": "custom", "format_spec": spec},
        )
        assert message in response.content.decode()
    assert not ThinkingSession.objects.exists()


@pytest.mark.django_db
def test_the_form_stores_the_chosen_format(client: Any, alice: Any, fake_claude: Any):
    client.force_login(alice)
    client.post(
        reverse("session-create"),
        {
            "question": "Q?",
            "minutes": "1",
            "format_mode": "custom",
            "format_spec": json.dumps(CUSTOM_SPEC),
        },
    )
    session = ThinkingSession.objects.get()
    assert session.format_mode == "custom" and session.format_spec == CUSTOM_SPEC


@pytest.mark.django_db
def test_the_page_shows_the_parts_as_labelled_sections(client: Any, alice: Any, make_session: Any):
    from thinking.models import Thought

    session = make_session(status=Status.COMPLETED)
    for sequence in range(2):
        Thought.objects.create(
            session=session, sequence=sequence, cycle=0, text=f"t{sequence}", type="insight",
            confidence=0.5, time_offset_seconds=1,
            parts={"analysis": "A <b>bold</b> claim", "plan": "P", "reasoning": "R"},
        )  # fmt: skip
    client.force_login(alice)
    html = client.get(session.get_absolute_url()).content.decode()
    assert html.count("How the model got here") == 1  # once per cycle
    assert "<h4>Analysis</h4>" in html and "<h4>Plan</h4>" in html
    assert "A &lt;b&gt;bold&lt;/b&gt; claim" in html


@pytest.mark.django_db(transaction=True)
def test_the_cli_takes_a_format_and_a_spec_file(fake_claude: Any, alice: Any, tmp_path: Path):
    from io import StringIO

    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(CUSTOM_SPEC))
    out = StringIO()
    call_command(
        "think", "Q?", "--minutes", "0.05", "--format", "custom",
        "--format-spec", str(spec_file), "--json", stdout=out,
    )  # fmt: skip
    doc = json.loads(out.getvalue())
    assert doc["format_mode"] == "custom"
    assert all("parts" in t for t in doc["thoughts"])
    assert doc["parse_routes"]

    out = StringIO()
    call_command("think", "Q?", "--minutes", "0.05", "--format", "standard", "--json", stdout=out)
    doc = json.loads(out.getvalue())
    assert doc["parse_routes"].get("tags", 0) >= 1
    first = next(t for t in doc["thoughts"] if t["type"] != "scratchpad")
    assert first["parts"].keys() == {"thinking"}
