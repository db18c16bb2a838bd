"""People's actions on a session, shared by the pages, the API and the terminal: who may do
what, and the doorbell and live update only after the commit."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone

from accounts.models import Membership, Role, Team
from thinking.events import SessionEvent
from thinking.models import CompletionReason, IllegalTransition, Status, ThinkingSession, Thought
from thinking.people import actions, followups, limits
from thinking.web.forms import StartSessionForm, SteerForm

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    events: list[Any] = []
    monkeypatch.setattr("thinking.people.actions.publish_sync", events.append)
    return events


@pytest.mark.parametrize("action", ["pause", "cancel"])
def test_someone_who_cannot_see_the_session_changes_nothing(
    make_session: Any, bob: Any, published: list, action: str
):
    session = make_session(status=Status.THINKING)
    with pytest.raises(actions.NotAllowed):
        getattr(actions, action)(session, user=bob)
    session.refresh_from_db()
    assert session.status == Status.THINKING and published == []


def test_a_stranger_cannot_steer(make_session: Any, bob: Any):
    session = make_session(status=Status.THINKING)
    with pytest.raises(actions.NotAllowed):
        actions.steer(session, user=bob, kind="hint", text="Look elsewhere")
    assert not session.thoughts.exists()


@pytest.mark.parametrize("status", [Status.CREATED, Status.THINKING, Status.PAUSED])
def test_the_owner_cancels_and_every_page_hears_of_it(
    make_session: Any, alice: Any, published: list, status: str
):
    now = timezone.now()
    session = make_session(
        status=status, active_seconds=3.0, running_since=now - timedelta(seconds=5)
    )
    with time_machine.travel(now, tick=False):
        actions.cancel(session, user=alice)
    stored = ThinkingSession.objects.get(pk=session.pk)
    assert (stored.status, stored.completion_reason, stored.finished_at) == (
        Status.CANCELLED,
        CompletionReason.CANCELLED,
        now,
    )
    assert stored.running_since is None, "the clock stopped: the admin shows no running time"
    assert session.status == Status.CANCELLED, "the caller's copy is the stored one"
    assert published == [SessionEvent(session.pk, finished=True)]


def test_pausing_stops_the_session_and_every_page_hears_of_it(
    make_session: Any, alice: Any, published: list
):
    session = make_session(status=Status.THINKING)
    actions.pause(session, user=alice)
    assert ThinkingSession.objects.get(pk=session.pk).status == Status.PAUSED
    assert published == [SessionEvent(session.pk, finished=False)]
    with pytest.raises(IllegalTransition, match=r"^Cannot pause a session that is paused\.$"):
        actions.pause(session, user=alice)
    assert len(published) == 1


def test_resume_rings_the_doorbell_once_committed(
    make_session: Any, alice: Any, rang: list, published: list
):
    session = make_session(status=Status.PAUSED)
    with transaction.atomic():
        actions.resume(session, user=alice)
        assert rang == [] and published == [], "nothing leaves before the commit"
    assert rang == [session.pk] and len(published) == 1


def test_steering_a_session_cancelled_meanwhile_is_refused_and_the_card_says_it_ended(
    make_session: Any, alice: Any, published: list
):
    session = make_session(status=Status.THINKING)  # the page was loaded while it thought
    ThinkingSession.objects.filter(pk=session.pk).update(status=Status.CANCELLED)  # another tab
    with pytest.raises(IllegalTransition, match=r"^Cannot steer a session that is cancelled\.$"):
        actions.steer(session, user=alice, kind="hint", text="Too late")
    assert not Thought.objects.exists() and published == []
    # The steer card is re-rendered from the caller's copy: it must say the session ended.
    card = render_to_string("thinking/_steer.html", {"session": session, "steer_form": SteerForm()})
    assert "This session has ended." in card and "<form" not in card


def test_a_rolled_back_steer_publishes_nothing(make_session: Any, alice: Any, published: list):
    session = make_session(status=Status.THINKING)
    with pytest.raises(RuntimeError), transaction.atomic():
        actions.steer(session, user=alice, kind="question", text="What about sleep?")
        raise RuntimeError("the request failed later")
    assert published == [] and not session.thoughts.exists()


def test_an_illegal_change_publishes_nothing(make_session: Any, alice: Any, published: list):
    session = make_session(status=Status.COMPLETED)
    with pytest.raises(IllegalTransition):
        actions.pause(session, user=alice)
    assert published == []


def test_start_validates_creates_and_rings(alice: Any, rang: list, settings: Any):
    settings.ANTHROPIC_API_KEY = "test-key"
    form = StartSessionForm({"question": "Why is the sky blue?", "minutes": 1}, user=alice)
    session = actions.start(form, owner=alice)
    assert session is not None and rang == [session.pk]

    refused = StartSessionForm({"question": "", "minutes": 1}, user=alice)
    assert actions.start(refused, owner=alice) is None
    assert "question" in refused.errors
    assert ThinkingSession.objects.count() == 1 and rang == [session.pk]


def test_start_refuses_without_a_model_provider(alice: Any, rang: list):
    form = StartSessionForm({"question": "Why is the sky blue?", "minutes": 1}, user=alice)
    assert actions.start(form, owner=alice) is None
    assert form.non_field_errors() and rang == []


# --- who may do what to a session shared with a team -------------------------------------------

REFUSALS = {
    "pause": "You cannot pause this session.",
    "resume": "You cannot resume this session.",
    "steer": "You cannot steer this session.",
    "extend": "Only the owner can give this session more time.",
    "cancel": "Only the owner can cancel this session.",
}


def attempt(verb: str, session: ThinkingSession, user: Any) -> None:
    """The verb as a person's request makes it; a refusal by the session's state (it is
    thinking, so it cannot be resumed or extended) means the person was allowed to try."""
    extra: dict[str, dict[str, Any]] = {
        "steer": {"kind": "hint", "text": "Look at whales"},
        "extend": {"minutes": 1, "doorbell": False},
    }
    arguments = extra.get(verb, {})
    with contextlib.suppress(IllegalTransition, followups.CannotExtend):
        getattr(actions, verb)(session, user=user, **arguments)


@pytest.fixture
def shared(make_session: Any, alice: Any, bob: Any, django_user_model: Any) -> dict[str, Any]:
    """alice's session, shared with her team: carol is a member, dave owns the team, erin is
    invited but has not accepted; bob is a stranger."""
    team = Team.objects.create(name="Lab")
    users = {"alice": alice, "bob": bob}
    for name, role, accepted in [
        ("alice", Role.MEMBER, True),
        ("carol", Role.MEMBER, True),
        ("dave", Role.OWNER, True),
        ("erin", Role.OWNER, False),
    ]:
        users[name] = users.get(name) or django_user_model.objects.create_user(name)
        Membership.objects.create(
            team=team, user=users[name], role=role, accepted_at=timezone.now() if accepted else None
        )
    return {"users": users, "session": make_session(status=Status.THINKING, team=team)}


@pytest.mark.parametrize(
    ("who", "refused"),
    [
        ("alice", set()),
        ("dave", {"cancel"}),  # the team's owner may spend on it, not end it
        ("carol", {"extend", "cancel"}),
        ("erin", set(REFUSALS)),  # an invitation shows nothing of the team
        ("bob", set(REFUSALS)),
    ],
)
def test_who_may_do_what_to_a_shared_session(
    shared: dict[str, Any], rang: list, published: list, who: str, refused: set[str]
):
    session, user = shared["session"], shared["users"][who]
    for verb, message in REFUSALS.items():
        if verb in refused:
            with pytest.raises(actions.NotAllowed) as refusal:
                attempt(verb, session, user)
            assert str(refusal.value) == message
        else:
            attempt(verb, session, user)
    session.refresh_from_db()
    # Paused and resumed by whoever may; ended only by the owner.
    assert session.status == (Status.THINKING if "cancel" in refused else Status.CANCELLED)


def test_only_the_owner_may_give_an_unshared_session_more_time(
    make_session: Any, bob: Any, rang: list
):
    session = make_session(status=Status.COMPLETED, completion_reason=CompletionReason.BUDGET)
    with pytest.raises(actions.NotAllowed, match=r"^Only the owner can give"):
        actions.extend(session, user=bob, minutes=1)
    session.refresh_from_db()
    assert session.status == Status.COMPLETED and rang == []


# --- resuming, starting and extending within the limits ---------------------------------------


def test_a_resume_over_the_owners_limit_is_refused_and_nothing_rings(
    make_session: Any, alice: Any, rang: list, published: list, settings: Any
):
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 1
    make_session(status=Status.THINKING)
    paused = make_session(status=Status.PAUSED)
    with pytest.raises(limits.LimitRefused) as refusal:
        actions.resume(paused, user=alice)
    assert str(refusal.value).startswith("1 session of this owner is thinking; the limit is 1.")
    paused.refresh_from_db()
    assert paused.status == Status.PAUSED and rang == [] and published == []


def test_a_start_over_the_limit_is_explained_on_the_form(
    make_session: Any, alice: Any, rang: list, settings: Any
):
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 1
    form = StartSessionForm({"question": "Why is the sky blue?", "minutes": 1}, user=alice)
    here = actions.start(form, owner=alice, doorbell=False)  # run in this process: no doorbell
    assert here is not None and rang == []

    refused = StartSessionForm({"question": "And the sea?", "minutes": 1}, user=alice)
    assert actions.start(refused, owner=alice) is None
    assert refused.non_field_errors() == [
        "You already have 1 session thinking; the limit is 1. Wait for one to finish, or "
        "pause or cancel one."
    ]
    assert ThinkingSession.objects.count() == 1 and rang == []


def test_the_teams_owner_extends_and_a_worker_is_rung_once_committed(
    shared: dict[str, Any], rang: list, published: list
):
    session = shared["session"]
    ThinkingSession.objects.filter(pk=session.pk).update(
        status=Status.COMPLETED, completion_reason=CompletionReason.BUDGET, active_seconds=60
    )
    session.refresh_from_db()
    with transaction.atomic():
        actions.extend(session, user=shared["users"]["dave"], minutes=2)
        assert rang == [] and published == [], "nothing leaves before the commit"
    session.refresh_from_db()
    assert (session.status, session.budget_seconds) == (Status.CREATED, 180)
    assert rang == [session.pk] and len(published) == 1


def test_an_extension_is_refused_by_state_first_then_by_the_limits(
    make_session: Any, alice: Any, rang: list, settings: Any
):
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 1
    running = make_session(status=Status.THINKING)
    with pytest.raises(followups.CannotExtend) as state:
        actions.extend(running, user=alice, minutes=1)
    assert str(state.value) == "Only a completed session can think longer; this one is thinking."

    done = make_session(status=Status.COMPLETED, completion_reason=CompletionReason.BUDGET)
    with pytest.raises(limits.LimitRefused) as limit:
        actions.extend(done, user=alice, minutes=1, doorbell=False)
    assert str(limit.value).startswith("You already have 1 session thinking; the limit is 1.")
    done.refresh_from_db()
    assert done.status == Status.COMPLETED and rang == []


# A start checked on its form, then refused by the atomic decision at the insert: what someone
# else did in between (started a session, set the team's budget) is explained on the form.


def test_a_start_that_lost_a_race_for_the_last_slot_is_explained_on_the_form(
    make_session: Any, alice: Any, rang: list, settings: Any
):
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 1
    form = StartSessionForm({"question": "Why is the sky blue?", "minutes": 1}, user=alice)
    assert form.is_valid()  # checked while nothing ran
    make_session(status=Status.THINKING)  # alice's other tab started one meanwhile
    assert actions.start(form, owner=alice) is None
    assert form.non_field_errors() == [
        "You already have 1 session thinking; the limit is 1. Wait for one to finish, or "
        "pause or cancel one."
    ]
    assert ThinkingSession.objects.count() == 1 and rang == []


def test_a_start_after_the_team_budget_ran_out_meanwhile_is_explained_on_the_form(
    alice: Any, rang: list, settings: Any
):
    settings.ANTHROPIC_API_KEY = "test-key"
    team = Team.objects.create(name="Lab", monthly_token_budget=10_000)
    Membership.objects.create(team=team, user=alice, role=Role.OWNER, accepted_at=timezone.now())
    data = {"question": "Why is the sky blue?", "minutes": 1, "team": team.pk}
    form = StartSessionForm(data, user=alice)
    assert form.is_valid()
    Team.objects.filter(pk=team.pk).update(monthly_token_budget=0)  # its owner lowered it meanwhile
    assert actions.start(form, owner=alice) is None
    assert form.non_field_errors() == [
        "The team Lab has used or reserved all of its 0 tokens for this month (running sessions "
        "hold their ceilings until they finish)."
    ]
    assert not ThinkingSession.objects.exists() and rang == []


@pytest.mark.parametrize("meanwhile", [False, True])
def test_an_extension_beyond_the_teams_budget_is_refused_in_words(
    make_session: Any, alice: Any, rang: list, meanwhile: bool
):
    team = Team.objects.create(name="Lab", monthly_token_budget=None if meanwhile else 0)
    Membership.objects.create(team=team, user=alice, role=Role.OWNER, accepted_at=timezone.now())
    session = make_session(
        status=Status.COMPLETED, completion_reason=CompletionReason.BUDGET, team=team
    )
    if meanwhile:  # the page was read before the team's owner set the budget
        Team.objects.filter(pk=team.pk).update(monthly_token_budget=0)
    with pytest.raises(limits.LimitRefused) as refusal:
        actions.extend(session, user=alice, minutes=1)
    assert str(refusal.value) == (
        "The team Lab has used or reserved all of its 0 tokens for this month (running sessions "
        "hold their ceilings until they finish)."
        if meanwhile
        else "The team Lab has used its 0 tokens for this month (running sessions count at "
        "their ceilings until they finish)."
    )
    session.refresh_from_db()
    assert session.status == Status.COMPLETED and rang == []
