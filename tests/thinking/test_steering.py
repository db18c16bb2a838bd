"""A person steers a running session: hints go into the next prompts, questions go first."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from tests.helpers import communicator, login, prompt_of, run
from thinking.models import Status, SubQuestion, Thought


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
    session = await sync_to_async(make_session)(budget_seconds=0.3, synthesis_interval_seconds=60)
    await SubQuestion.objects.acreate(session=session, text="Model question", priority=10)
    await sync_to_async(session.steer)(user=alice, kind="hint", text="Think about whales")
    await sync_to_async(session.steer)(user=alice, kind="question", text="Do whales dream?")

    await run(session)

    prompts = [prompt_of(r) for r in fake_claude.requests]
    first_cycle = next(p for p in prompts if "Current focus:" in p)
    assert "Current focus: Do whales dream?" in first_cycle
    assert (
        "Guidance from the person watching" in first_cycle and "Think about whales" in first_cycle
    )
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
