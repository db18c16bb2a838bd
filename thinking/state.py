"""The shapes of the session state that travels as JSON: the research plan, a stage
(progress) entry, and the channel-layer messages. TypedDicts, so the JSON stored in the
database and sent over the layer stays exactly what it was; mypy checks who builds and reads it.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict


class PlanState(TypedDict, total=False):
    """`ThinkingSession.plan`: `{}` until the planner ran (planner.Plan.to_json), then moved by
    reported steps (stages.record) and the sub-questions researched (steps.py)."""

    steps: list[str]
    terms: list[str]
    web_queries: list[str]
    memory_queries: list[str]
    source: str  # "model" or "heuristic"
    note: str
    current: int  # index of the step in progress
    step_reported: bool  # somebody reported a step: the checklist may move
    researched: list[int]  # sub-question ids already researched


class StageEntry(TypedDict):
    """One entry of a session's stage history (`Stage.entry`); the latest is also
    `ThinkingSession.progress`."""

    stage: str  # one of stages.STAGES
    label: str
    message: str
    at: str  # ISO timestamp
    by: str  # "loop" or "model"
    plan_step: NotRequired[int]
    total_steps: NotRequired[int]
    confidence: NotRequired[str]
    metadata: NotRequired[dict[str, str]]


class PlanStep(TypedDict):
    """The plan as a checklist row (presenters._step_states, drawn by _plan_steps.html)."""

    text: str
    state: Literal["done", "current", "todo"]


# --- channel-layer messages --------------------------------------------------------------


class StartMessage(TypedDict):
    """The doorbell on the `thinking` channel: start (or resume) one session."""

    type: Literal["session.start"]
    id: str


class UpdatePart(TypedDict):
    """One piece of a live update. `kind` is "replace" (an out-of-band swap), "header" (with
    `html_member`, the teammate's variant), or a row kind ("thought", "synthesis", "source",
    "question", "subq") with `seq`, which a page shows once. A moved sub-question ("subq")
    says the state it moves from (`before`)."""

    kind: str
    html: str
    html_member: NotRequired[str]
    seq: NotRequired[int]
    before: NotRequired[str]


class SourceRows(TypedDict):
    """The new sources, rendered once for every page of the group: every source numbered
    above `after` (rows of kind "source", `seq` = number, in order), and the summary line."""

    after: int
    rows: list[UpdatePart]
    summary: str


class QuestionRows(TypedDict):
    """The sub-questions that changed since the last message, rendered once for every page:
    new ones (kind "question") and moved ones (kind "subq", with the state they move from),
    each with `seq` = id; and every sub-question's state now, as (id, state) pairs."""

    states: list[tuple[int, str]]
    rows: list[UpdatePart]


class UpdateMessage(TypedDict):
    """`session.update` to a session's group: the parts, and the new sources and moved
    sub-questions (a page behind what they start from reads its own)."""

    type: Literal["session.update"]
    parts: list[UpdatePart]
    sources: NotRequired[SourceRows]
    questions: NotRequired[QuestionRows]
