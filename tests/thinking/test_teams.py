"""Teams: sharing sessions and knowledge with teammates, and nobody else; limits."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import Membership, Role, Team
from accounts.tokens import create_token
from research.knowledge import add_item
from research.memory import search_memory
from research.models import KnowledgeItem
from tests.helpers import add_thought, communicator, login, record_call
from thinking.events import SessionEvent
from thinking.models import CompletionReason, Status, ThinkingSession
from thinking.page.broadcast import publish
from thinking.people import limits


@pytest.fixture
def carol(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("carol", password="carol-pass-123")


@pytest.fixture
def team(alice: Any, carol: Any) -> Team:
    team = Team.objects.create(name="Lab")
    Membership.objects.create(accepted_at=timezone.now(), team=team, user=alice, role=Role.OWNER)
    Membership.objects.create(accepted_at=timezone.now(), team=team, user=carol, role=Role.MEMBER)
    return team


@pytest.mark.django_db
def test_a_shared_session_is_visible_to_the_team_and_nobody_else(
    make_session: Any, team: Team, alice: Any, bob: Any, carol: Any
):
    shared = make_session(question="Shared", team=team)
    private = make_session(question="Private")
    assert set(ThinkingSession.objects.visible_to(carol)) == {shared}
    assert set(ThinkingSession.objects.visible_to(alice)) == {shared, private}
    assert not ThinkingSession.objects.visible_to(bob).exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("who", "status"), [("carol", 200), ("bob", 404)])
def test_teammates_can_open_and_pause_a_shared_session(
    client: Any, make_session: Any, team: Team, request: Any, who: str, status: int
):
    session = make_session(team=team, status=Status.THINKING)
    client.force_login(request.getfixturevalue(who))
    assert client.get(session.get_absolute_url()).status_code == status
    response = client.post(reverse("session-pause", args=[session.pk]))
    session.refresh_from_db()
    assert (session.status == Status.PAUSED) is (status == 200)
    assert response.status_code in ((302,) if status == 200 else (404,))


@pytest.mark.django_db
def test_a_teammate_cannot_cancel_someone_elses_session(
    client: Any, make_session: Any, team: Team, carol: Any
):
    session = make_session(team=team, status=Status.THINKING)
    client.force_login(carol)
    response = client.post(reverse("session-cancel", args=[session.pk]))
    session.refresh_from_db()
    assert session.status == Status.THINKING
    assert response.status_code == 403


@pytest.mark.django_db
def test_shared_knowledge_is_found_by_teammates_sessions(
    alice: Any, carol: Any, bob: Any, team: Team
):
    add_item(owner=carol, title="Octopus sleep notes", body="Octopuses change colour asleep.")
    item = KnowledgeItem.objects.get()
    assert not search_memory(owner_ids=[alice.pk], query="octopus")
    item.team = team
    item.save()
    found = search_memory(owner_ids=[alice.pk], team_ids=[team.pk], query="octopus")
    assert [r.title for r in found] == ["Octopus sleep notes"]
    assert set(KnowledgeItem.objects.visible_to(alice)) == {item}
    assert not KnowledgeItem.objects.visible_to(bob).exists()


@pytest.mark.django_db
def test_only_the_author_deletes_a_shared_item(client: Any, alice: Any, carol: Any, team: Team):
    item = add_item(owner=carol, title="Carol's note", body="x")
    item.team = team
    item.save()
    client.force_login(alice)
    assert client.get(item.get_absolute_url()).status_code == 200
    assert client.post(reverse("knowledge-delete", args=[item.pk])).status_code == 403
    assert KnowledgeItem.objects.filter(pk=item.pk).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("recheck", [0, 1])
async def test_a_page_open_when_membership_ends_stops_receiving(
    make_session: Any, team: Team, carol: Any, settings: Any, recheck: int
):
    # Pages recheck at staggered points, each no later than the interval after it opened.
    settings.DEEPTHINK_WS_RECHECK_SECONDS = recheck
    session = await sync_to_async(make_session)(team=team, status=Status.THINKING)
    comm = communicator(session.pk, await login(carol), rev=0)
    assert (await comm.connect())[0]
    await Membership.objects.filter(user=carol).adelete()
    await asyncio.sleep(recheck)

    await add_thought(session, 0, "for the team only")
    await publish(SessionEvent(session.pk, thoughts=(0,)))
    output = await comm.receive_output(timeout=2)
    assert output["type"] == "websocket.close" and output["code"] == 4403


@pytest.mark.django_db
def test_limits_refuse_with_reasons(alice: Any, make_session: Any, settings: Any, team: Team):
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 2
    settings.DEEPTHINK_SESSIONS_PER_HOUR = 3
    assert limits.refuse_start(alice, minutes=5) == ""
    make_session(status=Status.THINKING)
    make_session(status=Status.CREATED)
    assert "already have 2 sessions thinking" in limits.refuse_start(alice, minutes=5)

    ThinkingSession.objects.update(status=Status.COMPLETED)
    make_session(status=Status.COMPLETED)
    assert "started 3 sessions in the past hour" in limits.refuse_start(alice, minutes=5)
    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        assert limits.refuse_start(alice, minutes=5) == ""
        assert "longest budget" in limits.refuse_start(alice, minutes=10**6)


@pytest.mark.django_db
def test_a_team_cannot_spend_past_its_monthly_budget(alice: Any, make_session: Any, team: Team):
    team.monthly_token_budget = 10_000
    team.save()
    make_session(team=team, input_tokens=6_000, output_tokens=1_000, status=Status.COMPLETED)
    assert limits.refuse_start(alice, minutes=5, team=team) == ""
    make_session(team=team, input_tokens=3_000, status=Status.COMPLETED)
    assert "has used its 10000 tokens" in limits.refuse_start(alice, minutes=5, team=team)


@pytest.mark.django_db
def test_the_start_form_shares_with_my_team_and_enforces_limits(
    client: Any, alice: Any, bob: Any, team: Team, fake_claude: Any, settings: Any
):
    client.force_login(alice)
    assert "Shared with" in client.get(reverse("home")).text
    client.post(reverse("session-create"), {"question": "Team Q?", "minutes": "1", "team": team.pk})
    assert ThinkingSession.objects.get().team == team

    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 1
    response = client.post(reverse("session-create"), {"question": "Again?", "minutes": "1"})
    assert response.status_code == 422 and "already have 1 session thinking" in response.text
    assert ThinkingSession.objects.count() == 1

    client.force_login(bob)  # not in the team: cannot share with it
    response = client.post(
        reverse("session-create"), {"question": "Sneak?", "minutes": "1", "team": team.pk}
    )
    assert response.status_code == 422 and not ThinkingSession.objects.filter(owner=bob).exists()


@pytest.mark.django_db
def test_a_shared_session_is_capped_by_what_is_left_of_the_team_budget(
    client: Any, alice: Any, team: Team, make_session: Any, fake_claude: Any
):
    team.monthly_token_budget = 50_000
    team.save()
    make_session(team=team, input_tokens=45_000, status=Status.COMPLETED)
    client.force_login(alice)
    client.post(reverse("session-create"), {"question": "Q?", "minutes": "1", "team": team.pk})
    # Without its own ceiling a session reserves DEEPTHINK_TEAM_SESSION_SHARE (half) of what
    # is left, so a teammate can still start one alongside it.
    assert ThinkingSession.objects.get(question="Q?").token_ceiling == 2_500


@pytest.mark.django_db
def test_a_budget_set_a_moment_before_a_start_still_caps_it(team: Team, settings: Any):
    """The start form read the team before its owner set a budget; the reservation, made
    under the team's lock, must see the budget and cap the new session by it."""
    from django.db import transaction

    from thinking.people import budget

    settings.DEEPTHINK_TEAM_SESSION_SHARE = 0.5
    as_the_form_read_it = Team.objects.get(pk=team.pk)
    Team.objects.filter(pk=team.pk).update(monthly_token_budget=8_000)
    with transaction.atomic():
        tokens, dollars = budget.reserve(as_the_form_read_it, tokens=None, dollars=None)
    assert (tokens, dollars) == (4_000, None)


def _reserve(team: Team, **asked: Any) -> Any:
    from django.db import transaction

    from thinking.people import budget

    with transaction.atomic():
        return budget.reserve(team, tokens=asked.get("tokens"), dollars=asked.get("dollars"))


@pytest.mark.django_db
def test_a_team_session_reserves_half_of_what_this_months_sessions_of_the_team_left(
    team: Team, make_session: Any, bob: Any, settings: Any
):
    """Finished sessions count what they spent, running ones at least their ceilings; other
    teams' sessions and last month's do not count."""
    settings.DEEPTHINK_TEAM_SESSION_SHARE = 0.5
    Team.objects.filter(pk=team.pk).update(monthly_token_budget=10_000)
    make_session(team=team, status=Status.COMPLETED, input_tokens=2_000, output_tokens=1_000)
    make_session(team=team, status=Status.THINKING, input_tokens=500, token_ceiling=2_000)
    make_session(team=team, status=Status.THINKING)  # no ceiling, nothing spent yet
    other = Team.objects.create(name="Other")
    make_session(owner=bob, team=other, status=Status.COMPLETED, input_tokens=50_000)
    last_month = make_session(team=team, status=Status.COMPLETED, input_tokens=50_000)
    ThinkingSession.objects.filter(pk=last_month.pk).update(
        created_at=limits.month_start() - timedelta(seconds=1)
    )
    # 10,000 - 3,000 - 2,000 = 5,000 left: half of it.
    assert _reserve(team) == (2_500, None)
    # Asked for less than is left: what was asked.
    assert _reserve(team, tokens=1_000) == (1_000, None)


@pytest.mark.django_db
def test_the_last_token_and_the_last_cents_of_a_team_budget(
    team: Team, make_session: Any, settings: Any
):
    from decimal import Decimal

    from thinking.people.budget import BudgetExhausted

    settings.DEEPTHINK_TEAM_SESSION_SHARE = 0.5
    Team.objects.filter(pk=team.pk).update(monthly_token_budget=1_000)
    running = make_session(team=team, status=Status.THINKING, token_ceiling=999)
    assert _reserve(team) == (1, None), "one token left is one token, not refused"
    ThinkingSession.objects.filter(pk=running.pk).update(token_ceiling=1_000)
    with pytest.raises(BudgetExhausted) as refused:
        _reserve(team)
    assert refused.value.messages == [
        "The team Lab has used or reserved all of its 1000 tokens for this month (running "
        "sessions hold their ceilings until they finish)."
    ]

    Team.objects.filter(pk=team.pk).update(monthly_token_budget=None, monthly_cost_budget_usd=10)
    ThinkingSession.objects.filter(pk=running.pk).update(max_cost_usd=Decimal("9.9997"))
    make_session(team=team, status=Status.THINKING)  # no dollar ceiling, nothing spent
    make_session(team=team, status=Status.COMPLETED)  # spent nothing
    # $0.0003 left: half is $0.00015, rounded down to what can be promised.
    assert _reserve(team) == (None, Decimal("0.0001"))
    ThinkingSession.objects.filter(pk=running.pk).update(max_cost_usd=Decimal("9.5"))
    assert _reserve(team) == (None, Decimal("0.25"))
    ThinkingSession.objects.filter(pk=running.pk).update(max_cost_usd=Decimal("10"))
    with pytest.raises(BudgetExhausted) as refused:
        _reserve(team)
    assert refused.value.messages == [
        "The team Lab has used or reserved all of its $10.00 for this month (running "
        "sessions hold their ceilings until they finish)."
    ]
    team.refresh_from_db()
    assert limits.refuse_start(team.memberships.first().user, minutes=5, team=team) == (
        "The team Lab has used its $10.00 for this month (running sessions count at their "
        "ceilings until they finish)."
    )


@pytest.mark.django_db(transaction=True)  # no test-wide transaction around it
def test_a_reservation_outside_the_starting_transaction_is_a_programming_error(team: Team):
    from thinking.people import budget

    with pytest.raises(RuntimeError) as error:
        budget.reserve(team, tokens=None, dollars=None)
    assert str(error.value) == "reserve() must run inside the transaction that creates the session"


@pytest.mark.django_db
def test_a_team_dollar_budget_needs_a_priced_model(
    team: Team, alice: Any, settings: Any, django_user_model: Any
):
    """A team session reserves dollars from the team's budget: on a model without a price
    that reservation could never be held, so the start is refused until it is priced."""
    from thinking.web.forms import StartSessionForm

    settings.DEEPTHINK_MODEL = "a-local-model"
    settings.DEEPTHINK_FAST_MODEL = ""
    Team.objects.filter(pk=team.pk).update(monthly_cost_budget_usd=10)
    data = {"question": "Q?", "minutes": 1, "team": team.pk}
    form = StartSessionForm(data, user=alice)
    assert not form.is_valid()
    [message] = form.errors["max_cost_usd"]
    assert "No price is known for the model 'a-local-model'" in message
    assert "DEEPTHINK_PRICES" in message and "the team Lab's dollar budget" in message

    settings.DEEPTHINK_PRICES = {"a-local-model": {"input": 0.5, "output": 1.5}}
    assert StartSessionForm(data, user=alice).is_valid()


@pytest.mark.django_db
def test_a_session_that_has_spent_exactly_its_dollar_ceiling_stops(make_session: Any):
    """The ceiling is what a person agreed to spend: reaching it is the end, not a cent more."""
    from decimal import Decimal

    from thinking.people import budget

    # claude-sonnet-4 input is $3 per million tokens.
    at_ceiling = make_session(model_id="claude-sonnet-4", max_cost_usd=Decimal("3.00"))
    record_call(at_ceiling, model="claude-sonnet-4", input_tokens=1_000_000)
    below = make_session(model_id="claude-sonnet-4", max_cost_usd=Decimal("3.00"))
    record_call(below, model="claude-sonnet-4", input_tokens=999_999)
    assert budget.session_cost(at_ceiling) == Decimal("3.0")
    assert budget.over_cost_ceiling(at_ceiling) is True
    assert budget.over_cost_ceiling(below) is False


@pytest.mark.django_db
def test_a_team_owner_giving_teammates_sessions_time_stays_within_their_limit(
    alice: Any, carol: Any, make_session: Any, settings: Any, team: Team
):
    """The per-person cap applies to whoever's sessions think: a team owner's "Think longer"
    or resume on a teammate's session counts against the teammate's cap, not only their own
    (the finding: 7 of one person's sessions thinking with a limit of 3)."""
    settings.ANTHROPIC_API_KEY = "test-key"  # configured; no worker runs
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 2
    done = {"status": Status.COMPLETED, "completion_reason": CompletionReason.BUDGET}
    finished = [make_session(owner=carol, team=team, **done) for _ in range(3)]
    paused = make_session(owner=carol, team=team, status=Status.PAUSED)
    api = Client(headers={"Authorization": f"Bearer {create_token(alice, 's')[1]}"})

    def extend(session: ThinkingSession) -> Any:
        return api.post(f"/api/sessions/{session.pk}/extend", {"minutes": 1},
                        content_type="application/json")  # fmt: skip

    assert extend(finished[0]).status_code == 200
    assert extend(finished[1]).status_code == 200
    refused = extend(finished[2])
    assert refused.status_code == 409
    assert refused.json()["detail"] == (
        "2 sessions of this owner are thinking; the limit is 2. Wait for one to finish, then "
        "give this one more time."
    )
    resumed = api.post(f"/api/sessions/{paused.pk}/resume")
    assert resumed.status_code == 409 and "the limit is 2" in resumed.json()["detail"]
    running = [Status.CREATED, Status.THINKING]
    assert ThinkingSession.objects.filter(owner=carol, status__in=running).count() == 2
    # Alice's own cap is untouched by carol's sessions: she may still start her own.
    assert limits.refuse_start(alice, minutes=1) == ""


@pytest.mark.django_db
def test_a_sessions_webhook_url_is_its_owners_alone(
    admin_client: Any, alice: Any, carol: Any, make_session: Any, team: Team
):
    """Teammates may watch and export a shared session, but its webhook URL (and any secret
    in its path) is not theirs: not in the API, the exports, the page or the admin."""
    from django.contrib.auth.models import Permission

    from thinking.models import Delivery

    url = "https://hooks.example.org/hook/s3cret-path-token"
    session = make_session(team=team, webhook_url=url, status=Status.COMPLETED)
    Delivery.objects.create(session=session, kind="webhook", target=url, body="{}")

    def api(user: Any) -> Client:
        return Client(headers={"Authorization": f"Bearer {create_token(user, 's')[1]}"})

    assert api(alice).get(f"/api/sessions/{session.pk}").json()["webhook_url"] == url
    as_carol = api(carol)
    detail = as_carol.get(f"/api/sessions/{session.pk}")
    assert detail.status_code == 200 and detail.json()["webhook_url"] is None
    for fmt in ("json", "md"):
        export = as_carol.get(f"/api/sessions/{session.pk}/export?format={fmt}")
        assert export.status_code == 200 and b"s3cret" not in export.getvalue()  # streamed
    page = Client()
    page.force_login(carol)
    assert "s3cret" not in page.get(session.get_absolute_url()).text

    # Staff who are not superusers see only their own sessions' deliveries in the admin.
    carol.is_staff = True
    carol.save()
    carol.user_permissions.add(Permission.objects.get(codename="view_delivery"))
    page.force_login(carol)
    deliveries = page.get("/admin/thinking/delivery/")
    assert deliveries.status_code == 200 and "s3cret" not in deliveries.text
    assert "s3cret" in admin_client.get("/admin/thinking/delivery/").text
