"""The JSON API under /api/ (django-ninja): start, follow, pause, resume, cancel and export
sessions. Same rules as the pages: sessions are looked up through `access`, a session the
caller may not see is a 404, starting validates with StartSessionForm, and state changes are
the model's verbs, published to open pages like the views do.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any, Literal

import ninja
import pydantic
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Field, NinjaAPI, Query, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer, SessionAuth
from pydantic import ConfigDict

from accounts import tokens
from config.http import ApiRequest
from thinking.deliberation import stages, tools
from thinking.deliberation.citations import session_counts
from thinking.models import (
    CompletionReason,
    Effort,
    FormatMode,
    IllegalTransition,
    SearchRecency,
    SourceKind,
    Status,
    ThinkingMode,
    ThinkingSession,
    ThoughtType,
)
from thinking.people import actions, followups, limits
from thinking.web.access import get_session_for
from thinking.web.export import (
    batched_text,
    document_chunks,
    markdown_chunks,
    model_usage,
    reference_summary,
    source_row,
    streamed,
    sub_question_row,
    synthesis_row,
    thought_row,
)
from thinking.web.forms import EstimateForm, StartSessionForm, SteerForm

# Column limits, so an out-of-range number is a 422 rather than a database error.
MAX_INT = 2**31 - 1
MAX_BIGINT = 2**63 - 1

DESCRIPTION = """
Start a deliberation, follow it while it thinks, steer it and keep the result.

**Authentication.** Send a personal API token (create one under *API tokens* in the app, or
with `python manage.py create_api_token USERNAME`) as `Authorization: Bearer <token>`. A
logged-in browser may use its session cookie instead; unsafe methods then need the CSRF
token (`X-CSRFToken` header). Without either: `401`.

**Errors** are JSON. `401`, `403`, `404` and `409` have `{"detail": "<reason>"}`. A
session that does not exist and one you may not see are both `404`. Validation errors are
`422` with one entry per problem: `{"detail": [{"loc": ["body", "payload", "minutes"],
"msg": "...", "type": "..."}]}`; `loc` names where the problem is (`body`, `query` or
`path`, then the field), for the request's types and for the start form's rules alike. A
field the API does not know is a `422` naming it (`"type": "extra_forbidden"`), never
ignored: a misspelt setting does not start a session without it.

**Costs.** Each model call is priced by the model that made it (list prices; operators
price other models with `DEEPTHINK_PRICES`); `usage.by_model` splits calls, tokens and cost
per model. `POST /api/sessions/estimate` gives the expected cost range before a start. A
dollar or token ceiling holds the final answer inside it: thinking stops while the answer
still fits. A dollar ceiling on a model without a price is refused (`422`).

**Concluding.** `POST /api/sessions/{id}/conclude` asks a running or paused session for its
answer now: it stops thinking, writes its final answer from what it has, checks its
citations and completes with `completion_reason` `concluded`.

**Steering.** `POST /api/sessions/{id}/steer` with `{"kind": "hint" | "question", "text": …}`
does what the page's steering does: a hint joins the next prompts, a question is explored
next. Anyone who may see the session may steer it until it finishes (then `409`).

**Polling.** `GET /api/sessions/{id}` has the status, progress and counts;
`/thoughts?after=SEQ`, `/syntheses?after=SEQ` and `/sources?after=NUMBER` return only rows
newer than the last one you have. `revision` changes whenever anything stored changes.
"""


class BearerToken(HttpBearer):
    """A personal API token: `Authorization: Bearer dt_…`."""

    def authenticate(self, request: HttpRequest, token: str) -> Any | None:
        user = tokens.verify_token(token)
        if user is not None:
            request.user = user
        return user


class SessionCookie(SessionAuth):
    """The browser's login session. ninja checks CSRF on unsafe methods here; only once the
    cookie has identified someone, so a request with no credentials at all is a 401."""

    def __call__(self, request: HttpRequest) -> Any | None:
        if not request.user.is_authenticated or not request.user.is_active:
            return None
        return super().__call__(request)


class DeepThinkAPI(NinjaAPI):
    def get_openapi_operation_id(self, operation: Any) -> str:
        # `start_session`, not `thinking_api_start_session`: names for generated clients.
        return str(operation.view_func.__name__)


api = DeepThinkAPI(
    title="Deep Think API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api",
    auth=[BearerToken(), SessionCookie()],
)


# --- errors -----------------------------------------------------------------------------


class ErrorOut(Schema):
    detail: str


class FieldError(Schema):
    loc: list[str | int] = Field(description="Where: body / query / path, then the field.")
    msg: str
    type: str


class ValidationErrorOut(Schema):
    detail: list[FieldError]


# Request bodies: a field the API does not know is a 422 naming it, never silently dropped.
STRICT = ConfigDict(extra="forbid")

ERRORS: dict[int, Any] = {401: ErrorOut, 404: ErrorOut, 422: ValidationErrorOut}
# Unsafe methods also fail with 403 when a cookie-authenticated request lacks its CSRF token.
CHANGE_ERRORS: dict[int, Any] = {**ERRORS, 403: ErrorOut}


@api.exception_handler(ValidationError)
def validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    # Only loc, msg and type: the same shape as the start form's errors, and never the input.
    detail = [
        {
            "loc": list(error.get("loc", ())),
            "msg": _message(error),
            "type": str(error.get("type", "invalid")),
        }
        for error in exc.errors
    ]
    return api.create_response(request, {"detail": detail}, status=422)


def _message(error: dict[str, Any]) -> str:
    loc = list(error.get("loc", ()))
    if error.get("type") == "extra_forbidden" and loc:
        return f"Unknown field {str(loc[-1])!r}: this API has no such setting."
    return str(error.get("msg", "Invalid."))


@api.exception_handler(RequestDataTooBig)
def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    # Django would answer an HTML 400 (or a traceback page with DEBUG on); an API client
    # needs JSON and the status that says what to change.
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return api.create_response(
        request, {"detail": f"The request body is larger than {limit} bytes."}, status=413
    )


@api.exception_handler(Http404)
def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    # One message whether or not the session exists: no existence leak.
    return api.create_response(request, {"detail": "Not found."}, status=404)


@api.exception_handler(AuthenticationError)
def unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = api.create_response(
        request,
        {"detail": "Authentication required: send Authorization: Bearer <token>."},
        status=401,
    )
    response["WWW-Authenticate"] = 'Bearer realm="deep-think"'
    return response


def form_errors(form: StartSessionForm | SteerForm | EstimateForm) -> ValidationError:
    """The start form's errors in the shape of ninja's own 422s."""
    errors = []
    for field, messages in form.errors.get_json_data().items():
        loc = ["body", "payload"] if field == "__all__" else ["body", "payload", field]
        for message in messages:
            errors.append(
                {"loc": loc, "msg": message["message"], "type": message["code"] or "invalid"}
            )
    return ValidationError(errors)


# --- sessions ---------------------------------------------------------------------------


class StartIn(Schema):
    """The start form's fields. Empty advanced settings take the deployment's defaults."""

    model_config = STRICT

    question: str
    minutes: float = Field(description="Active thinking time; pauses do not count.")
    synthesis_minutes: float | None = Field(
        None, description="Synthesis interval; empty: a quarter of the budget, at most 5."
    )
    thinking_mode: ThinkingMode | None = None
    thinking_budget: int | None = Field(
        None,
        ge=0,
        le=MAX_INT,
        description="Manual thinking's budget. With thinking_mode auto (or empty) on a model "
        "that takes manual thinking it means manual; where it cannot apply: 422.",
    )
    effort: Effort | None = None
    max_tokens: int | None = Field(None, ge=0, le=MAX_INT)
    token_ceiling: int | None = Field(None, ge=0, le=MAX_BIGINT)
    model: str | None = Field(
        None, max_length=100, description="The model that thinks; one the server lists."
    )
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        le=1e6,
        description="Dollar ceiling (list prices): the final answer is written within it. "
        "Refused (422) for a model without a known price.",
    )
    format_mode: FormatMode | None = None
    format_spec: list[dict[str, Any]] | str | None = Field(
        None, description="For the custom format: the tag spec, as JSON or a JSON string."
    )
    team: int | None = Field(
        None, ge=1, le=MAX_BIGINT, description="Share with one of your teams (its id)."
    )
    research: bool = Field(
        True,
        description="false: no plan, no searches, no evidence, no search tools; "
        "the model's own knowledge only.",
    )
    web: bool = Field(True, description="false: research never searches the web.")
    tools: list[Literal["search", "think", "progress"]] | None = Field(
        None,
        description="The tools the model may use while it thinks: search (web and knowledge "
        "base, only while research is on), think (a scratchpad), progress (a status line). "
        "[]: none. Empty: every tool the deployment offers.",
    )
    notify: bool | None = Field(
        None,
        description="Mail me when it ends. Empty: your account's default (by default, for "
        "budgets of 10 minutes or more).",
    )
    webhook_url: str | None = Field(
        None,
        max_length=2000,
        description="When it ends, POST its summary here, signed with your webhook key "
        "(Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature; make the key "
        "on /settings/tokens/ first). A private, loopback or link-local address is refused "
        "(422).",
    )
    parent: uuid.UUID | None = Field(
        None, description="Follow up this finished session: its answer and sources carry over."
    )
    web_search: list[str] | None = Field(
        None,
        max_length=3,
        description="The web search providers to use (exa, searxng, tavily), among those set "
        "up on the server; several are searched side by side. Empty: the server's default. "
        "An unknown or unconfigured one: 422.",
    )
    include_domains: list[str] | None = Field(
        None, max_length=20, description="Web results only from these domains (and subdomains)."
    )
    exclude_domains: list[str] | None = Field(
        None, max_length=20, description="Web results never from these domains (and subdomains)."
    )
    search_recency: SearchRecency | None = Field(
        None, description="How recent web pages must be: day, week, month or year."
    )
    language: str | None = Field(
        None,
        max_length=40,
        description="The language of its thoughts, syntheses and answer (e.g. French). "
        "Empty: the language of the question.",
    )

    def form_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for name, value in self.model_dump().items():
            if value is None:
                data[name] = ""
            elif name in ("research", "web"):
                data[name] = "on" if value else "off"
            elif name == "parent":
                data[name] = str(value)
            elif name == "format_spec" and not isinstance(value, str):
                data[name] = json.dumps(value)
            elif name == "tools":
                data["tools"], data["tools_chosen"] = list(value), "on"
            elif name in ("include_domains", "exclude_domains"):
                data[name] = "\n".join(value)
            else:
                data[name] = value
        return data


class EstimateIn(Schema):
    """The settings a session's cost depends on; empty ones take the deployment's defaults."""

    model_config = STRICT

    minutes: float = Field(description="Active thinking time.")
    model: str | None = Field(None, max_length=100)
    research: bool = True
    max_cost_usd: float | None = Field(None, gt=0, le=1e6)
    token_ceiling: int | None = Field(None, ge=0, le=MAX_BIGINT)


class EstimateOut(Schema):
    model: str
    fast_model: str = Field(description="The model of the utility calls.")
    minutes: float
    research: bool
    expected_usd: float | None = Field(description="Null when a model has no known price.")
    low_usd: float | None
    high_usd: float | None
    calls: int = Field(description="Model calls expected.")
    tokens: int
    calls_per_minute: float = Field(description="The figure the estimate is made from.")
    source: str = Field(
        description="Where that figure comes from: this server's recent sessions, or the "
        "built-in benchmark figures until there are enough."
    )
    capped_by: str | None = Field(description="A ceiling that bounds the cost, if any.")
    unpriced_models: list[str]
    summary: str = Field(description="The estimate in one sentence.")


class SessionSettingsOut(Schema):
    model: str
    synthesis_interval_seconds: float
    thinking_mode: ThinkingMode
    thinking_budget: int | None
    effort: Effort
    max_tokens: int
    token_ceiling: int | None
    max_cost_usd: float | None = None
    format_mode: FormatMode
    tools: list[str] = Field(description="The tools the model may use: search, think, progress.")
    web_search: list[str] = Field(description="Its web search providers; []: the default.")
    include_domains: list[str]
    exclude_domains: list[str]
    search_recency: SearchRecency
    language: str = Field(description="The language it writes in; empty: the question's.")


class CountsOut(Schema):
    thoughts: int
    sub_questions: int
    syntheses: int
    sources: int


class ModelUsageOut(Schema):
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    total_tokens: int
    cost_usd: float | None = Field(description="Its calls at its list price; null if unknown.")


class UsageOut(Schema):
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    total_tokens: int
    estimated_cost_usd: float | None = Field(
        description="Each call at its own model's list price; null once a model had no price."
    )
    truncated_replies: int = Field(
        0, description="Replies still cut off by max_tokens after a retry (kept as parsed)."
    )
    by_model: list[ModelUsageOut] = Field(description="Calls, tokens and cost per model.")


class WaitingOut(Schema):
    since: datetime
    reason: str


class SessionSummaryOut(Schema):
    id: uuid.UUID
    url: str = Field(description="The session's page.")
    question: str
    status: Status
    completion_reason: CompletionReason | None
    progress_percent: float
    final_confidence: float | None
    created_at: datetime
    finished_at: datetime | None


class ReferenceToolOut(Schema):
    tool: Literal["plan", "web_search", "memory_search"]
    label: str
    searches: int
    new: int = Field(description="Sources it found first.")
    known: int = Field(description="Sources it found again that already had a number.")


class CitationCountsOut(Schema):
    supported: int
    partial: int
    unsupported: int
    unchecked: int


class StageOut(Schema):
    stage: str = Field(description="planning, research, analysis, synthesis, reflection, note")
    label: str
    message: str
    at: datetime
    by: str = Field("loop", description="loop: entered by the loop; model: its progress tool.")
    plan_step: int | None = None
    total_steps: int | None = None
    confidence: str | None = None
    metadata: dict[str, str] | None = None


class FormatErrorOut(Schema):
    cycle: int
    route: str = Field(description="How the reply was read: tags, lines, prose or empty.")
    errors: list[str]


class SessionLinkOut(Schema):
    id: uuid.UUID
    url: str
    question: str


class ExtensionOut(Schema):
    minutes: float
    created_at: datetime


class SessionOut(SessionSummaryOut):
    parent: SessionLinkOut | None = Field(description="The session this one follows up.")
    children: list[SessionLinkOut] = Field(description="Follow-ups of this session.")
    notify: bool = Field(description="A mail goes to the owner when it ends.")
    webhook_url: str | None = Field(description="Only its owner sees it; null for others.")
    extensions: list[ExtensionOut] = Field(description="Each time it was given more time.")
    completion_note: str | None
    error: str | None
    revision: int = Field(description="Changes whenever anything stored changes.")
    conclude_requested: bool = Field(description="Asked to write its answer now.")
    budget_seconds: float
    elapsed_seconds: float
    remaining_seconds: float
    started_at: datetime | None
    focus: str | None
    waiting: WaitingOut | None = Field(description="Set while the model provider is away.")
    settings: SessionSettingsOut
    counts: CountsOut
    confidence_evolution: list[float]
    usage: UsageOut
    final_answer: str | None
    reference_summary: list[ReferenceToolOut] = Field(description="Sources per search tool.")
    citation_checks: CitationCountsOut = Field(description="Verdicts on cited claims.")
    research: bool = Field(description="Research on: a plan, searches, evidence, search tools.")
    web: bool = Field(description="Web search allowed for research.")
    plan: dict[str, Any] = Field(description="Steps, current step, terms and queries.")
    progress: StageOut | None = Field(description="The latest stage.")
    stages: list[StageOut] = Field(description="The newest 300 stages, oldest first.")
    research_notes: list[str]
    unknown_citations: int = Field(description="Citations [n] that match no stored source.")
    parse_routes: dict[str, int] = Field(description="How thought replies were read.")
    format_errors: list[FormatErrorOut] = Field(description="Format problems per cycle.")


class SessionPageOut(Schema):
    count: int = Field(description="Sessions matching the filter, on all pages.")
    limit: int
    offset: int
    items: list[SessionSummaryOut]


class ListParams(Schema):
    status: Status | None = Field(None, description="Only sessions in this status.")
    limit: int = Field(25, ge=1, le=100, description="Page size, newest first.")
    offset: int = Field(0, ge=0, le=MAX_INT, description="Sessions to skip.")


def summary(session: ThinkingSession) -> dict[str, Any]:
    return {
        "id": session.pk,
        "url": session.get_absolute_url(),
        "question": session.question,
        "status": session.status,
        "completion_reason": session.completion_reason or None,
        "progress_percent": round(session.progress_percent(), 2),
        "final_confidence": session.final_confidence,
        "created_at": session.created_at,
        "finished_at": session.finished_at,
    }


def detail(session: ThinkingSession, viewer: Any = None) -> dict[str, Any]:
    waiting = None
    if session.waiting_since and not session.is_finished:
        waiting = {"since": session.waiting_since, "reason": session.waiting_reason}
    return {
        **summary(session),
        "completion_note": session.completion_note or None,
        "error": session.error_message or None,
        "revision": session.revision,
        "conclude_requested": session.conclude_requested,
        "budget_seconds": session.budget_seconds,
        "elapsed_seconds": round(session.elapsed_seconds(), 3),
        "remaining_seconds": round(session.remaining_seconds(), 3),
        "started_at": session.started_at,
        "focus": session.focus or None,
        "waiting": waiting,
        "settings": {
            "model": session.model_id,
            "synthesis_interval_seconds": session.synthesis_interval_seconds,
            "thinking_mode": session.thinking_mode,
            "thinking_budget": session.thinking_budget,
            "effort": session.effort,
            "max_tokens": session.max_tokens,
            "token_ceiling": session.token_ceiling,
            "max_cost_usd": float(session.max_cost_usd)
            if session.max_cost_usd is not None
            else None,
            "format_mode": session.format_mode,
            "tools": tools.chosen(session),
            "web_search": list(session.web_search),
            "include_domains": list(session.include_domains),
            "exclude_domains": list(session.exclude_domains),
            "search_recency": session.search_recency,
            "language": session.language,
        },
        "counts": {
            "thoughts": session.thoughts.count(),
            "sub_questions": session.sub_questions.count(),
            "syntheses": session.syntheses.count(),
            "sources": session.sources.count(),
        },
        "confidence_evolution": session.confidence_evolution,
        "usage": {
            "input_tokens": session.input_tokens,
            "output_tokens": session.output_tokens,
            "cache_read_tokens": session.cache_read_tokens,
            "cache_write_tokens": session.cache_write_tokens,
            "total_tokens": session.total_tokens,
            "estimated_cost_usd": session.estimated_cost,
            "truncated_replies": session.truncated_replies,
            "by_model": model_usage(session),
        },
        "final_answer": session.final_answer or None,
        "reference_summary": reference_summary(session),
        "citation_checks": session_counts(session),
        "research": session.research_enabled,
        "web": session.web_enabled,
        "plan": session.plan if isinstance(session.plan, dict) else {},
        "progress": session.progress if session.progress.get("message") else None,
        "stages": stages.served(session),
        "research_notes": list(session.research_notes),
        "unknown_citations": session.unknown_citations,
        "parse_routes": session.parse_routes,
        "format_errors": list(session.format_errors),
        **followups.links(session, viewer or session.owner),
        "notify": session.notify_email,
        # The owner's alone: the URL (and any secret in its path) is not the team's.
        "webhook_url": (session.webhook_url or None)
        if session.is_owned_by(viewer or session.owner)
        else None,
        "extensions": list(session.extensions.values("minutes", "created_at")),
    }


@api.post(
    "/sessions",
    response={201: SessionOut, 400: ErrorOut, **CHANGE_ERRORS},
    tags=["sessions"],
    summary="Start a session",
)
def start_session(request: ApiRequest, payload: StartIn) -> ninja.Status[dict[str, Any]]:
    """Validated like the start page; returns at once with status `created` while a worker
    picks the session up. With `parent`, a follow-up: a parent you may not see is a 404."""
    if payload.parent is not None:
        get_session_for(request.auth, payload.parent)
    form = StartSessionForm(payload.form_data(), user=request.auth)
    session = actions.start(form, owner=request.auth)
    if session is None:
        raise form_errors(form)
    return ninja.Status(201, detail(session, request.auth))


@api.post(
    "/sessions/estimate",
    response={200: EstimateOut, 400: ErrorOut, **CHANGE_ERRORS},
    tags=["sessions"],
    summary="Estimate a session's cost",
)
def estimate_session(request: ApiRequest, payload: EstimateIn) -> dict[str, Any]:
    """What a session with these settings is expected to cost, before starting it: a range
    from the price table and the calls per thinking-minute (measured on this server's recent
    sessions, else the built-in benchmark figures; `source` says which). Starts nothing."""
    data = {k: "" if v is None else v for k, v in payload.model_dump().items()}
    data["research"] = "on" if payload.research else "off"
    form = EstimateForm(data)
    found = form.estimate()
    if found is None:
        raise form_errors(form)
    return {**found.as_json(), "summary": found.summary}


@api.get("/sessions", response={200: SessionPageOut, **ERRORS}, tags=["sessions"])
def list_sessions(request: ApiRequest, params: Query[ListParams]) -> dict[str, Any]:
    """The sessions you may see, newest first, `limit` at a time."""
    sessions = ThinkingSession.objects.visible_to(request.auth)
    if params.status:
        sessions = sessions.filter(status=params.status)
    page = sessions[params.offset : params.offset + params.limit]
    return {
        "count": sessions.count(),
        "limit": params.limit,
        "offset": params.offset,
        "items": [summary(s) for s in page],
    }


@api.get("/sessions/{session_id}", response={200: SessionOut, **ERRORS}, tags=["sessions"])
def get_session(request: ApiRequest, session_id: uuid.UUID) -> dict[str, Any]:
    return detail(get_session_for(request.auth, session_id), request.auth)


# --- steering -------------------------------------------------------------------------

TRANSITION = {**CHANGE_ERRORS, 200: SessionOut, 409: ErrorOut}


CHANGES = {
    "pause": actions.pause,
    "resume": actions.resume,
    "cancel": actions.cancel,
    "conclude": actions.conclude,
}


def change_state(request: ApiRequest, session_id: uuid.UUID, action: str) -> dict[str, Any]:
    session = get_session_for(request.auth, session_id)
    try:
        CHANGES[action](session, user=request.auth)
    except actions.NotAllowed as error:
        raise HttpError(403, str(error)) from None
    except (IllegalTransition, limits.LimitRefused) as error:
        raise HttpError(409, str(error)) from None
    return detail(session, request.auth)


@api.post("/sessions/{session_id}/pause", response=TRANSITION, tags=["steering"])
def pause_session(request: ApiRequest, session_id: uuid.UUID) -> dict[str, Any]:
    """Only a thinking session can be paused; otherwise 409 with the reason."""
    return change_state(request, session_id, "pause")


@api.post("/sessions/{session_id}/resume", response=TRANSITION, tags=["steering"])
def resume_session(request: ApiRequest, session_id: uuid.UUID) -> dict[str, Any]:
    """Only a paused session can be resumed; otherwise 409 with the reason."""
    return change_state(request, session_id, "resume")


@api.post("/sessions/{session_id}/cancel", response=TRANSITION, tags=["steering"])
def cancel_session(request: ApiRequest, session_id: uuid.UUID) -> dict[str, Any]:
    """A finished session cannot be cancelled (409). What it stored stays."""
    return change_state(request, session_id, "cancel")


@api.post("/sessions/{session_id}/conclude", response=TRANSITION, tags=["steering"])
def conclude_session(request: ApiRequest, session_id: uuid.UUID) -> dict[str, Any]:
    """Write the answer now: a running or paused session stops thinking (a thinking call in
    flight is stopped), writes its final answer from what it has, checks its citations and
    completes with `completion_reason` `concluded`. Owner (or a team owner) only (403); a
    finished session: 409."""
    return change_state(request, session_id, "conclude")


class ExtendIn(Schema):
    model_config = STRICT

    minutes: float = Field(
        ge=followups.MIN_EXTEND_MINUTES,
        le=settings.DEEPTHINK_MAX_MINUTES,
        description="Think this many more minutes.",
    )
    add_remainder: bool = Field(
        False,
        description="Also add the thinking time it left unused (it stopped early: a stop "
        "signal, a ceiling or a conclude).",
    )


@api.post(
    "/sessions/{session_id}/extend",
    response=TRANSITION,
    tags=["steering"],
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ExtendIn.model_json_schema()}},
        }
    },
)
def extend_session(request: ApiRequest, session_id: uuid.UUID) -> dict[str, Any]:
    """Think longer: a completed session continues from what it stored and ends with a new
    final answer; the earlier ones stay (syntheses with `is_final`). Owner (or a team owner)
    only (403); not completed, or over a limit: 409 with the reason; bad minutes: 422."""
    session = get_session_for(request.auth, session_id)
    if not actions.may_extend(session, request.auth):
        raise HttpError(403, "Only the owner can give this session more time.")
    # The body is read only once access is checked: a stranger gets 404, never a parse error.
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {}
    unknown = sorted(set(body) - set(ExtendIn.model_fields))
    if unknown:
        raise ValidationError(
            [{"loc": ["body", "payload", name], "type": "extra_forbidden"} for name in unknown]
        )
    minutes: Any = body.get("minutes")
    problem = followups.minutes_problem(minutes)
    if problem:
        loc = ["body", "payload", "minutes"]
        raise ValidationError([{"loc": loc, "msg": problem, "type": "value_error"}])
    remainder = body.get("add_remainder", False)
    if not isinstance(remainder, bool):
        loc = ["body", "payload", "add_remainder"]
        raise ValidationError([{"loc": loc, "msg": "Give true or false.", "type": "bool_type"}])
    try:
        actions.extend(session, user=request.auth, minutes=float(minutes), add_remainder=remainder)
    except actions.NotAllowed as error:
        raise HttpError(403, str(error)) from None
    except (followups.CannotExtend, limits.LimitRefused) as error:
        raise HttpError(409, str(error)) from None
    return detail(session, request.auth)


# --- incremental reads ----------------------------------------------------------------


class AfterParams(Schema):
    after: int | None = Field(
        None, ge=-1, le=MAX_INT, description="Only rows with a greater sequence number."
    )
    limit: int = Field(
        500, ge=1, le=1000, description="At most this many, oldest first; ask again for more."
    )


class ThoughtOut(Schema):
    sequence: int
    cycle: int
    type: ThoughtType
    text: str
    confidence: float
    parts: dict[str, Any] = Field(description="Structured parts: analysis, plan, reasoning, …")
    reasoning: str | None = Field(description="The model's summarized thinking, if any.")
    time_offset_seconds: float = Field(description="Active thinking time when stored.")
    sub_question_id: int | None
    created_at: datetime


class SubQuestionOut(Schema):
    id: int
    parent_id: int | None
    text: str
    priority: int
    why: str
    initial_priority: int = Field(description="The priority it was created with.")
    priority_changes: list[dict[str, Any]] = Field(
        description="Each re-ranking that moved it: from, to, why, cycle, at."
    )
    explored: bool
    explored_at: datetime | None
    answer: str | None
    created_at: datetime


class CitationCheckOut(Schema):
    claim: str
    number: int
    verdict: Literal["supported", "partial", "unsupported", "unchecked"]
    why: str


class SynthesisOut(Schema):
    sequence: int
    text: str
    key_insights: list[Any]
    confidence: float
    remaining_questions: list[Any]
    time_offset_seconds: float
    is_final: bool
    reasoning: str | None
    created_at: datetime
    citation_checks: list[CitationCheckOut] = Field(
        description="Each cited claim judged against the passage of the source it cites."
    )


class SourceOut(Schema):
    number: int = Field(description="The citation number [n], stable for the session.")
    kind: SourceKind
    title: str
    url: str | None
    snippet: str
    score: float
    query: str
    found_by: str = Field(description="plan, web_search or memory_search: what found it first.")
    created_at: datetime


def newer(rows: Any, field: str, params: AfterParams) -> list[Any]:
    if params.after is not None:
        rows = rows.filter(**{f"{field}__gt": params.after})
    return list(rows.order_by(field)[: params.limit])


@api.get(
    "/sessions/{session_id}/thoughts", response={200: list[ThoughtOut], **ERRORS}, tags=["reads"]
)
def list_thoughts(
    request: ApiRequest, session_id: uuid.UUID, params: Query[AfterParams]
) -> list[dict[str, Any]]:
    session = get_session_for(request.auth, session_id)
    thoughts = session.thoughts.select_related("sub_question")
    return [thought_row(t) for t in newer(thoughts, "sequence", params)]


@api.get(
    "/sessions/{session_id}/sub-questions",
    response={200: list[SubQuestionOut], **ERRORS},
    tags=["reads"],
)
def list_sub_questions(request: ApiRequest, session_id: uuid.UUID) -> list[dict[str, Any]]:
    """All of them, each time: exploring one changes it. Unexplored first, by priority."""
    session = get_session_for(request.auth, session_id)
    return [sub_question_row(q) for q in session.sub_questions.select_related("parent")]


@api.get(
    "/sessions/{session_id}/syntheses",
    response={200: list[SynthesisOut], **ERRORS},
    tags=["reads"],
)
def list_syntheses(
    request: ApiRequest, session_id: uuid.UUID, params: Query[AfterParams]
) -> list[dict[str, Any]]:
    session = get_session_for(request.auth, session_id)
    return [synthesis_row(s) for s in newer(session.syntheses.all(), "sequence", params)]


@api.get(
    "/sessions/{session_id}/sources", response={200: list[SourceOut], **ERRORS}, tags=["reads"]
)
def list_sources(
    request: ApiRequest, session_id: uuid.UUID, params: Query[AfterParams]
) -> list[dict[str, Any]]:
    """Evidence the session found; `after` is a citation number here."""
    session = get_session_for(request.auth, session_id)
    return [source_row(s) for s in newer(session.sources.all(), "number", params)]


# --- steering through the API -------------------------------------------------------


class SteerIn(Schema):
    model_config = STRICT

    kind: Literal["hint", "question"] = Field(
        description="hint: included in the next prompts; question: a sub-question explored "
        "next, at top priority."
    )
    text: str = Field(
        min_length=1, max_length=1000, description="Stripped of surrounding spaces; not empty."
    )


class SteerOut(Schema):
    thought: ThoughtOut = Field(description="The steering, as stored in the thought stream.")
    notice: str


def _steer_body() -> dict[str, Any]:
    """The request body's schema, for the OpenAPI document (the view reads it itself)."""
    schema = SteerIn.model_json_schema()
    return {"required": True, "content": {"application/json": {"schema": schema}}}


@api.post(
    "/sessions/{session_id}/steer",
    response={201: SteerOut, 400: ErrorOut, **CHANGE_ERRORS, 409: ErrorOut},
    tags=["steering"],
    openapi_extra={"requestBody": _steer_body()},
)
def steer_session(request: ApiRequest, session_id: uuid.UUID) -> ninja.Status[dict[str, Any]]:
    """The page's steering: anyone who may see the session may steer it while it is not
    finished (409 otherwise). Validated like the page's form (422)."""
    # Access first, the body after: a session the caller may not see is a 404 whatever was
    # sent, so a malformed body cannot reveal that it exists.
    session = get_session_for(request.auth, session_id)
    try:
        payload = SteerIn.model_validate_json(request.body or b"{}")
    except pydantic.ValidationError as error:
        if any(e["type"] == "json_invalid" for e in error.errors()):
            raise HttpError(400, "The body must be a JSON object.") from None
        raise ValidationError(
            [
                {"loc": ["body", "payload", *e["loc"]], "msg": e["msg"], "type": e["type"]}
                for e in error.errors()
            ]
        ) from None
    form = SteerForm({"kind": payload.kind, "text": payload.text})
    if not form.is_valid():
        raise form_errors(form)
    try:
        thought = actions.steer(
            session,
            user=request.auth,
            kind=form.cleaned_data["kind"],
            text=form.cleaned_data["text"],
        )
    except actions.NotAllowed as error:
        raise HttpError(403, str(error)) from None
    except IllegalTransition as error:
        raise HttpError(409, str(error)) from None
    notice = (
        "Added: it will be explored next."
        if thought.type == "question"
        else "Noted: the next prompts include your hint."
    )
    return ninja.Status(201, {"thought": thought_row(thought), "notice": notice})


# --- export -----------------------------------------------------------------------------


class ExportParams(Schema):
    format: Literal["json", "md"] = Field(
        "json", description="json: everything stored (the CLI's --json); md: a report."
    )


@api.get(
    "/sessions/{session_id}/export",
    response={200: dict[str, Any], **ERRORS},
    tags=["export"],
    openapi_extra={
        "responses": {200: {"content": {"text/markdown": {"schema": {"type": "string"}}}}}
    },
)
def export_session(
    request: ApiRequest, session_id: uuid.UUID, params: Query[ExportParams]
) -> StreamingHttpResponse:
    """A download: the JSON document, or the Markdown report with `format=md`. Streamed,
    its rows read a chunk at a time, so a long session's export is never held whole."""
    session = get_session_for(request.auth, session_id)
    if params.format == "md":
        chunks, kind = markdown_chunks(session), "text/markdown; charset=utf-8"
    else:
        chunks, kind = document_chunks(session), "application/json; charset=utf-8"
    response = StreamingHttpResponse(streamed(request, batched_text(chunks)), content_type=kind)
    response["Content-Disposition"] = (
        f'attachment; filename="deep-think-{session.pk}.{params.format}"'
    )
    return response


# --- knowledge ----------------------------------------------------------------------------
# Mounted last so research's routes (research/api.py) share this API's auth and errors.
api.add_router("/knowledge", "research.api.router")
