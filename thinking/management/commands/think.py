"""`python manage.py think "QUESTION" --minutes M`: a session in this process, live in the
terminal, then the final answer (or with --json, one JSON document). Its expected cost is
printed before it starts; `--estimate` prints only that. `--conclude ID` asks a running or
paused session for its answer now."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.http import Http404
from django.utils import timezone

from thinking.deliberation import tools
from thinking.events import SessionEvent
from thinking.models import IllegalTransition, Status, ThinkingSession
from thinking.page import broadcast
from thinking.people import actions, estimates, followups, limits, notify
from thinking.provider import llm
from thinking.web.access import get_session_for
from thinking.web.export import session_document
from thinking.web.forms import EstimateForm, StartSessionForm


class TerminalPrinter:
    """Prints what each stored step added, as it is published; a provider outage goes to
    `warn` (stderr with --json, so the JSON on stdout stays whole)."""

    def __init__(self, write: Any, style: Any, *, warn: Any = None, quiet: bool = False) -> None:
        self.write = write
        self.warn = warn or write
        self.style = style
        self.quiet = quiet

    def show(self, event: SessionEvent) -> None:
        session = ThinkingSession.objects.get(pk=event.session_id)
        if session.waiting_since is not None and session.waiting_reason:
            self.waiting(session.waiting_since, session.waiting_reason)
            return
        if self.quiet:
            return
        for t in session.thoughts.filter(sequence__in=event.thoughts):
            self.write(f"  [{t.type:<11} {t.confidence:4.2f}] {t.text}")
        if event.questions:
            latest = session.sub_questions.filter(explored=False).order_by("-created_at")[:3]
            for q in latest:
                self.write(self.style.MIGRATE_LABEL(f"  ? [{q.priority}] {q.text}"))
        if event.synthesis is not None:
            s = session.syntheses.get(sequence=event.synthesis)
            label = "Final answer" if s.is_final else f"Synthesis {s.sequence + 1}"
            self.write(self.style.SUCCESS(f"\n== {label} (confidence {s.confidence:.2f})"))
            self.write(s.text + "\n")
        if event.plan and not event.sources and session.progress.get("message"):
            # A stage the loop entered or the model reported (thinking.deliberation.stages).
            stage = session.progress
            self.write(self.style.HTTP_INFO(f"  · {stage.get('stage')}: {stage['message']}"))
            return
        if not event.thoughts and event.synthesis is None and not event.questions:
            progress = f"{session.elapsed_seconds():.0f}s of {session.budget_seconds:.0f}s"
            self.write(self.style.HTTP_INFO(f"-- {session.get_status_display()} ({progress})"))

    def waiting(self, since: datetime, reason: str) -> None:
        """The provider is down: why, and for how long it has waited so far."""
        waited = (timezone.now() - since).total_seconds()
        self.warn(
            self.style.WARNING(
                f"!! The model provider is unavailable: {reason}\n"
                f"   Waiting {waited:.0f}s so far and trying again with backoff (it gives up "
                f"after {settings.DEEPTHINK_PROVIDER_GIVE_UP_SECONDS / 60:g} min); "
                "Ctrl-C pauses the session."
            )
        )

    def sources(self, session: ThinkingSession) -> None:
        """The sources the session found, numbered as its answer cites them."""
        rows = session.sources.only("number", "title", "url", "kind")
        self.write(self.style.MIGRATE_HEADING(f"\nSources ({session.sources.count()}):"))
        shown = 0
        for source in rows.iterator():
            shown += 1
            where = source.url or source.get_kind_display().lower()
            self.write(f"  [{source.number}] {source.title} <{where}>")
        if not shown:
            self.write("  none")


def _given(value: object) -> object:
    """An option left out is an empty field (the default); 0 is a value the form refuses,
    as the page and the API do."""
    return "" if value is None else value


def _tool_choice(value: str | None) -> dict[str, Any]:
    """--tools as the start form takes it: left out, the deployment's defaults."""
    if value is None:
        return {}
    names = [name.strip() for name in value.split(",") if name.strip()]
    return {"tools": [] if names == ["none"] else names, "tools_chosen": "on"}


class Command(BaseCommand):
    help = "Think about a question for a while, in this process, and print the answer."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question", nargs="?", help="The question (not with --extend).")
        parser.add_argument(
            "--minutes", type=float, default=1.0, help="Thinking budget (or extra minutes)."
        )
        parser.add_argument(
            "--extend", metavar="ID", help="Give this completed session --minutes more time."
        )
        parser.add_argument(
            "--add-remainder",
            action="store_true",
            help="With --extend: also add the thinking time it left unused.",
        )
        parser.add_argument(
            "--conclude",
            metavar="ID",
            help="Ask this running or paused session for its answer now (a paused one is "
            "run here to its answer).",
        )
        parser.add_argument(
            "--estimate",
            action="store_true",
            help="Print the expected cost of these settings and start nothing.",
        )
        parser.add_argument("--parent", metavar="ID", help="Follow up this finished session.")
        parser.add_argument(
            "--notify",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="Mail the owner when it ends (default: their setting, else 10+ minutes).",
        )
        parser.add_argument("--webhook-url", help="POST the signed summary here when it ends.")
        parser.add_argument(
            "--synthesis-minutes", type=float, default=None, help="Synthesis interval."
        )
        parser.add_argument(
            "--format",
            choices=["standard", "enhanced", "custom"],
            help="Thought format (default: DEEPTHINK_FORMAT).",
        )
        parser.add_argument(
            "--format-spec", type=Path, help="A JSON tag spec file, for --format custom."
        )
        parser.add_argument(
            "--thinking",
            choices=["auto", "off", "adaptive", "manual"],
            help="Model thinking (default: DEEPTHINK_THINKING; unset: the best the model takes).",
        )
        parser.add_argument("--thinking-budget", type=int, help="Budget tokens for manual.")
        parser.add_argument(
            "--effort",
            choices=["low", "medium", "high", "xhigh", "max"],
            help="Effort level (default: the model's).",
        )
        parser.add_argument("--max-tokens", type=int, help="Max tokens per model reply.")
        parser.add_argument(
            "--token-ceiling", type=int, help="Tokens in all before the final answer."
        )
        parser.add_argument(
            "--model", help="The model that thinks (default: DEEPTHINK_MODEL); one the server has."
        )
        parser.add_argument(
            "--max-cost", type=str, help="Dollar ceiling (list prices) before the final answer."
        )
        parser.add_argument(
            "--no-research",
            action="store_true",
            help="No plan, no searches, no evidence, no search tools: own knowledge only.",
        )
        parser.add_argument(
            "--no-web", action="store_true", help="Research never searches the web."
        )
        parser.add_argument(
            "--tools",
            help="The tools the model may use while it thinks, comma-separated: "
            f"{', '.join(tools.CHOICES)}; 'none' for none (default: every tool the "
            "deployment offers).",
        )
        parser.add_argument(
            "--web-search",
            help="Web search providers, comma-separated: exa, searxng, tavily (default: "
            "DEEPTHINK_WEB_SEARCH).",
        )
        parser.add_argument("--include-domains", help="Web results only from these domains.")
        parser.add_argument("--exclude-domains", help="Web results never from these domains.")
        parser.add_argument(
            "--recency",
            choices=["day", "week", "month", "year"],
            help="How recent web pages must be.",
        )
        parser.add_argument(
            "--language", help="Write in this language (default: the language of the question)."
        )
        parser.add_argument("--owner", help="Username of the owner (default: first superuser).")
        parser.add_argument("--json", action="store_true", help="Print one JSON document.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["estimate"]:
            self._estimate(options)
            return
        if not llm.is_configured():
            raise CommandError(llm.NOT_CONFIGURED)
        spec = ""
        if options["format_spec"]:
            try:
                spec = options["format_spec"].read_text(encoding="utf-8")
            except OSError as error:
                raise CommandError(f"Cannot read {options['format_spec']}: {error}") from None
            except UnicodeDecodeError:
                raise CommandError(
                    f"{options['format_spec']} is not a text file: a tag spec is JSON (UTF-8)."
                ) from None
        owner = self._owner(options["owner"])
        quiet = options["json"]
        if options["conclude"]:
            session = self._conclude(owner, options["conclude"])
            if session is None:
                return
            verb = "Writing the answer now for"
        elif options["extend"]:
            session = self._extend(
                owner, options["extend"], options["minutes"], options["add_remainder"]
            )
            verb = "Thinking longer about"
        else:
            session = self._start(owner, options, spec)
            verb = "Thinking about"
        if not quiet:
            self.stdout.write(self.style.MIGRATE_HEADING(f"{verb}: {session.question}"))
            budget = f"budget {session.budget_seconds / 60:g} min"
            self.stdout.write(f"Session {session.pk} · {budget}")
            if not options["conclude"]:
                self.stdout.write(self._estimated(session) + "\n")
        printer = TerminalPrinter(
            self.stdout.write,
            self.style,
            warn=self.stderr.write if quiet else self.stdout.write,
            quiet=quiet,
        )
        asyncio.run(self._run(session, printer, owner))
        session.refresh_from_db()
        if quiet:
            document = session_document(session)
            document["sources"] = document.pop("sources")  # the source list comes last
            self.stdout.write(json.dumps(document, indent=2))
        else:
            if session.status == Status.COMPLETED:
                self.stdout.write(self.style.SUCCESS("\nDone."))
            printer.sources(session)
        if session.status == Status.PAUSED:
            printer.warn(
                f"Paused session {session.pk}: resume it on its page, or give it an answer "
                f"now with `manage.py think --conclude {session.pk}`."
            )
        if session.status == Status.FAILED:
            # The JSON (or the printed steps) keep everything stored; the exit code says it failed.
            if not quiet:
                self.stderr.write(self.style.ERROR(session.error_message))
            sys.exit(1)

    def _estimate(self, options: dict[str, Any]) -> None:
        """--estimate: the expected cost of these settings, and nothing started."""
        form = EstimateForm(
            {
                "minutes": options["minutes"],
                "model": options["model"] or "",
                "research": "off" if options["no_research"] else "on",
                "max_cost_usd": _given(options["max_cost"]),
                "token_ceiling": _given(options["token_ceiling"]),
            }
        )
        found = form.estimate()
        if found is None:
            problems = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in form.errors.items())
            raise CommandError(problems)
        if options["json"]:
            self.stdout.write(json.dumps({**found.as_json(), "summary": found.summary}, indent=2))
        else:
            self.stdout.write(found.summary)

    def _estimated(self, session: ThinkingSession) -> str:
        return estimates.estimate(
            model=session.model_id,
            minutes=session.budget_seconds / 60,
            research=session.research_enabled,
            max_cost_usd=session.max_cost_usd,
            token_ceiling=session.token_ceiling,
        ).summary

    def _session(self, owner: Any, pk: str) -> ThinkingSession:
        try:
            return get_session_for(owner, pk)
        except (Http404, ValidationError):
            raise CommandError(f"No session {pk} that {owner} may see.") from None

    def _conclude(self, owner: Any, pk: str) -> ThinkingSession | None:
        """--conclude: ask for the answer now. A session a worker holds writes it there;
        one no worker holds (it was paused) is run here, straight to its answer."""
        session = self._session(owner, pk)
        try:
            actions.conclude(session, user=owner, doorbell=False)
        except (actions.NotAllowed, IllegalTransition) as error:
            raise CommandError(str(error)) from None
        if session.worker_id:
            self.stdout.write(
                f"Session {session.pk} will stop thinking and write its answer; the worker "
                "running it does that."
            )
            return None
        return session

    def _extend(self, owner: Any, pk: str, minutes: float, add_remainder: bool) -> ThinkingSession:
        session = self._session(owner, pk)
        problem = followups.minutes_problem(minutes)
        if problem:
            raise CommandError(f"minutes: {problem}")
        try:
            # Run here, in this process: no doorbell for another worker.
            actions.extend(
                session,
                user=owner,
                minutes=minutes,
                add_remainder=add_remainder,
                doorbell=False,
            )
        except (actions.NotAllowed, followups.CannotExtend, limits.LimitRefused) as error:
            raise CommandError(str(error)) from None
        return session

    def _start(self, owner: Any, options: dict[str, Any], spec: str) -> ThinkingSession:
        if not options["question"]:
            raise CommandError("Give a question (or --extend ID).")
        mail = options["notify"]
        form = StartSessionForm(
            user=owner,
            data={
                "question": options["question"],
                "minutes": options["minutes"],
                "synthesis_minutes": _given(options["synthesis_minutes"]),
                "format_mode": options["format"] or "",
                "format_spec": spec,
                "thinking_mode": options["thinking"] or "",
                "thinking_budget": _given(options["thinking_budget"]),
                "effort": options["effort"] or "",
                "max_tokens": _given(options["max_tokens"]),
                "token_ceiling": _given(options["token_ceiling"]),
                "model": options["model"] or "",
                "max_cost_usd": _given(options["max_cost"]),
                "research": "off" if options["no_research"] else "on",
                "web": "off" if options["no_web"] else "on",
                **_tool_choice(options["tools"]),
                "web_search": [
                    n.strip() for n in (options["web_search"] or "").split(",") if n.strip()
                ],
                "include_domains": options["include_domains"] or "",
                "exclude_domains": options["exclude_domains"] or "",
                "search_recency": options["recency"] or "",
                "language": options["language"] or "",
                "parent": options["parent"] or "",
                "notify": "" if mail is None else str(mail).lower(),
                "webhook_url": options["webhook_url"] or "",
            },
        )
        # Run here, in this process: no doorbell for another worker.
        session = actions.start(form, owner=owner, doorbell=False)
        if session is None:
            problems = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in form.errors.items())
            raise CommandError(problems)
        return session

    def _owner(self, username: str | None) -> Any:
        User = get_user_model()
        if username:
            try:
                return User.objects.get(username=username)
            except User.DoesNotExist:
                raise CommandError(f"No user named {username!r}.") from None
        owner = User.objects.filter(is_superuser=True).order_by("pk").first()
        if owner is None:
            owner = User.objects.create_superuser("deepthink", email="", password=None)
            self.stderr.write("Created superuser 'deepthink' (no password) to own CLI sessions.")
        return owner

    async def _run(self, session: ThinkingSession, printer: TerminalPrinter, owner: Any) -> None:
        show = sync_to_async(printer.show)

        async def publish(event: SessionEvent) -> None:
            await show(event)
            if settings.REDIS_URL:  # browsers watching through other processes
                await broadcast.publish(event)

        pausing: list[asyncio.Task[None]] = []

        async def pause() -> None:
            try:
                await sync_to_async(actions.pause)(session, user=owner)
            except (actions.NotAllowed, IllegalTransition) as error:
                printer.warn(f"Cannot pause: {error}")

        def interrupted() -> None:
            # Ctrl-C pauses: the run stops at once (a call in flight or a wait is cut short)
            # and keeps everything. A second Ctrl-C stops this process as usual.
            loop.remove_signal_handler(signal.SIGINT)
            printer.warn("\nCtrl-C: pausing the session (Ctrl-C again to quit at once)...")
            pausing.append(loop.create_task(pause()))

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, interrupted)
        try:
            if not await actions.think_here(session, publish=publish):
                raise CommandError("Another worker claimed the session first.")
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            await asyncio.gather(*pausing)
        # Its own mail and webhook before this process exits; others' are the workers' to send.
        await notify.deliver_due(session.pk)
