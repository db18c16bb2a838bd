from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from accounts.tokens import create_token, revoke_token
from tests.helpers import bearer, post, record_call
from thinking.models import (
    CompletionReason,
    Source,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
)

pytestmark = pytest.mark.django_db

UNKNOWN = "00000000-0000-0000-0000-000000000000"

# Every route of the API, with a placeholder for the session id.
READS = [
    "/api/sessions/{id}",
    "/api/sessions/{id}/thoughts",
    "/api/sessions/{id}/sub-questions",
    "/api/sessions/{id}/syntheses",
    "/api/sessions/{id}/sources",
    "/api/sessions/{id}/export",
]
CHANGES = [
    "/api/sessions/{id}/pause",
    "/api/sessions/{id}/resume",
    "/api/sessions/{id}/cancel",
    "/api/sessions/{id}/conclude",
]


@pytest.fixture
def api(alice: Any) -> Client:
    """alice's script, with her token."""
    return bearer(create_token(alice, "script")[1])


@pytest.fixture
def bob_api(bob: Any) -> Client:
    return bearer(create_token(bob, "script")[1])


@pytest.fixture
def provider(settings: Any) -> None:
    # The start form refuses without a provider; nothing is called (on_commit never runs).
    settings.ANTHROPIC_API_KEY = "test-key"


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    events: list[Any] = []
    monkeypatch.setattr("thinking.people.actions.publish_sync", events.append)
    return events


# --- schema and docs ---------------------------------------------------------------------


def test_schema_describes_exactly_the_routes(client: Client):
    schema = client.get("/api/openapi.json").json()
    assert {path: sorted(ops) for path, ops in schema["paths"].items()} == {
        "/api/sessions": ["get", "post"],
        "/api/sessions/{session_id}": ["get"],
        "/api/sessions/{session_id}/pause": ["post"],
        "/api/sessions/{session_id}/resume": ["post"],
        "/api/sessions/{session_id}/cancel": ["post"],
        "/api/sessions/{session_id}/conclude": ["post"],
        "/api/sessions/estimate": ["post"],
        "/api/sessions/{session_id}/steer": ["post"],
        "/api/sessions/{session_id}/extend": ["post"],
        "/api/sessions/{session_id}/thoughts": ["get"],
        "/api/sessions/{session_id}/sub-questions": ["get"],
        "/api/sessions/{session_id}/syntheses": ["get"],
        "/api/sessions/{session_id}/sources": ["get"],
        "/api/sessions/{session_id}/export": ["get"],
        "/api/knowledge": ["post"],
    }
    assert set(schema["components"]["securitySchemes"]) == {"BearerToken", "SessionCookie"}


def test_schema_documents_the_error_bodies(client: Client):
    schema = client.get("/api/openapi.json").json()
    start = schema["paths"]["/api/sessions"]["post"]["responses"]
    assert {"201", "401", "422"} <= set(start)
    assert start["422"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ValidationErrorOut"
    )
    pause = schema["paths"]["/api/sessions/{session_id}/pause"]["post"]["responses"]
    assert {"200", "401", "404", "409"} <= set(pause)
    export = schema["paths"]["/api/sessions/{session_id}/export"]["get"]["responses"]["200"]
    assert set(export["content"]) == {"application/json", "text/markdown"}


def test_docs_page_is_served(client: Client):
    response = client.get("/api/docs")
    assert response.status_code == 200
    assert b"/api/openapi.json" in response.content


# --- authentication ----------------------------------------------------------------------


@pytest.mark.parametrize("route", ["/api/sessions", *READS])
def test_reads_without_credentials_are_401(client: Client, make_session: Any, route: str):
    response = client.get(route.format(id=make_session().pk))
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "detail" in response.json()


@pytest.mark.parametrize("route", ["/api/sessions", *CHANGES])
def test_changes_without_credentials_are_401(client: Client, make_session: Any, route: str):
    session = make_session(status=Status.THINKING)
    assert post(client, route.format(id=session.pk)).status_code == 401
    session.refresh_from_db()
    assert session.status == Status.THINKING


@pytest.mark.parametrize(
    "header",
    [
        "Token abc",
        "Bearer",
        "Bearer ",
        "Bearer not-a-token",
        "Bearer dt_wrong",
        "dt_x",
        "Basic Zm9v",
    ],
)
def test_malformed_or_wrong_authorization_is_401(header: str):
    response = Client(headers={"Authorization": header}).get("/api/sessions")
    assert response.status_code == 401


def test_a_valid_token_authenticates(api: Client, make_session: Any):
    session = make_session()
    response = api.get("/api/sessions")
    assert response.status_code == 200
    assert [item["id"] for item in response.json()["items"]] == [str(session.pk)]


def test_a_revoked_token_is_refused(alice: Any):
    token, secret = create_token(alice, "old")
    revoke_token(token)
    assert bearer(secret).get("/api/sessions").status_code == 401


def test_an_inactive_users_token_is_refused(alice: Any):
    secret = create_token(alice, "script")[1]
    alice.is_active = False
    alice.save()
    assert bearer(secret).get("/api/sessions").status_code == 401


def test_the_login_cookie_authenticates_reads(client: Client, alice: Any, make_session: Any):
    make_session()
    client.force_login(alice)
    assert client.get("/api/sessions").json()["count"] == 1


def test_the_login_cookie_needs_csrf_for_changes(alice: Any, make_session: Any):
    session = make_session(status=Status.THINKING)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    response = post(browser, f"/api/sessions/{session.pk}/pause")
    assert response.status_code == 403
    session.refresh_from_db()
    assert session.status == Status.THINKING


def test_the_login_cookie_with_csrf_token_can_change(
    alice: Any, make_session: Any, published: list[Any]
):
    session = make_session(status=Status.THINKING)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)
    browser.get("/settings/tokens/")  # any page sets the CSRF cookie
    csrf = browser.cookies["csrftoken"].value
    response = browser.post(f"/api/sessions/{session.pk}/pause", headers={"X-CSRFToken": csrf})
    assert response.status_code == 200
    assert response.json()["status"] == "paused"


# --- authorization: other people's and unknown sessions are 404 ----------------------------


@pytest.mark.parametrize("route", READS)
def test_another_users_session_is_404(bob_api: Client, make_session: Any, route: str):
    response = bob_api.get(route.format(id=make_session().pk))
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


@pytest.mark.parametrize("route", CHANGES)
def test_another_user_cannot_change_a_session(bob_api: Client, make_session: Any, route: str):
    session = make_session(status=Status.PAUSED)
    assert post(bob_api, route.format(id=session.pk)).status_code == 404
    session.refresh_from_db()
    assert session.status == Status.PAUSED


@pytest.mark.parametrize("route", READS)
def test_an_unknown_session_is_404_like_another_users(api: Client, route: str):
    response = api.get(route.format(id=UNKNOWN))
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


def test_a_malformed_id_is_422(api: Client):
    response = api.get("/api/sessions/not-a-uuid")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["path", "session_id"]


def test_other_users_sessions_are_not_listed(bob_api: Client, make_session: Any):
    make_session()
    assert bob_api.get("/api/sessions").json() == {
        "count": 0,
        "limit": 25,
        "offset": 0,
        "items": [],
    }


# --- wrong methods -----------------------------------------------------------------------


@pytest.mark.parametrize("route", READS)
def test_reads_refuse_post(api: Client, make_session: Any, route: str):
    assert post(api, route.format(id=make_session().pk)).status_code == 405


@pytest.mark.parametrize("route", CHANGES)
def test_changes_refuse_get(api: Client, make_session: Any, route: str):
    assert api.get(route.format(id=make_session().pk)).status_code == 405


def test_sessions_refuse_delete(api: Client):
    assert api.delete("/api/sessions").status_code == 405


# --- starting ----------------------------------------------------------------------------


def test_start_returns_the_created_session_at_once(
    api: Client,
    alice: Any,
    provider: None,
    rang: list[Any],
    django_capture_on_commit_callbacks: Any,
):
    with django_capture_on_commit_callbacks(execute=True):
        response = post(
            api, "/api/sessions", {"question": "Why do we dream?", "minutes": 2, "effort": "high"}
        )
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "created"
    assert body["question"] == "Why do we dream?"
    assert body["budget_seconds"] == 120
    assert body["settings"]["effort"] == "high"
    session = ThinkingSession.objects.get(pk=body["id"])
    assert session.owner == alice
    assert rang == [session.pk]


def test_start_takes_a_custom_format_spec_as_json(api: Client, provider: None, rang: Any):
    spec = [{"tag": "think"}, {"tag": "interactive", "children": [{"tag": "response"}]}]
    response = post(
        api,
        "/api/sessions",
        {"question": "Q?", "minutes": 1, "format_mode": "custom", "format_spec": spec},
    )
    assert response.status_code == 201, response.content
    assert ThinkingSession.objects.get(pk=response.json()["id"]).format_spec == spec


def test_start_validates_with_the_form(api: Client, provider: None):
    response = post(api, "/api/sessions", {"question": "  ", "minutes": 0.01})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert all(set(e) == {"loc", "msg", "type"} and e["type"] for e in detail)
    errors = {tuple(e["loc"]): e["msg"] for e in detail}
    assert errors[("body", "payload", "minutes")] == "Give it at least 0.05 minutes (3 seconds)."
    assert ("body", "payload", "question") in errors
    assert not ThinkingSession.objects.exists()


def test_start_form_rules_between_fields(api: Client, provider: None):
    response = post(
        api, "/api/sessions", {"question": "Q?", "minutes": 1, "format_spec": '[{"tag": "x"}]'}
    )
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "payload", "format_spec"]
    assert "custom format" in error["msg"]


def test_type_errors_have_the_same_shape_as_form_errors(api: Client, provider: None):
    response = post(api, "/api/sessions", {"question": "Q?", "minutes": "lots", "effort": "huge"})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert {tuple(e["loc"]) for e in detail} == {
        ("body", "payload", "minutes"),
        ("body", "payload", "effort"),
    }
    assert all(set(e) == {"loc", "msg", "type"} for e in detail)


def test_start_without_a_provider_is_422_with_the_reason(api: Client):
    response = post(api, "/api/sessions", {"question": "Q?", "minutes": 1})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "payload"]
    assert not ThinkingSession.objects.exists()


def test_start_refuses_a_ceiling_too_big_to_store(api: Client, provider: None):
    response = post(api, "/api/sessions", {"question": "Q?", "minutes": 1, "token_ceiling": 2**64})
    assert response.status_code == 422


# --- inputs are never silently ignored ------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/api/sessions", {"question": "Q?", "minutes": 1, "reserach": False}, "reserach"),
        ("/api/sessions/estimate", {"minutes": 1, "budget": 5}, "budget"),
        ("/api/sessions/{id}/steer", {"kind": "hint", "text": "x", "urgent": True}, "urgent"),
        ("/api/sessions/{id}/extend", {"minutes": 1, "minuets": 2}, "minuets"),
    ],
)
def test_an_unknown_field_is_a_422_naming_it(
    api: Client, provider: None, make_session: Any, route: str, body: dict, field: str
):
    session = make_session(status=Status.COMPLETED, completion_reason=CompletionReason.BUDGET)
    response = post(api, route.format(id=session.pk), body)
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem == {
        "loc": ["body", "payload", field],
        "msg": f"Unknown field '{field}': this API has no such setting.",
        "type": "extra_forbidden",
    }
    assert ThinkingSession.objects.count() == 1 and not session.thoughts.exists()


@pytest.mark.parametrize(
    ("tools", "stored"),
    [
        (None, ["search", "think", "progress"]),
        (["think"], ["think"]),
        (["search", "progress"], ["search", "progress"]),
        ([], []),
    ],
)
def test_the_tools_are_chosen_per_session(
    api: Client, provider: None, rang: Any, tools: list[str] | None, stored: list[str]
):
    body: dict[str, Any] = {"question": "Q?", "minutes": 1}
    if tools is not None:
        body["tools"] = tools
    response = post(api, "/api/sessions", body)
    assert response.status_code == 201, response.content
    assert response.json()["settings"]["tools"] == stored


def test_tools_must_be_a_list_of_known_tools(api: Client, provider: None):
    for tools in ("none", ["search", "browse"]):
        response = post(api, "/api/sessions", {"question": "Q?", "minutes": 1, "tools": tools})
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"][:3] == ["body", "payload", "tools"]
    assert not ThinkingSession.objects.exists()


def test_a_thinking_budget_under_auto_is_used_as_manual_where_the_model_takes_it(
    api: Client, provider: None, rang: Any, settings: Any
):
    """The issue's case: a budget with thinking left on auto, on a model that only takes
    manual thinking, was dropped (a fitted 2048 was sent). Now it means manual thinking."""
    settings.DEEPTHINK_MODEL = "a-local-model"  # unknown: manual (budget) thinking
    response = post(api, "/api/sessions", {"question": "Q?", "minutes": 1, "thinking_budget": 3000})
    assert response.status_code == 201, response.content
    chosen = response.json()["settings"]
    assert (chosen["thinking_mode"], chosen["thinking_budget"]) == ("manual", 3000)


@pytest.mark.parametrize(
    ("model", "mode", "says"),
    [
        ("claude-opus-5-5", "", "takes no thinking budget"),  # adaptive only
        ("claude-sonnet-4-6", "adaptive", "only used with manual thinking, not adaptive"),
        ("claude-sonnet-4-6", "off", "only used with manual thinking, not off"),
    ],
)
def test_a_thinking_budget_that_cannot_apply_is_refused_with_the_reason(
    api: Client, provider: None, settings: Any, model: str, mode: str, says: str
):
    settings.DEEPTHINK_MODEL = model
    body: dict[str, Any] = {"question": "Q?", "minutes": 1, "thinking_budget": 3000}
    if mode:
        body["thinking_mode"] = mode
    response = post(api, "/api/sessions", body)
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "payload", "thinking_budget"] and says in problem["msg"]
    assert not ThinkingSession.objects.exists()


def test_a_thinking_budget_of_zero_is_refused_not_taken_as_unset(
    api: Client, provider: None, settings: Any
):
    settings.DEEPTHINK_MODEL = "a-local-model"  # manual thinking: a budget applies
    body = {"question": "Q?", "minutes": 1, "thinking_mode": "manual", "thinking_budget": 0}
    response = post(api, "/api/sessions", body)
    assert response.status_code == 422, response.content
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "payload", "thinking_budget"]
    assert not ThinkingSession.objects.exists()


# --- reading -----------------------------------------------------------------------------


def test_detail_has_progress_counts_and_usage(api: Client, make_session: Any):
    session = make_session(
        status=Status.COMPLETED,
        completion_reason=CompletionReason.BUDGET,
        active_seconds=60.0,
        confidence_evolution=[0.4, 0.7],
        final_answer="Because [1].",
        final_confidence=0.7,
        model_id="claude-opus-5-5",
    )
    # $4 and $20 per million tokens.
    record_call(session, model="claude-opus-5-5", input_tokens=1000, output_tokens=200)
    Thought.objects.create(
        session=session, sequence=0, text="t", type="insight", confidence=0.5, time_offset_seconds=1
    )
    SubQuestion.objects.create(session=session, text="q", priority=3)
    body = api.get(f"/api/sessions/{session.pk}").json()
    assert body["progress_percent"] == 100.0
    assert body["elapsed_seconds"] == 60.0
    assert body["remaining_seconds"] == 0.0
    assert body["counts"] == {"thoughts": 1, "sub_questions": 1, "syntheses": 0, "sources": 0}
    assert body["confidence_evolution"] == [0.4, 0.7]
    assert body["usage"]["total_tokens"] == 1200
    assert body["usage"]["estimated_cost_usd"] == pytest.approx(0.008)
    assert body["usage"]["by_model"] == [
        {
            "model": "claude-opus-5-5",
            "calls": 1,
            "input_tokens": 1000,
            "output_tokens": 200,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "total_tokens": 1200,
            "cost_usd": 0.008,
        }
    ]
    assert body["completion_reason"] == "budget"
    assert (body["final_answer"], body["final_confidence"]) == ("Because [1].", 0.7)


def test_list_is_paginated_newest_first(api: Client, make_session: Any):
    made = [make_session(question=f"Q{i}") for i in range(5)]
    first = api.get("/api/sessions?limit=2").json()
    second = api.get("/api/sessions?limit=2&offset=2").json()
    assert first["count"] == 5
    ids = [i["id"] for i in first["items"] + second["items"]]
    assert ids == [str(s.pk) for s in reversed(made)][:4]


def test_list_filters_by_status(api: Client, make_session: Any):
    make_session()
    paused = make_session(status=Status.PAUSED)
    body = api.get("/api/sessions?status=paused").json()
    assert body["count"] == 1
    assert body["items"][0]["id"] == str(paused.pk)


@pytest.mark.parametrize("query", ["status=sleeping", "limit=0", "limit=101", "offset=-1"])
def test_list_rejects_bad_parameters(api: Client, query: str):
    response = api.get(f"/api/sessions?{query}")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][0] == "query"


def test_thoughts_after_returns_only_newer(api: Client, make_session: Any):
    session = make_session()
    for seq in range(4):
        Thought.objects.create(
            session=session,
            sequence=seq,
            text=f"t{seq}",
            type="exploration",
            confidence=0.5,
            time_offset_seconds=seq,
            parts={"analysis": "a"},
            reasoning="hmm",
        )
    everything = api.get(f"/api/sessions/{session.pk}/thoughts").json()
    newer = api.get(f"/api/sessions/{session.pk}/thoughts?after=1").json()
    assert [t["sequence"] for t in everything] == [0, 1, 2, 3]
    assert [t["sequence"] for t in newer] == [2, 3]
    assert newer[0]["parts"] == {"analysis": "a"} and newer[0]["reasoning"] == "hmm"
    assert api.get(f"/api/sessions/{session.pk}/thoughts?after=3").json() == []
    assert len(api.get(f"/api/sessions/{session.pk}/thoughts?limit=3").json()) == 3


def test_syntheses_after_returns_only_newer(api: Client, make_session: Any):
    session = make_session()
    for seq in range(3):
        Synthesis.objects.create(
            session=session, sequence=seq, text=f"s{seq}", confidence=0.5, time_offset_seconds=seq
        )
    body = api.get(f"/api/sessions/{session.pk}/syntheses?after=0").json()
    assert [s["sequence"] for s in body] == [1, 2]


def test_sources_after_returns_only_newer(api: Client, make_session: Any):
    session = make_session()
    for number in (1, 2):
        Source.objects.create(
            session=session, number=number, kind="web", title=f"T{number}", key=f"k{number}"
        )
    body = api.get(f"/api/sessions/{session.pk}/sources?after=1").json()
    assert [(s["number"], s["title"]) for s in body] == [(2, "T2")]


def test_sub_questions_carry_their_parent(api: Client, make_session: Any):
    session = make_session()
    parent = SubQuestion.objects.create(session=session, text="parent", priority=5)
    SubQuestion.objects.create(session=session, text="child", priority=2, parent=parent)
    body = api.get(f"/api/sessions/{session.pk}/sub-questions").json()
    assert {(q["text"], q["parent_id"]) for q in body} == {("parent", None), ("child", parent.pk)}


# --- steering ----------------------------------------------------------------------------


def test_pause_a_thinking_session(
    api: Client,
    make_session: Any,
    published: list[Any],
    django_capture_on_commit_callbacks: Any,
):
    session = make_session(status=Status.THINKING)
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api, f"/api/sessions/{session.pk}/pause")
    assert response.status_code == 200
    assert response.json()["status"] == "paused"
    assert [e.session_id for e in published] == [session.pk]


def test_pausing_a_created_session_is_409_with_the_reason(
    api: Client, make_session: Any, published: list[Any]
):
    session = make_session()
    response = post(api, f"/api/sessions/{session.pk}/pause")
    assert response.status_code == 409
    assert response.json() == {"detail": "Cannot pause a session that is created."}
    assert published == []


def test_resume_a_paused_session_rings_for_a_worker(
    api: Client,
    make_session: Any,
    rang: list[Any],
    published: list[Any],
    django_capture_on_commit_callbacks: Any,
):
    session = make_session(status=Status.PAUSED)
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api, f"/api/sessions/{session.pk}/resume")
    assert response.status_code == 200
    assert response.json()["status"] == "thinking"
    assert rang == [session.pk]


def test_resuming_a_thinking_session_is_409(api: Client, make_session: Any, rang: list[Any]):
    session = make_session(status=Status.THINKING)
    response = post(api, f"/api/sessions/{session.pk}/resume")
    assert response.status_code == 409
    assert response.json()["detail"] == "Cannot resume a session that is thinking."
    assert rang == []


def test_cancel_a_thinking_session(
    api: Client,
    make_session: Any,
    published: list[Any],
    django_capture_on_commit_callbacks: Any,
):
    session = make_session(status=Status.THINKING)
    with django_capture_on_commit_callbacks(execute=True):
        body = post(api, f"/api/sessions/{session.pk}/cancel").json()
    assert (body["status"], body["completion_reason"]) == ("cancelled", "cancelled")
    assert published[0].finished is True


def test_cancelling_a_completed_session_is_409(api: Client, make_session: Any):
    session = make_session(status=Status.COMPLETED)
    response = post(api, f"/api/sessions/{session.pk}/cancel")
    assert response.status_code == 409
    assert response.json()["detail"] == "Cannot cancel a session that is completed."
    session.refresh_from_db()
    assert session.status == Status.COMPLETED


# --- export ------------------------------------------------------------------------------


def test_export_json_is_the_session_document(api: Client, make_session: Any):
    session = make_session(final_answer="42")
    response = api.get(f"/api/sessions/{session.pk}/export")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    assert f'filename="deep-think-{session.pk}.json"' in response["Content-Disposition"]
    assert json.loads(response.getvalue())["final_answer"] == "42"  # streamed


def test_export_markdown_is_a_download(api: Client, make_session: Any):
    session = make_session(final_answer="42")
    response = api.get(f"/api/sessions/{session.pk}/export?format=md")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    assert f'filename="deep-think-{session.pk}.md"' in response["Content-Disposition"]
    assert "## Answer" in response.getvalue().decode()


def test_export_refuses_other_formats(api: Client, make_session: Any):
    response = api.get(f"/api/sessions/{make_session().pk}/export?format=pdf")
    assert response.status_code == 422


def test_session_page_links_the_downloads(client: Client, alice: Any, make_session: Any):
    session = make_session()
    client.force_login(alice)
    page = client.get(session.get_absolute_url()).content.decode()
    assert f'href="/api/sessions/{session.pk}/export?format=md" download=' in page
    # The link works with the page's own login cookie.
    assert client.get(f"/api/sessions/{session.pk}/export?format=md").status_code == 200


# --- a script's whole journey ------------------------------------------------------------


def test_a_script_starts_follows_steers_and_downloads(
    api: Client, provider: None, rang: list[Any], published: list[Any]
):
    created = post(api, "/api/sessions", {"question": "Why is the sky blue?", "minutes": 1})
    session_id = created.json()["id"]
    # What the worker would do: claim, think, store.
    ThinkingSession.objects.filter(pk=session_id).update(status=Status.THINKING)
    session = ThinkingSession.objects.get(pk=session_id)
    Thought.objects.create(
        session=session, sequence=0, text="Rayleigh", type="insight", confidence=0.8,
        time_offset_seconds=3,
    )  # fmt: skip
    seen = api.get(f"/api/sessions/{session_id}/thoughts?after=-1").json()
    assert [t["text"] for t in seen] == ["Rayleigh"]
    assert api.get(f"/api/sessions/{session_id}/thoughts?after=0").json() == []
    assert post(api, f"/api/sessions/{session_id}/pause").json()["status"] == "paused"
    assert post(api, f"/api/sessions/{session_id}/resume").json()["status"] == "thinking"
    report = api.get(f"/api/sessions/{session_id}/export?format=md").getvalue().decode()
    assert report.startswith("# Why is the sky blue?")
