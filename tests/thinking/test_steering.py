"""A person steers a running session: hints go into the next prompts, questions go first."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from accounts.tokens import create_token
from tests.helpers import add_thought, bearer, communicator, login, post, prompt_of, run
from thinking.models import Status, SubQuestion, Thought

SHOWN = ("sequence", "cycle", "type", "text", "confidence", "time_offset_seconds")


def steer_url(session: Any) -> str:
    return reverse("session-steer", args=[session.pk])


@pytest.mark.django_db
def test_steering_needs_login_and_access(client: Any, bob: Any, make_session: Any):
    session = make_session(status=Status.THINKING)
    assert client.post(steer_url(session), {"kind": "hint", "text": "x"}).status_code == 302
    client.force_login(bob)
    assert client.post(steer_url(session), {"kind": "hint", "text": "x"}).status_code == 404
    assert client.get(steer_url(session)).status_code in (404, 405)
    assert not Thought.objects.exists()


@pytest.mark.django_db
def test_a_hint_is_stored_as_the_persons_and_shown_in_the_stream(
    client: Any, alice: Any, make_session: Any
):
    session = make_session(status=Status.THINKING)
    client.force_login(alice)
    response = client.post(
        steer_url(session),
        {"kind": "hint", "text": "Consider animals <b>too</b>"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200 and "next prompts include your hint" in response.text
    thought = Thought.objects.get()
    assert (thought.type, thought.text, thought.sequence) == (
        "hint",
        "Consider animals <b>too</b>",
        0,
    )
    html = client.get(session.get_absolute_url()).content.decode()
    assert "Your hint" in html and "Consider animals &lt;b&gt;too&lt;/b&gt;" in html


@pytest.mark.django_db
def test_a_question_goes_to_the_front_of_the_queue(client: Any, alice: Any, make_session: Any):
    session = make_session(status=Status.PAUSED)
    SubQuestion.objects.create(session=session, text="The model's own", priority=10)
    client.force_login(alice)
    client.post(steer_url(session), {"kind": "question", "text": "What about octopuses?"})
    added = SubQuestion.objects.get(text="What about octopuses?")
    assert added.priority == 10 and added.added_by == alice
    assert Thought.objects.get().type == "question"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "message"),
    [({"kind": "hint", "text": ""}, "required"), ({"kind": "order", "text": "x"}, "valid choice")],
)
def test_bad_steering_is_explained(
    client: Any, alice: Any, make_session: Any, data: dict, message: str
):
    session = make_session(status=Status.THINKING)
    client.force_login(alice)
    response = client.post(steer_url(session), data, headers={"HX-Request": "true"})
    assert response.status_code == 422 and message in response.text


@pytest.mark.django_db
def test_a_finished_session_cannot_be_steered(client: Any, alice: Any, make_session: Any):
    session = make_session(status=Status.COMPLETED)
    client.force_login(alice)
    response = client.post(
        steer_url(session), {"kind": "hint", "text": "late"}, headers={"HX-Request": "true"}
    )
    assert (
        response.status_code == 422 and "Cannot steer a session that is completed" in response.text
    )


@pytest.mark.django_db(transaction=True)
async def test_the_loop_uses_the_hint_and_explores_the_question_next(
    fake_claude: Any, make_session: Any, alice: Any
):
    session = await sync_to_async(make_session)(budget_seconds=0.8, synthesis_interval_seconds=60)
    await SubQuestion.objects.acreate(session=session, text="Model question", priority=10)
    await sync_to_async(session.steer)(user=alice, kind="hint", text="Think about whales")
    await sync_to_async(session.steer)(user=alice, kind="hint", text="And dolphins")
    await sync_to_async(session.steer)(user=alice, kind="question", text="Do whales dream?")

    await run(session)

    prompts = [prompt_of(r) for r in fake_claude.requests]
    first_cycle = next(p for p in prompts if "Current focus:" in p)
    assert "Current focus: Do whales dream?" in first_cycle
    # The person's words as they wrote them, oldest first.
    guidance = "Guidance from the person watching (take it into account):\n"
    assert guidance + "- Think about whales\n- And dolphins" in first_cycle
    # Later cycles carry the same guidance: the person's hints, not the model's thoughts.
    cycles = [p for p in prompts if "Current focus:" in p]
    assert len(cycles) >= 2
    for prompt in cycles:
        given = prompt.split(guidance, 1)[1].split("\n\n", 1)[0]
        assert given == "- Think about whales\n- And dolphins", given
    sequences = [
        s async for s in session.thoughts.order_by("sequence").values_list("sequence", flat=True)
    ]
    assert sequences == list(range(len(sequences)))


@pytest.mark.django_db(transaction=True)
async def test_steering_reaches_every_open_page(make_session: Any, alice: Any):
    session = await sync_to_async(make_session)(status=Status.THINKING)
    comm = communicator(session.pk, await login(alice), rev=0)
    assert (await comm.connect())[0]
    from django.test import AsyncClient

    client = AsyncClient()
    await client.aforce_login(alice)
    await client.post(steer_url(session), {"kind": "question", "text": "Live question?"})
    frame = await comm.receive_from()
    assert "Live question?" in frame and 'id="thought-0"' in frame
    await comm.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_persons_question_is_stored_as_theirs_and_queued_on_every_open_page(
    make_session: Any, alice: Any
):
    """Through the API: the thought as the person's (type, text, full confidence, at the
    session's clock to the hundredth, in the current cycle, next in sequence), the
    sub-question it opens (top priority, "Asked by a person", theirs), and the live page
    gets both: the thought and the queued question."""
    session = await sync_to_async(make_session)(
        status=Status.THINKING, active_seconds=12.3456, cycles=3
    )
    await add_thought(session, 0, "The model's first thought")
    comm = communicator(session.pk, await login(alice), rev=1, marks={"t": 0})
    assert (await comm.connect())[0]
    api = bearer((await sync_to_async(create_token)(alice, "script"))[1])

    response = await sync_to_async(post)(
        api, f"/api/sessions/{session.pk}/steer", {"kind": "question", "text": "Do whales dream?"}
    )

    assert response.status_code == 201, response.content
    assert response.json()["notice"] == "Added: it will be explored next."
    thought = response.json()["thought"]
    assert {key: thought[key] for key in SHOWN} == {
        "sequence": 1,
        "cycle": 3,
        "type": "question",
        "text": "Do whales dream?",
        "confidence": 1.0,
        "time_offset_seconds": 12.35,
    }
    listed = (await sync_to_async(api.get)(f"/api/sessions/{session.pk}/sub-questions")).json()
    assert [(q["id"], q["text"], q["priority"], q["why"]) for q in listed] == [
        (thought["sub_question_id"], "Do whales dream?", 10, "Asked by a person")
    ]
    assert await SubQuestion.objects.filter(added_by=alice).acount() == 1

    frame = await comm.receive_from()
    assert 'id="thought-1"' in frame and "Do whales dream?" in frame
    assert "asked by a person" in frame, "the queued question is shown live"
    await comm.disconnect()
