from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from thinking.models import Status, ThinkingSession, Thought
from thinking.provider import llm

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice_client(client: Any, alice: Any) -> Any:
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(client: Any, bob: Any) -> Any:
    client.force_login(bob)
    return client


def detail(session: ThinkingSession, action: str = "") -> str:
    name = f"session-{action}" if action else "session-detail"
    return reverse(name, args=[session.pk])


@pytest.mark.parametrize("name", ["home", "session-list"])
def test_pages_require_login(client: Any, name: str):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_session_page_requires_login(client: Any, make_session: Any):
    response = client.get(detail(make_session()))
    assert response.status_code == 302 and reverse("login") in response.url


@pytest.mark.parametrize("action", ["", "pause", "resume", "cancel"])
def test_another_users_session_is_a_404(bob_client: Any, make_session: Any, action: str):
    session = make_session(status=Status.THINKING)
    method = bob_client.get if action == "" else bob_client.post
    assert method(detail(session, action)).status_code == 404
    session.refresh_from_db()
    assert session.status == Status.THINKING


def test_unknown_session_is_a_404(alice_client: Any):
    url = reverse("session-detail", args=["00000000-0000-0000-0000-000000000000"])
    assert alice_client.get(url).status_code == 404


@pytest.mark.parametrize("action", ["pause", "resume", "cancel"])
def test_state_changes_refuse_get(alice_client: Any, make_session: Any, action: str):
    assert alice_client.get(detail(make_session(), action)).status_code == 405


def test_start_without_a_provider_says_so_on_the_page(alice_client: Any):
    response = alice_client.post(reverse("session-create"), {"question": "Why?", "minutes": 1})
    assert response.status_code == 422
    # The form's own error, beside the page's standing notice.
    assert response.context["form"].non_field_errors() == [llm.NOT_CONFIGURED]
    assert llm.NOT_CONFIGURED in response.content.decode()
    assert not ThinkingSession.objects.exists()


def test_start_creates_a_session_and_redirects_to_it(
    alice_client: Any, alice: Any, fake_claude: Any, django_capture_on_commit_callbacks: Any
):
    with django_capture_on_commit_callbacks(execute=True):
        response = alice_client.post(
            reverse("session-create"), {"question": "  Why is the sky blue?  ", "minutes": "0.5"}
        )
    session = ThinkingSession.objects.get()
    assert response.status_code == 302 and response.url == detail(session)
    assert session.owner == alice and session.status == Status.CREATED
    assert session.question == "Why is the sky blue?"
    assert session.budget_seconds == 30 and session.synthesis_interval_seconds == 15


def test_start_over_htmx_redirects_the_browser(alice_client: Any, fake_claude: Any):
    response = alice_client.post(
        reverse("session-create"),
        {"question": "Q?", "minutes": "1"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    assert response.headers["HX-Redirect"] == detail(ThinkingSession.objects.get())


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"question": "", "minutes": "1"}, "This field is required"),
        ({"question": "x" * 5000, "minutes": "1"}, "at most 4000 characters"),
        ({"question": "Q", "minutes": "0"}, "at least 0.05 minutes"),
        ({"question": "Q", "minutes": "100000"}, "longest budget"),
        ({"question": "Q", "minutes": "1", "synthesis_minutes": "-2"}, "more than zero"),
        ({"question": "Q", "minutes": "1", "synthesis_minutes": "1e308"}, "longest interval"),
        ({"question": "Q", "minutes": "1", "token_ceiling": str(2**64)}, "less than or equal"),
    ],
)
def test_bad_input_is_explained_on_the_form(
    alice_client: Any, fake_claude: Any, data: dict, message: str
):
    response = alice_client.post(reverse("session-create"), data)
    assert response.status_code == 422
    assert message in response.content.decode()
    assert not ThinkingSession.objects.exists()


def test_session_page_shows_stored_rows_escaped(alice_client: Any, make_session: Any):
    session = make_session(status=Status.COMPLETED, final_answer="<script>alert(1)</script>42")
    Thought.objects.create(
        session=session,
        sequence=0,
        text="<img src=x onerror=alert(1)>",
        type="critique",
        confidence=0.8,
        time_offset_seconds=3,
    )
    html = alice_client.get(detail(session)).content.decode()
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img src=x" not in html and "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;42" in html
    assert 'id="thought-0"' in html


def test_htmx_request_for_the_page_renders_only_the_header(alice_client: Any, make_session: Any):
    session = make_session()
    html = alice_client.get(detail(session), headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<section id="session-header"')
    assert "<html" not in html


def test_pause_resume_cancel_follow_the_state_rules(
    alice_client: Any, make_session: Any, django_capture_on_commit_callbacks: Any
):
    session = make_session(status=Status.THINKING)
    alice_client.post(detail(session, "pause"))
    session.refresh_from_db()
    assert session.status == Status.PAUSED

    with django_capture_on_commit_callbacks(execute=True):
        alice_client.post(detail(session, "resume"))
    session.refresh_from_db()
    assert session.status == Status.THINKING

    alice_client.post(detail(session, "cancel"))
    session.refresh_from_db()
    assert session.status == Status.CANCELLED and session.finished_at is not None

    response = alice_client.post(detail(session, "resume"), follow=True)
    assert "Cannot resume a session that is cancelled" in response.content.decode()


def test_list_shows_only_my_sessions_and_filters_by_status(
    alice_client: Any, make_session: Any, bob: Any
):
    make_session(question="Alice thinking", status=Status.THINKING)
    make_session(question="Alice done", status=Status.COMPLETED)
    make_session(question="Bob's secret", owner=bob)
    html = alice_client.get(reverse("session-list")).content.decode()
    assert "Alice thinking" in html and "Alice done" in html and "Bob&#x27;s secret" not in html
    assert "Bob" not in html.split("<tbody")[1]

    html = alice_client.get(reverse("session-list"), {"status": "completed"}).content.decode()
    assert "Alice done" in html and "Alice thinking" not in html


def test_list_over_htmx_returns_the_rows_only(alice_client: Any, make_session: Any):
    make_session(question="Mine")
    html = alice_client.get(reverse("session-list"), headers={"HX-Request": "true"}).content
    assert html.decode().lstrip().startswith('<tbody id="session-rows"')


def test_empty_states_are_explained(alice_client: Any, make_session: Any):
    assert "No sessions yet" in alice_client.get(reverse("home")).content.decode()
    html = alice_client.get(detail(make_session())).content.decode()
    assert "No sub-questions yet" in html
    assert "Confidence is charted after each synthesis" in html
    assert "Waiting for a worker" in html


def test_home_lists_my_recent_sessions(alice_client: Any, make_session: Any, bob: Any):
    make_session(question="My earlier question", status=Status.COMPLETED, final_confidence=0.8)
    make_session(question="Someone else's", owner=bob)
    response = alice_client.get(reverse("home"))
    html = response.content.decode()
    assert response.status_code == 200
    assert "My earlier question" in html and "80%" in html and "Someone else" not in html


def test_the_list_pages_through_many_sessions(alice_client: Any, make_session: Any):
    for n in range(30):
        make_session(question=f"Question {n:02d}")
    first = alice_client.get(reverse("session-list")).content.decode()
    second = alice_client.get(reverse("session-list"), {"page": 2}).content.decode()
    assert "Page 1 of 2" in first and "Question 29" in first and "Question 00" not in first
    assert "Question 00" in second
