from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.urls import reverse

from bench.long_session import SIGNATURE, build
from thinking.models import (
    ModelCall,
    Source,
    Stage,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
)

pytestmark = pytest.mark.django_db

# Issue 67: any admin page of a 5,000-thought session.
PAGE_LIMIT = 200_000
ROW_KINDS = ("thought", "subquestion", "synthesis", "source", "stage", "modelcall")


@pytest.fixture
def staff_client(client: Any, django_user_model: Any) -> Any:
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    return client


def change_page(session: ThinkingSession) -> str:
    return reverse("admin:thinking_thinkingsession_change", args=[session.pk])


def test_the_session_page_shows_its_own_fields_and_links_its_rows_as_filtered_lists(
    staff_client: Any, make_session: Any, django_user_model: Any
):
    from accounts.models import Team

    parent = make_session(question="The question it follows up", status=Status.COMPLETED)
    session = make_session(
        status=Status.COMPLETED,
        active_seconds=42.5,
        team=Team.objects.create(name="Lab <b>crew</b>"),
        parent=parent,
        webhook_url="https://hooks.example/done",
        plan={"steps": ["Read the <script>sources</script>", "Compare them"], "current": 1},
        research_notes=["Web search is off for this deployment"],
        thinking_mode="manual",
        thinking_budget=2048,
        think_tool=False,
        usage_by_model={
            "claude-test": {"thoughts": {"calls": 3, "input": 100, "output": 50, "cost": "0.01"}}
        },
        confidence_evolution=[0.4, 0.65],
    )
    other = make_session(question="Another session")
    Thought.objects.create(
        session=session, sequence=0, text="its thought", type="insight", confidence=0.7,
        time_offset_seconds=2,
    )  # fmt: skip
    Thought.objects.create(
        session=other, sequence=0, text="someone else's thought", type="insight",
        confidence=0.7, time_offset_seconds=2,
    )  # fmt: skip
    SubQuestion.objects.create(session=session, text="its sub-question", priority=7)

    html = staff_client.get(change_page(session)).content.decode()
    assert "its thought" not in html and "its sub-question" not in html  # linked, not inline
    assert "Lab &lt;b&gt;crew&lt;/b&gt;" in html and 'name="team"' in html
    assert "Read the &lt;script&gt;sources&lt;/script&gt; (current)" not in html
    assert "Compare them (current)" in html and "&lt;script&gt;" in html
    assert "Web search is off for this deployment" in html
    assert "https://hooks.example/done" in html and 'name="thinking_budget"' in html
    assert 'name="think_tool"' in html and 'name="parent"' in html
    assert "40% → 65%" in html and "claude-test" in html
    assert 'name="active_seconds"' not in html and "42.5" in html  # timing: shown, not edited

    thoughts = reverse("admin:thinking_thought_changelist") + f"?session={session.pk}"
    assert f'href="{thoughts}">1 thoughts</a>' in html
    assert "1 sub-questions</a>" in html and "0 model calls</a>" in html
    listed = staff_client.get(thoughts).content.decode()
    assert "its thought" in listed and "someone else&#x27;s thought" not in listed
    assert staff_client.get(change_page(parent)).content.decode().count(str(session.pk)) >= 1


def test_every_admin_page_of_a_5000_thought_session_stays_small(
    staff_client: Any, alice: Any, django_assert_max_num_queries: Any
):
    session = build(
        alice, thoughts=5000, sources=2000, sub_questions=300, stages=300, model_calls=1700
    )
    assert session.thoughts.count() == 5000

    pages = {"session": change_page(session)}
    for kind in ROW_KINDS:
        listing = reverse(f"admin:thinking_{kind}_changelist")
        pages[f"{kind} list"] = f"{listing}?session={session.pk}"
        pages[f"{kind} list, unfiltered"] = listing
    pages["thought"] = reverse("admin:thinking_thought_change", args=[session.thoughts.last().pk])
    pages["source"] = reverse("admin:thinking_source_change", args=[session.sources.last().pk])
    pages["stage"] = reverse("admin:thinking_stage_change", args=[session.stage_entries.last().pk])
    pages["model call"] = reverse(
        "admin:thinking_modelcall_change", args=[session.model_calls.last().pk]
    )
    pages["sub-question"] = reverse(
        "admin:thinking_subquestion_change", args=[session.sub_questions.last().pk]
    )
    pages["synthesis"] = reverse(
        "admin:thinking_synthesis_change", args=[session.syntheses.last().pk]
    )
    for name, url in pages.items():
        # A list reads one page of rows and their session's question: a fixed few queries.
        with django_assert_max_num_queries(15):
            response = staff_client.get(url)
        assert response.status_code == 200, name
        assert len(response.content) <= PAGE_LIMIT, (name, len(response.content))
        assert SIGNATURE.encode() not in response.content, name  # a call's content stays put
    listed = staff_client.get(pages["thought list"]).content.decode()
    assert "5000 thoughts" in listed and listed.count('class="field-text_excerpt"') == 100


def test_the_rows_are_registered_with_filters_search_and_no_raw_json(staff_client: Any, alice: Any):
    for model in (Source, Stage, ModelCall, Thought, SubQuestion, Synthesis):
        assert admin.site.is_registered(model), model
        model_admin = admin.site.get_model_admin(model)
        assert model_admin.list_filter, model
        # The session is a raw id (or read only), never a select of every session.
        assert "session" in (*model_admin.raw_id_fields, *model_admin.readonly_fields), model
    session = build(
        alice, thoughts=0, sources=0, sub_questions=0, syntheses=0, stages=2, model_calls=1
    )
    Source.objects.create(
        session=session, number=1, kind="web", title="Tides and the moon",
        url="https://tides.example/moon", key="https://tides.example/moon", query="tides",
    )  # fmt: skip
    Source.objects.create(
        session=session, number=2, kind="memory", title="A note on cats", key="passage:1",
    )  # fmt: skip
    Stage.objects.create(
        session=session, sequence=3,
        entry={"stage": "research", "label": "Research", "message": "Searching: 2 web queries"},
    )  # fmt: skip

    url = reverse("admin:thinking_source_changelist")
    html = staff_client.get(url, {"q": "tides"}).content.decode()
    assert "Tides and the moon" in html and "tides.example" in html and "A note on cats" not in html
    html = staff_client.get(url, {"kind__exact": "memory"}).content.decode()
    assert "A note on cats" in html and "Tides and the moon" not in html
    source = Source.objects.get(number=1)
    page = staff_client.get(reverse("admin:thinking_source_change", args=[source.pk]))
    assert b'name="title"' not in page.content  # what a search found is read, not changed

    html = staff_client.get(reverse("admin:thinking_stage_changelist"), {"stage": "research"})
    text = html.content.decode()
    assert "Searching: 2 web queries" in text and "Cycle 0" not in text
    assert "{&quot;" not in text and '{"stage"' not in text  # no raw JSON in a list

    html = staff_client.get(reverse("admin:thinking_modelcall_changelist")).content.decode()
    assert "$0.0123" in html and "1000" in html and SIGNATURE not in html
    call = ModelCall.objects.get()
    page = staff_client.get(reverse("admin:thinking_modelcall_change", args=[call.pk]))
    assert page.status_code == 200 and SIGNATURE.encode() not in page.content
    assert b'name="input_tokens"' not in page.content
    assert staff_client.get(reverse("admin:thinking_modelcall_add")).status_code == 403


def test_a_bad_session_filter_lists_nothing_rather_than_failing(staff_client: Any):
    response = staff_client.get(reverse("admin:thinking_thought_changelist"), {"session": "nope"})
    assert response.status_code == 200 and b"0 thoughts" in response.content


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
    from django.forms.models import model_to_dict

    session = make_session(status=Status.THINKING, active_seconds=10.0, revision=2)
    model_admin = admin.site.get_model_admin(ThinkingSession)
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
