"""The authorization matrix: every route, generated from the URL configurations, for every
kind of caller. A new route is covered automatically; a route that takes an object id must
answer 404 to anyone who may not see that object (no existence leak).

Roles: anonymous; bob (another user); staff (an administrator, who gets no special access
to people's sessions outside the admin); carol (in alice's team, which the session is
shared with); alice (the owner).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import AnonymousUser
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from accounts.models import Invitation, Membership, Role, Team
from accounts.tokens import create_token
from evaluation.models import EvaluationRun
from research.knowledge import add_item
from tests.helpers import communicator, login
from thinking.models import Status, ThinkingSession
from thinking.web.routing import websocket_urlpatterns

# Public by design: signing in, resetting a password, the API's schema and docs.
PUBLIC = re.compile(r"^(accounts/|api/openapi\.json$|api/docs$|api/$|healthz$)")


def routes() -> Iterator[str]:
    def walk(patterns: list, prefix: str) -> Iterator[str]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if pattern.namespace == "admin":
                    continue
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern)

    seen: set[str] = set()
    for route in walk(get_resolver().url_patterns, ""):
        if route not in seen and not PUBLIC.match(route):
            seen.add(route)
            yield route


ROUTES = sorted(routes())


@pytest.fixture
def world(alice: Any, bob: Any, django_user_model: Any, make_session: Any) -> dict[str, Any]:
    staff = django_user_model.objects.create_superuser("root", password="root-pass-123")
    team = Team.objects.create(name="Alice's team")
    Membership.objects.create(accepted_at=timezone.now(), team=team, user=alice, role=Role.OWNER)
    carol = django_user_model.objects.create_user("carol", password="carol-pass-123")
    Membership.objects.create(accepted_at=timezone.now(), team=team, user=carol, role=Role.MEMBER)
    session = make_session(status=Status.THINKING, team=team)  # shared with the team
    # Bob's team invited alice; she has not answered yet.
    bobs = Team.objects.create(name="Bob's team")
    Membership.objects.create(accepted_at=timezone.now(), team=bobs, user=bob, role=Role.OWNER)
    invitation = Invitation.objects.create(team=bobs, username="alice", invited_by=bob)
    # Bob's other team, where alice is a member offered ownership; and alice's invitation out.
    others = Team.objects.create(name="Bob's other team")
    Membership.objects.create(accepted_at=timezone.now(), team=others, user=bob, role=Role.OWNER)
    offer = Membership.objects.create(
        accepted_at=timezone.now(), team=others, user=alice, offered_role=Role.OWNER
    )
    sent = Invitation.objects.create(team=team, username="nobody-yet", invited_by=alice)
    return {
        "session": session,
        "item": add_item(owner=alice, title="Private note", body="alice only"),
        "token": create_token(alice, name="script")[0],
        "run": EvaluationRun.objects.create(
            name="alice's run", owner=alice, question_set="simpleqa-sample", max_dollars=1
        ),
        "team": team,
        "invitation": invitation,
        "offer": offer,
        "sent": sent,
        "users": {"alice": alice, "bob": bob, "staff": staff, "carol": carol},
    }


def url_for(route: str, world: dict[str, Any]) -> str:
    """The route with the owner's objects filled in."""
    objects = {
        "knowledge/": world["item"].pk,
        "settings/tokens/": world["token"].pk,
        "teams/": world["team"].pk,
        "evaluations/": world["run"].pk,
    }
    path = route
    for placeholder in re.findall(r"<[^>]+>", route):
        name = placeholder.strip("<>").split(":")[-1]
        if name == "user_id":
            value = world["users"]["alice"].pk
        elif name == "membership_id":
            value = world["offer"].pk
        elif name == "invitation_id":
            sent = not route.startswith("teams/invitations/")
            value = world["sent" if sent else "invitation"].pk
        elif name == "answer":
            value = "accept"
        elif name == "pk" and not route.startswith("sessions/"):
            value = next(v for prefix, v in objects.items() if route.startswith(prefix))
        else:
            value = world["session"].pk
        path = path.replace(placeholder, str(value))
    return "/" + path


def takes_an_object(route: str) -> bool:
    return "<" in route


@pytest.mark.django_db
@pytest.mark.parametrize("route", ROUTES)
def test_anonymous_callers_are_sent_to_log_in(client: Any, world: dict, route: str):
    url = url_for(route, world)
    for method in (client.get, client.post):
        response = method(url)
        if route.startswith("api/"):
            assert response.status_code in (401, 405), (method, url, response.status_code)
        else:
            assert response.status_code in (302, 405), (method, url, response.status_code)
            if response.status_code == 302:
                assert response.url.startswith("/accounts/login/")


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["bob", "staff"])
@pytest.mark.parametrize("route", [r for r in ROUTES if takes_an_object(r)])
def test_someone_elses_objects_are_not_found(client: Any, world: dict, route: str, role: str):
    client.force_login(world["users"][role])
    url = url_for(route, world)
    statuses = {method: getattr(client, method)(url).status_code for method in ("get", "post")}
    assert set(statuses.values()) <= {404, 405}, (url, statuses)
    assert 404 in statuses.values(), (url, statuses)


@pytest.mark.django_db
@pytest.mark.parametrize("route", ROUTES)
def test_the_owner_gets_through(client: Any, world: dict, route: str):
    client.force_login(world["users"]["alice"])
    url = url_for(route, world)
    statuses = {method: getattr(client, method)(url).status_code for method in ("get", "post")}
    assert not {401, 403, 404, 500} & set(statuses.values()), (url, statuses)


def member_may(route: str) -> set[int]:
    """What a team member gets on the owner's objects: the shared session (except cancelling
    it), the team's page (but not managing it), and nothing private."""
    if route.startswith(("sessions/", "api/sessions/")):
        # 409: allowed to try, but the session's state refuses (resuming a running one).
        # 400/422: allowed to steer through the API (access is checked before the body), but
        # this matrix sends no JSON to steer with. Cancelling ends someone's session,
        # concluding it ends its thinking, extending it spends their money: owner only.
        owner_only = ("cancel/", "cancel", "extend/", "extend", "conclude/", "conclude")
        if route.endswith(owner_only):
            return {403}
        return {200, 302, 409, 400, 422} if route.endswith("/steer") else {200, 302, 409}
    if route == "teams/<int:pk>/":
        return {200, 403}  # sees the team; adding people is for owners
    if route.startswith(("teams/invitations/", "teams/offers/")):
        return {404}  # answering someone else's invitation or offer
    if route.endswith("/revoke/") and route.startswith("teams/"):
        return {404}  # seeing and revoking invitations is for owners
    if route.startswith("teams/"):
        return {403}  # removing someone else is for owners
    return {404}  # the owner's private note, the owner's token


@pytest.mark.django_db
@pytest.mark.parametrize("route", [r for r in ROUTES if takes_an_object(r)])
def test_a_team_member(client: Any, world: dict, route: str):
    client.force_login(world["users"]["carol"])
    url = url_for(route, world)
    statuses = {method: getattr(client, method)(url).status_code for method in ("get", "post")}
    allowed = member_may(route) | {405, 409, 422}
    assert set(statuses.values()) <= allowed, (url, statuses)
    assert member_may(route) & set(statuses.values()), (url, statuses)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("route", [str(p.pattern) for p in websocket_urlpatterns])
@pytest.mark.parametrize(
    ("role", "connects"), [(None, False), ("bob", False), ("staff", False), ("alice", True)]
)
async def test_websocket_routes(world_async: dict, route: str, role: str | None, connects: bool):
    cookie = await login(world_async["users"][role]) if role else None
    comm = communicator(world_async["session"].pk, cookie, rev=0)
    connected, _ = await comm.connect()
    assert connected is connects
    if connected:
        await comm.disconnect()


@pytest.fixture
async def world_async(alice: Any, bob: Any, django_user_model: Any, make_session: Any) -> dict:
    staff = await sync_to_async(django_user_model.objects.create_superuser)(
        "root", password="root-pass-123"
    )
    session = await sync_to_async(make_session)(status=Status.THINKING)
    return {"session": session, "users": {"alice": alice, "bob": bob, "staff": staff}}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "route", [r for r in ROUTES if r.startswith(("sessions/<", "api/sessions/<"))]
)
def test_an_unknown_session_id_is_not_found(client: Any, alice: Any, make_session: Any, route: str):
    """A mistyped or stale link must not land on another of one's sessions: with exactly one
    session of her own, alice asking for an id that does not exist gets 404, not that one."""
    make_session(status=Status.THINKING)
    client.force_login(alice)
    missing = "00000000-0000-4000-8000-000000000000"
    url = "/" + re.sub(r"<(uuid:)?\w+>", missing, route)
    statuses = {method: getattr(client, method)(url).status_code for method in ("get", "post")}
    assert set(statuses.values()) <= {404, 405}, (url, statuses)
    assert 404 in statuses.values(), (url, statuses)


@pytest.mark.django_db
@pytest.mark.parametrize("nobody", [None, AnonymousUser()])
def test_a_caller_without_an_account_sees_no_session_and_owns_none(world: dict, nobody: Any):
    # A socket or a code path that lost its user (None) is treated as anonymous: nothing,
    # and no error.
    assert ThinkingSession.objects.exists()
    assert not ThinkingSession.objects.visible_to(nobody).exists()
    assert not world["session"].is_owned_by(nobody)
