"""`GET /healthz`: whether this deployment can serve pages and think, for a load balancer,
a monitor or a person. No login; a few milliseconds.

200 when the database answers, the channel layer carries a message to a new channel and
back, and a worker has beaten within the lease (DEEPTHINK_LEASE_SECONDS, as for sessions;
thinking.models.WorkerHeartbeat). 503 otherwise, naming the failing parts. Each check gives
up after DEEPTHINK_HEALTHZ_TIMEOUT_SECONDS. The answer says only which part fails; the cause
(an error's text can name hosts and users) goes to the log, once when a part starts failing
and once when it recovers, not on every probe.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime

from channels.layers import get_channel_layer
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from config.hops import db_hop
from thinking.models import WorkerHeartbeat

logger = logging.getLogger(__name__)

# The parts this process last answered were failing: a change is logged, not every probe.
FAILING: set[str] = set()


class Failed(Exception):
    """A check's answer: `str(error)` is what the response says about the part."""


async def _bounded[T](check: Callable[[], Awaitable[T]]) -> T:
    seconds = settings.DEEPTHINK_HEALTHZ_TIMEOUT_SECONDS
    try:
        return await asyncio.wait_for(check(), timeout=seconds)
    except TimeoutError:
        raise Failed(f"no answer within {seconds:g} s") from None
    except Failed:
        raise
    except Exception as error:
        raise Failed(f"error ({type(error).__name__})") from error


async def _database() -> datetime | None:
    """The database answers: with when a worker last beat."""
    return await _bounded(db_hop(WorkerHeartbeat.last_seen))


async def _channel_layer() -> None:
    """A message to a channel of its own comes back, through Redis where there is one."""

    async def round_trip() -> None:
        layer = get_channel_layer()
        if layer is None:
            raise Failed("not configured")
        channel = await layer.new_channel()
        nonce = uuid.uuid4().hex
        await layer.send(channel, {"type": "healthz.ping", "nonce": nonce})
        message = await layer.receive(channel)
        if message.get("nonce") != nonce:
            raise Failed("a different message came back")

    await _bounded(round_trip)


def _worker(last_seen: datetime | None) -> None:
    lease = settings.DEEPTHINK_LEASE_SECONDS
    if last_seen is None:
        raise Failed("no worker is running (manage.py runworker thinking)")
    age = (timezone.now() - last_seen).total_seconds()
    if age > lease:
        raise Failed(f"last seen {age:.0f} s ago, longer than the {lease:g} s lease")


async def _outcome[T](check: Callable[[], Awaitable[T]]) -> tuple[T | None, Failed | None]:
    try:
        return await check(), None
    except Failed as error:
        return None, error


def _report(name: str, error: Failed | None) -> str:
    """What the answer says about a part; a change is logged, with the error's cause."""
    if error is None:
        if name in FAILING:
            FAILING.discard(name)
            logger.info("Health: %s recovered", name)
        return "ok"
    if name not in FAILING:
        FAILING.add(name)
        cause = f" ({error.__cause__!r})" if error.__cause__ is not None else ""
        logger.warning("Health: %s failing: %s%s", name, error, cause)
    return f"failing: {error}"


@never_cache
@require_GET
async def healthz(request: HttpRequest) -> JsonResponse:
    (last_seen, database), (_, layer) = await asyncio.gather(
        _outcome(_database), _outcome(_channel_layer)
    )
    errors: dict[str, Failed | None] = {"database": database, "channel_layer": layer}
    body = {name: _report(name, error) for name, error in errors.items()}
    if database is not None:
        body["worker"] = "unknown: the database did not answer"
    else:
        worker = None
        try:
            _worker(last_seen)
        except Failed as error:
            worker = error
        errors["worker"] = worker
        body["worker"] = _report("worker", worker)
    failing = [name for name, error in errors.items() if error is not None]
    return JsonResponse(
        {"status": "failing" if failing else "ok", "failing": failing, **body},
        status=503 if failing else 200,
    )
