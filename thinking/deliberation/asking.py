"""One model call for a step, and the policy for waiting out a provider outage.

While the provider is unavailable (overloaded, rate limited, unreachable) the session waits
with backoff and says so on the page; the time waited does not count as thinking. After
DEEPTHINK_PROVIDER_GIVE_UP_SECONDS it gives up with the provider's error.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from thinking.deliberation import interrupt, prompts, steps
from thinking.deliberation.run import Run
from thinking.events import SessionEvent
from thinking.formatting import counted
from thinking.models import Status, Stopped, ThinkingSession
from thinking.page.live import LiveReasoning, publish_safely
from thinking.provider.llm import UTILITY_PURPOSES, LLMError, Reply, prompt_message

logger = logging.getLogger(__name__)

# Thinking calls that a person's "conclude now" stops in flight; the plan (its research
# feeds the answer), the final answer and the citation checks run to their end.
CONCLUDABLE = frozenset({"thoughts", "questions", "synthesis"})


class ProviderWait:
    """Backoff while the provider is unavailable, and when to give up."""

    def __init__(self, run: Run) -> None:
        self.clock = run.clock
        self.since: float | None = None
        self.delay = settings.DEEPTHINK_PROVIDER_BACKOFF_SECONDS

    @property
    def waiting(self) -> bool:
        return self.since is not None

    def give_up(self, error: LLMError) -> LLMError | None:
        """The error to end the session with once the outage has lasted too long."""
        now = self.clock.monotonic()
        self.since = self.since or now
        limit = settings.DEEPTHINK_PROVIDER_GIVE_UP_SECONDS
        if now - self.since < limit:
            return None
        return LLMError(
            f"{error} It stayed unavailable for {counted(limit / 60, 'minute')}, so the session "
            "stopped; everything it stored is kept.",
            kind=error.kind,
        )

    async def sleep(self) -> float:
        """Wait before the next try; returns how long it waited."""
        slept = self.delay
        await self.clock.sleep(slept)
        self.delay = min(self.delay * 2, settings.DEEPTHINK_PROVIDER_MAX_BACKOFF_SECONDS)
        return slept


async def ask(
    *,
    session: ThinkingSession,
    run: Run,
    purpose: str,
    prompt: prompts.Prompt | None = None,
    messages: list[dict[str, Any]] | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> Reply:
    """One model call for a step, with the session's thinking settings, its stable prefix
    cached, and its reasoning streamed live to the page."""
    wait = ProviderWait(run)
    while True:
        live = LiveReasoning(
            session.pk,
            purpose,
            run.publish,
            interval=settings.DEEPTHINK_LIVE_INTERVAL,
            clock=run.clock,
        )
        await live.start()
        try:
            # A person's pause or cancel, or another worker taking the session, stops the
            # stream in flight (thinking.deliberation.interrupt); so does "conclude now" a thinking
            # call, raising interrupt.Concluding for the loop.
            reply = await interrupt.watched(
                run.llm.stream(
                    messages or [prompt_message(prompt)],
                    system=prompts.system(session.language),
                    tools=tools,
                    # Utility work (plan, sub-question lists) goes to the fast model, never
                    # thinking.
                    model=run.llm.model_for(purpose, session.model_id),
                    thinking=session.thinking_settings,
                    skip_thinking=purpose in UTILITY_PURPOSES,
                    on_thinking=live.on_thinking,
                    on_text=live.on_text,
                    on_restart=live.restart,
                ),
                session_id=session.pk,
                meter=run.meter,
                worker_id=run.worker_id,
                concludes=purpose in CONCLUDABLE,
            )
        except interrupt.Interrupted as stop:
            raise Stopped(session.pk) from stop
        except LLMError as error:
            if not error.retryable:
                raise
            final = wait.give_up(error)
            if final is not None:
                raise final from error
            status = await steps.set_waiting(session.pk, run.worker_id, str(error))
            await publish_safely(run.publish, SessionEvent(session.pk))
            if status in (Status.PAUSED, Status.CANCELLED):
                raise Stopped(session.pk) from error
            logger.warning("Session %s: %s Trying again in %.0fs", session.pk, error, wait.delay)
            await wait.sleep()
            run.meter.lap()  # waiting for the provider is not thinking time
            continue
        if wait.waiting:
            await steps.set_waiting(session.pk, run.worker_id, "")
        return reply
