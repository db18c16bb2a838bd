"""Logs a person can read (config/settings.py LOGGING, config/logs.py): one line per event,
naming the session it is about."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from config.logs import SessionFilter
from fakes.anthropic_server import StreamError
from tests.helpers import in_fresh_python
from thinking.deliberation.worker import Supervisor
from thinking.models import Status, ThinkingSession


def test_each_line_is_printed_once_under_daphne_and_runworker():
    """daphne sets up logging of its own before Django starts (runworker does not): a
    handler of ours beside its handler printed each line twice, Django's three times."""
    code = """
import logging, sys
if sys.argv[1] == "daphne":
    logging.basicConfig(level=logging.INFO)  # what daphne's command line does first
import django
django.setup()
from config.logs import about_session
logging.getLogger("thinking.deliberation.worker").info("worker listening")
logging.getLogger("django.request").error("Internal Server Error: /x")
logging.getLogger("django.channels.worker").warning("channel trouble")
logging.getLogger("daphne.server").info("Listening on TCP address 127.0.0.1:8000")
with about_session("0b6f7c52-5d1b-4b5c-9a5e-7d1f4a0e2c11"):
    logging.getLogger("research.web").warning("Web search failed (timeout)")
# A scanner's made-up host name: answered 400 (the proxy logs it), not a traceback here.
logging.getLogger("django.security.DisallowedHost").error("Invalid HTTP_HOST header: 'x'")
"""
    for program in ("daphne", "runworker"):
        result = in_fresh_python(code.replace("sys.argv[1]", repr(program)), DEBUG="1")
        assert result.returncode == 0, result.stderr
        lines = result.stderr.splitlines()
        for event in (
            "thinking.deliberation.worker: worker listening",
            "django.request: Internal Server Error: /x",
            "django.channels.worker: channel trouble",
            "daphne.server: Listening on TCP address",
            "research.web [session 0b6f7c52-5d1b-4b5c-9a5e-7d1f4a0e2c11]: Web search failed",
        ):
            assert sum(event in line for line in lines) == 1, (program, event, lines)
        assert len(lines) == 5, lines


@pytest.mark.django_db(transaction=True)
async def test_what_a_session_logs_while_a_worker_runs_it_names_the_session(
    fake_claude: Any, make_session: Any, caplog: pytest.LogCaptureFixture
):
    """The model's stream breaking off is logged deep in the model client, which knows no
    session: the line still says which one."""
    from asgiref.sync import sync_to_async

    broken = []

    def breaks_once(body: dict) -> Any:
        if body.get("stream") and not broken:
            broken.append(True)
            return StreamError()
        return fake_claude.scripted_mind(body)

    fake_claude.responder = breaks_once
    session: ThinkingSession = await sync_to_async(make_session)(
        budget_seconds=0.3, synthesis_interval_seconds=60
    )
    caplog.handler.addFilter(SessionFilter())  # as the console handler has it
    supervisor = Supervisor(worker_id="w-logs", publish=_ignore)
    try:
        assert await supervisor.start(session.pk)
        await supervisor.wait_idle()
    finally:
        await supervisor.aclose()
    await session.arefresh_from_db()
    assert session.status == Status.COMPLETED
    [retry] = [r for r in caplog.records if r.getMessage().startswith("Stream error")]
    assert retry.session == f" [session {session.pk}]"  # type: ignore[attr-defined]
    logging.getLogger("thinking.tests").warning("Outside any session")
    assert caplog.records[-1].session == ""  # type: ignore[attr-defined]


async def _ignore(event: Any) -> None:
    return None
