"""What people do to a session (start, pause, resume, cancel, conclude, steer, extend), in
one place for the pages, the JSON API and the terminal.

Each action checks who may do it, changes the rows through the model's verbs (which go through
the one step context), and schedules the worker's doorbell and the live update for after the
commit, so a worker or a page never sees a row that is then rolled back. Front ends call these
and never import the worker or the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction

from accounts.models import Role
from thinking.deliberation.worker import Supervisor, new_worker_id, request_start
from thinking.events import Publish, SessionEvent
from thinking.models import ThinkingSession, Thought
from thinking.page.broadcast import publish_sync
from thinking.people import followups, limits
from thinking.people.budget import BudgetExhausted
from thinking.provider import llm
from thinking.web.forms import StartSessionForm


class NotAllowed(PermissionDenied):
    """The person may see the session but not do this to it (a 403, not a 404)."""


def may_act(session: ThinkingSession, user: Any) -> bool:
    """The owner and the members of the session's team may pause, resume and steer."""
    if session.is_owned_by(user):
        return True
    return ThinkingSession.objects.visible_to(user).filter(pk=session.pk).exists()


def may_cancel(session: ThinkingSession, user: Any) -> bool:
    """Ending someone's session is theirs alone; teammates may watch, pause and steer."""
    return session.is_owned_by(user)


def may_extend(session: ThinkingSession, user: Any) -> bool:
    """The owner, or an owner of the team it is shared with: an extension spends money, and
    concluding ends the thinking someone paid for."""
    if session.is_owned_by(user):
        return True
    return session.team is not None and session.team.role_of(user) == Role.OWNER


def _require(allowed: bool, message: str) -> None:
    if not allowed:
        raise NotAllowed(message)


def _publish(event: SessionEvent) -> None:
    # Looked up at call time, so tests can watch what is published.
    publish_sync(event)


def _ring_on_commit(session: ThinkingSession) -> None:
    pk = session.pk
    transaction.on_commit(lambda: request_start(pk))


def start(form: StartSessionForm, *, owner: Any, doorbell: bool = True) -> ThinkingSession | None:
    """Validate the start form (its limits included: `limits.refuse_start`) and create the
    session in one transaction, then ring a worker's doorbell once committed. None when the
    form has errors (they are on the form). `doorbell=False` for a session run in this
    process (`think_here`)."""
    try:
        with transaction.atomic():
            if not llm.is_configured():
                form.add_error(None, llm.NOT_CONFIGURED)
            if not form.is_valid():
                return None
            # The limits and the team's budget are one atomic decision with the insert.
            session = form.create_session(owner=owner)
            if doorbell:
                _ring_on_commit(session)
    except limits.LimitRefused as refused:
        form.add_error(None, str(refused))
        return None
    except BudgetExhausted as error:
        form.add_error(None, error)
        return None
    return session


def pause(session: ThinkingSession, *, user: Any) -> None:
    """Raises IllegalTransition unless it is thinking; the worker stops at the next step."""
    _require(may_act(session, user), "You cannot pause this session.")
    session.pause(publish=_publish)


def resume(session: ThinkingSession, *, user: Any) -> None:
    """Raises IllegalTransition unless it is paused, and limits.LimitRefused when the owner's
    limits do not allow it to think again (decided atomically, like a start)."""
    _require(may_act(session, user), "You cannot resume this session.")
    with transaction.atomic():
        refused = limits.reserve_resume(session)
        if refused:
            raise limits.LimitRefused(refused)
        session.resume(publish=_publish)
        # The worker that paused let go of it: ring for a fresh claim once committed.
        _ring_on_commit(session)


def cancel(session: ThinkingSession, *, user: Any) -> None:
    """Only the owner may cancel (NotAllowed); a finished session raises IllegalTransition.
    What it stored stays."""
    _require(may_cancel(session, user), "Only the owner can cancel this session.")
    session.cancel(publish=_publish)


def conclude(session: ThinkingSession, *, user: Any, doorbell: bool = True) -> None:
    """Write the answer now: a running or paused session stops thinking (a thinking call in
    flight is stopped), writes its final answer from what it has, checks its citations and
    completes as "concluded". The owner or a team owner only (NotAllowed); a finished
    session raises IllegalTransition. A paused one thinks again, straight to its answer,
    in a worker the doorbell calls (`doorbell=False` for `think_here`)."""
    _require(may_extend(session, user), "Only the owner can ask this session for its answer now.")
    with transaction.atomic():
        session.conclude(publish=_publish)
        if doorbell:  # a paused one needs a worker (a running one's keeps its lease)
            _ring_on_commit(session)


def steer(session: ThinkingSession, *, user: Any, kind: str, text: str) -> Thought:
    """A hint for the next prompts, or a sub-question explored next. Raises
    IllegalTransition on a finished session."""
    _require(may_act(session, user), "You cannot steer this session.")
    return session.steer(user=user, kind=kind, text=text, publish=_publish)


def extend(
    session: ThinkingSession,
    *,
    user: Any,
    minutes: float,
    add_remainder: bool = False,
    doorbell: bool = True,
) -> None:
    """Think longer (#19): a completed session thinks `minutes` more (with `add_remainder`,
    plus the time it left unused) and runs again from what it stored. NotAllowed unless
    `may_extend`; followups.CannotExtend unless it completed; limits.LimitRefused when the
    limits (as for a start: the person's running sessions and starts per hour, the team's
    budget; and the session owner's running sessions, when someone else gives it time)
    refuse, decided atomically with the write. `doorbell=False` for a session run in this
    process (`think_here`)."""
    _require(may_extend(session, user), "Only the owner can give this session more time.")
    problem = followups.refuse_extension(session)
    if problem:  # early, so a wrong state is not reported as a limit
        raise followups.CannotExtend(problem)
    try:
        with transaction.atomic():
            # User row, then team row, then (in reopen's step) the session row: the order
            # every start and resume takes them in.
            refused = limits.reserve_extension(session, user, minutes=minutes)
            if refused:
                raise limits.LimitRefused(refused)
            followups.reopen(
                session,
                user=user,
                minutes=minutes,
                add_remainder=add_remainder,
                publish=_publish,
            )
            if doorbell:
                _ring_on_commit(session)
    except BudgetExhausted as error:
        raise limits.LimitRefused(" ".join(error.messages)) from None


async def think_here(session: ThinkingSession, *, publish: Publish) -> bool:
    """Run a session in this process until it stops (the terminal front end). False if
    another worker claimed it first."""

    supervisor = Supervisor(
        worker_id=new_worker_id("cli"), capacity=1, publish=publish, sweeping=False
    )
    if not await supervisor.start(session.pk):
        return False
    heartbeat = asyncio.create_task(supervisor.run_forever())
    try:
        await supervisor.wait_idle()
    finally:
        heartbeat.cancel()
        # Nothing left to stop unless interrupted; either way its client pools are closed.
        await supervisor.shutdown()
    return True
