"""Think longer and follow up (#19): a completed session given more time ends with a second
final answer and keeps the first; a follow-up's prompts carry its parent's answer, last
synthesis and sources, which keep their numbers."""

from __future__ import annotations

import json
import uuid
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from accounts.models import Membership, Role, Team
from thinking.models import (
    CompletionReason,
    Extension,
    Source,
    Status,
    Synthesis,
    ThinkingSession,
)
from thinking.web.export import session_markdown

pytestmark = pytest.mark.django_db(transaction=True)


def think(*args: str) -> dict:
    out = StringIO()
    call_command("think", *args, "--json", stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


def post(client: Client, url: str, data: Any) -> Any:
    return client.post(url, data, content_type="application/json")


@pytest.fixture
def finished(make_session: Any) -> Any:
    """A completed session with a periodic synthesis, a final answer and two sources."""

    def make(**fields: Any) -> ThinkingSession:
        fields.setdefault("status", Status.COMPLETED)
        fields.setdefault("completion_reason", CompletionReason.BUDGET)
        fields.setdefault("active_seconds", 60.0)
        fields.setdefault("final_answer", "Tides come mostly from the Moon [2].")
        fields.setdefault("final_confidence", 0.81)
        session = make_session(**fields)
        Synthesis.objects.create(
            session=session, sequence=0, text="So far: gravity gradients matter [1].",
            confidence=0.6, time_offset_seconds=20,
        )  # fmt: skip
        Synthesis.objects.create(
            session=session, sequence=1, text=session.final_answer, confidence=0.81,
            time_offset_seconds=60, is_final=True,
        )  # fmt: skip
        for number, title in ((1, "Tidal forces explained"), (2, "Lunar gravity and the sea")):
            Source.objects.create(
                session=session, number=number, kind="web", title=title,
                url=f"https://example.org/{number}", snippet=f"About {title}.", key=f"k{number}",
                found_by="web_search" if number == 2 else "plan",
            )  # fmt: skip
        return session

    return make


# --- think longer -------------------------------------------------------------------------


def test_extending_a_completed_session_gives_a_second_answer_and_keeps_the_first(
    fake_claude: Any, alice: Any
):
    first = think("Why is the sky blue?", "--minutes", "0.05", "--synthesis-minutes", "0.02",
                  "--owner", "alice")  # fmt: skip
    assert first["status"] == "completed"
    first_answer = first["final_answer"]
    thoughts_before = len(first["thoughts"])
    used = ThinkingSession.objects.get().active_seconds

    second = think("--extend", first["id"], "--minutes", "0.05", "--owner", "alice")

    assert second["id"] == first["id"] and second["status"] == "completed"
    finals = [s for s in second["syntheses"] if s["is_final"]]
    assert len(finals) == 2, "both answers are kept as versions"
    assert finals[0]["text"] == first_answer
    assert second["final_answer"] == finals[1]["text"] != first_answer
    # It continued from its stored state: the earlier thoughts are still there, more were added.
    assert len(second["thoughts"]) > thoughts_before
    assert second["thoughts"][:thoughts_before] == first["thoughts"]
    assert [v["text"] for v in second["answer_versions"]] == [f["text"] for f in finals]
    report = session_markdown(ThinkingSession.objects.get())
    assert "### Earlier answers" in report and "**Version 1," in report
    # The chart shows every synthesis, both answers included.
    assert second["confidence_evolution"] == [s["confidence"] for s in second["syntheses"]]
    session = ThinkingSession.objects.get()
    assert session.budget_seconds == pytest.approx(max(3.0, used) + 3.0)
    assert Extension.objects.get().minutes == 0.05
    # The final answer prompt of the extension saw the first answer among the syntheses.
    assert any(first_answer[:60] in str(r["body"]) for r in fake_claude.requests[-3:])


def test_the_page_offers_think_longer_and_shows_earlier_answers(
    client: Client, alice: Any, finished: Any, monkeypatch: pytest.MonkeyPatch
):
    started: list[uuid.UUID] = []
    monkeypatch.setattr("thinking.people.actions.request_start", started.append)
    monkeypatch.setattr("thinking.people.actions.publish_sync", lambda event: None)
    session = finished()
    client.force_login(alice)
    page = client.get(session.get_absolute_url()).content.decode()
    assert "Think longer" in page and "Ask a follow-up" in page

    response = client.post(f"/sessions/{session.pk}/extend/", {"minutes": "2"})

    assert response.status_code == 302
    session.refresh_from_db()
    assert session.status == Status.CREATED and session.budget_seconds == 60 + 120
    assert session.final_answer == "" and session.completion_reason == ""
    assert session.syntheses.get(sequence=1).is_final, "the old answer stays a final version"
    assert started == [session.pk]
    page = client.get(session.get_absolute_url()).content.decode()
    assert "Earlier answers" in page and "Tides come mostly from the Moon" in page
    assert "Think longer" not in page, "no extending while it thinks"


def test_api_extend_rules(client: Client, alice: Any, bob: Any, finished: Any,
                          make_session: Any, monkeypatch: pytest.MonkeyPatch):  # fmt: skip
    monkeypatch.setattr("thinking.people.actions.request_start", lambda pk: None)
    monkeypatch.setattr("thinking.people.actions.publish_sync", lambda event: None)
    session = finished()
    client.force_login(alice)
    url = f"/api/sessions/{session.pk}/extend"

    for bad in (0, -5, 10_000, "soon"):
        response = post(client, url, {"minutes": bad})
        assert response.status_code == 422, bad
        assert response.json()["detail"][0]["loc"][-1] == "minutes"
    running = make_session(status=Status.THINKING)
    response = post(client, f"/api/sessions/{running.pk}/extend", {"minutes": 1})
    assert response.status_code == 409 and "Only a completed session" in response.json()["detail"]

    # Limits apply: with three sessions already thinking, a fourth run is refused.
    make_session(status=Status.THINKING)
    make_session(status=Status.CREATED)
    response = post(client, url, {"minutes": 1})
    assert response.status_code == 409 and "limit is 3" in response.json()["detail"]
    ThinkingSession.objects.exclude(pk=session.pk).update(status=Status.CANCELLED)

    response = post(client, url, {"minutes": 1.5})
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "created" and body["budget_seconds"] == 150
    assert body["extensions"][0]["minutes"] == 1.5

    # A stranger gets 404; a teammate may watch but not spend more (403).
    client.force_login(bob)
    assert post(client, url, {"minutes": 1}).status_code == 404
    team = Team.objects.create(name="Lab")
    Membership.objects.create(team=team, user=bob, role=Role.MEMBER, accepted_at=timezone.now())
    other = finished(team=team)
    response = post(client, f"/api/sessions/{other.pk}/extend", {"minutes": 1})
    assert response.status_code == 403


@pytest.mark.parametrize("remainder", [False, True])
def test_think_longer_thinks_that_many_more_minutes_and_the_unused_time_only_if_asked(
    client: Client, alice: Any, finished: Any, monkeypatch: pytest.MonkeyPatch, remainder: bool
):
    """Stopped early by its stop signal after 20 s of a 60 s budget: one more minute is 60 s
    more thinking from where it stopped; the 40 s it left unused are added only when the
    person ticks the box."""
    monkeypatch.setattr("thinking.people.actions.request_start", lambda pk: None)
    monkeypatch.setattr("thinking.people.actions.publish_sync", lambda event: None)
    session = finished(completion_reason=CompletionReason.STOP_SIGNAL, active_seconds=20.0)
    client.force_login(alice)
    page = client.get(session.get_absolute_url()).content.decode()
    assert "Also add the 0.7 minutes it left unused" in page
    assert "the unused time is added only if you tick the box" in page

    data = {"minutes": "1", **({"add_remainder": "on"} if remainder else {})}
    response = client.post(f"/sessions/{session.pk}/extend/", data, follow=True)

    session.refresh_from_db()
    assert session.budget_seconds == (20 + 40 + 60 if remainder else 20 + 60)
    said = "Thinking 1 more minute."
    if remainder:
        said = "Thinking 1 more minute, plus the 0.7 minutes it left unused."
    assert said in response.content.decode()


def test_the_api_adds_the_unused_time_only_when_asked(
    client: Client, alice: Any, finished: Any, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("thinking.people.actions.request_start", lambda pk: None)
    monkeypatch.setattr("thinking.people.actions.publish_sync", lambda event: None)
    client.force_login(alice)
    plain = finished(completion_reason=CompletionReason.CONCLUDED, active_seconds=30.0)
    body = post(client, f"/api/sessions/{plain.pk}/extend", {"minutes": 2}).json()
    assert body["budget_seconds"] == 30 + 120
    more = finished(completion_reason=CompletionReason.CONCLUDED, active_seconds=30.0)
    body = post(
        client, f"/api/sessions/{more.pk}/extend", {"minutes": 2, "add_remainder": True}
    ).json()
    assert body["budget_seconds"] == 30 + 30 + 120
    wrong = post(client, f"/api/sessions/{more.pk}/extend", {"minutes": 2, "add_remainder": 1})
    assert wrong.status_code == 422


def test_an_extension_counts_against_the_hourly_limit(
    client: Client, alice: Any, finished: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("thinking.people.actions.request_start", lambda pk: None)
    monkeypatch.setattr("thinking.people.actions.publish_sync", lambda event: None)
    session = finished()
    settings.DEEPTHINK_SESSIONS_PER_HOUR = 2  # the session itself is one start this hour
    client.force_login(alice)
    url = f"/api/sessions/{session.pk}/extend"
    assert post(client, url, {"minutes": 1}).status_code == 200
    ThinkingSession.objects.filter(pk=session.pk).update(
        status=Status.COMPLETED, completion_reason=CompletionReason.BUDGET
    )
    response = post(client, url, {"minutes": 1})
    assert response.status_code == 409 and "past hour" in response.json()["detail"]


def test_a_session_ended_by_its_token_ceiling_gets_its_allowance_again(alice: Any, finished: Any):
    from thinking.people import actions

    session = finished(
        completion_reason=CompletionReason.TOKEN_CEILING, token_ceiling=5000,
        input_tokens=4000, output_tokens=1200,
    )  # fmt: skip
    actions.extend(session, user=alice, minutes=1, doorbell=False)
    assert session.token_ceiling == 5200 + 5000 and not session.over_token_ceiling


def test_cli_extend_refuses_a_session_that_is_not_completed(fake_claude: Any, alice: Any,
                                                             make_session: Any):  # fmt: skip
    running = make_session(status=Status.THINKING)
    with pytest.raises(CommandError, match="Only a completed session"):
        think("--extend", str(running.pk), "--minutes", "1", "--owner", "alice")


# --- follow-ups ---------------------------------------------------------------------------


def test_a_follow_up_prompts_carry_the_parent_answer_synthesis_and_numbered_sources(
    fake_claude: Any, alice: Any, finished: Any
):
    parent = finished()

    doc = think("And what about the Sun?", "--parent", str(parent.pk), "--minutes", "0.05",
                "--synthesis-minutes", "0.02", "--owner", "alice")  # fmt: skip

    child = ThinkingSession.objects.get(pk=doc["id"])
    assert child.parent == parent and doc["status"] == "completed"
    # Its sources start as the parent's, with the same numbers.
    copied = {s.number: s.title for s in child.sources.filter(number__lte=2)}
    assert copied == {1: "Tidal forces explained", 2: "Lunar gravity and the sea"}
    assert not child.sources.filter(number__lte=2).exclude(key__in=["k1", "k2"]).exists()
    # What found each one stays as it was (the per-tool reference summary shows it).
    assert {s.number: s.found_by for s in child.sources.filter(number__lte=2)} == {
        1: "plan",
        2: "web_search",
    }
    # Every thinking prompt carries the parent in its cached, stable first block.
    calls = [r["body"]["messages"][0]["content"] for r in fake_claude.requests]
    stable_blocks = [c[0] for c in calls if isinstance(c, list) and "cache_control" in c[0]]
    thinking = [b["text"] for b in stable_blocks if "Question: And what about" in b["text"]]
    assert thinking, "the follow-up's own prompts were sent"
    for text in thinking:
        assert "Tides come mostly from the Moon [2]." in text
        assert "So far: gravity gradients matter [1]." in text
        assert "[1] Tidal forces explained" in text and "[2] Lunar gravity and the sea" in text
    assert len({t.split("</earlier_session>")[0] for t in thinking}) == 1, "one stable prefix"


def test_api_follow_up_links_parent_and_children(
    client: Client, alice: Any, bob: Any, finished: Any, monkeypatch: pytest.MonkeyPatch,
    settings: Any,
):  # fmt: skip
    monkeypatch.setattr("thinking.people.actions.request_start", lambda pk: None)
    monkeypatch.setattr("thinking.people.actions.llm.is_configured", lambda: True)
    parent = finished()
    client.force_login(alice)

    response = post(client, "/api/sessions", {
        "question": "What about the Sun?", "minutes": 1, "parent": str(parent.pk),
    })  # fmt: skip

    assert response.status_code == 201, response.content
    child = response.json()
    assert child["parent"]["id"] == str(parent.pk)
    assert child["parent"]["question"] == parent.question
    assert client.get(f"/api/sessions/{parent.pk}").json()["children"] == [
        {"id": child["id"], "url": child["url"], "question": "What about the Sun?"}
    ]
    # The pages link both ways.
    assert child["url"] in client.get(parent.get_absolute_url()).content.decode()
    assert parent.get_absolute_url() in client.get(child["url"]).content.decode()

    # A follow-up of a session you may not see is a 404, on the API and the form alike.
    client.force_login(bob)
    response = post(client, "/api/sessions", {
        "question": "Mine now?", "minutes": 1, "parent": str(parent.pk),
    })  # fmt: skip
    assert response.status_code == 404
    response = client.post("/sessions/new/", {
        "question": "Mine now?", "minutes": 1, "parent": str(parent.pk),
    })  # fmt: skip
    assert response.status_code == 404
    assert ThinkingSession.objects.filter(owner=bob).count() == 0


def test_a_follow_up_needs_a_finished_parent(
    client: Client, alice: Any, make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("thinking.people.actions.llm.is_configured", lambda: True)
    running = make_session(status=Status.THINKING)
    client.force_login(alice)
    response = post(client, "/api/sessions", {
        "question": "Next?", "minutes": 1, "parent": str(running.pk),
    })  # fmt: skip
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "payload", "parent"]
    assert "once this session has finished" in response.json()["detail"][0]["msg"]


def test_the_pages_follow_up_form_starts_a_linked_session(
    client: Client, alice: Any, finished: Any, monkeypatch: pytest.MonkeyPatch
):
    started: list[uuid.UUID] = []
    monkeypatch.setattr("thinking.people.actions.request_start", started.append)
    monkeypatch.setattr("thinking.people.actions.llm.is_configured", lambda: True)
    parent = finished()
    client.force_login(alice)
    page = client.get(parent.get_absolute_url()).content.decode()
    assert f'name="parent" value="{parent.pk}"' in page

    response = client.post("/sessions/new/", {
        "question": "What about the Sun?", "minutes": "1", "parent": str(parent.pk),
    })  # fmt: skip

    child = ThinkingSession.objects.get(parent=parent)
    assert response.status_code == 302 and response["Location"] == child.get_absolute_url()
    assert started == [child.pk]
    assert list(child.sources.values_list("number", flat=True)) == [1, 2]
    assert "Tides come mostly from the Moon" in child.parent_context
