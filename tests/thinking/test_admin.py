from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from thinking.models import Status, SubQuestion, Synthesis, Thought

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client: Any, django_user_model: Any) -> Any:
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    return client


def test_a_session_shows_its_thoughts_questions_and_syntheses_inline(
    staff_client: Any, make_session: Any
):
    session = make_session(status=Status.COMPLETED, active_seconds=42.5)
    Thought.objects.create(
        session=session, sequence=0, text="inline thought", type="insight",
        confidence=0.7, time_offset_seconds=2,
    )  # fmt: skip
    SubQuestion.objects.create(session=session, text="inline sub-question", priority=7)
    Synthesis.objects.create(
        session=session, sequence=0, text="inline synthesis", confidence=0.6,
        time_offset_seconds=30,
    )  # fmt: skip
    html = staff_client.get(
        reverse("admin:thinking_thinkingsession_change", args=[session.pk])
    ).content.decode()
    assert "inline thought" in html and "inline sub-question" in html
    assert "inline synthesis" in html
    # Timing is shown, not editable.
    assert 'name="active_seconds"' not in html and "42.5" in html


def test_the_list_filters_by_status_and_searches_questions(staff_client: Any, make_session: Any):
    make_session(question="Why do cats purr?", status=Status.COMPLETED)
    make_session(question="How do tides work?", status=Status.FAILED)
    url = reverse("admin:thinking_thinkingsession_changelist")

    html = staff_client.get(url, {"status__exact": "failed"}).content.decode()
    assert "How do tides work?" in html and "Why do cats purr?" not in html

    html = staff_client.get(url, {"q": "cats"}).content.decode()
    assert "Why do cats purr?" in html and "How do tides work?" not in html


def test_non_staff_cannot_use_the_admin(client: Any, alice: Any):
    client.force_login(alice)
    response = client.get(reverse("admin:thinking_thinkingsession_changelist"))
    assert response.status_code == 302


def test_an_edit_in_the_admin_keeps_a_running_workers_progress(
    rf: Any, make_session: Any, django_user_model: Any
):
    from django.contrib import admin
    from django.forms.models import model_to_dict

    from thinking.models import ThinkingSession

    session = make_session(status=Status.THINKING, active_seconds=10.0, revision=2)
    model_admin = admin.site._registry[ThinkingSession]
    request = rf.post("/")
    request.user = django_user_model.objects.create_superuser("root", password="pw")
    Form = model_admin.get_form(request, session)
    data = {k: v for k, v in model_to_dict(session).items() if k in Form.base_fields}
    form = Form({**data, "budget_seconds": 120.0}, instance=session)
    assert form.is_valid(), form.errors
    # Meanwhile the worker stores a step.
    ThinkingSession.objects.filter(pk=session.pk).update(active_seconds=30.0, cycles=4)

    model_admin.save_model(request, form.instance, form, change=True)

    session.refresh_from_db()
    assert session.budget_seconds == 120.0
    assert (session.active_seconds, session.cycles) == (30.0, 4)
    assert session.revision == 3
