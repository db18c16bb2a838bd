"""`python manage.py evaluate --set simpleqa-sample`: answer a question set with real
sessions (started as the page starts them, run in this process), grade each final answer,
print the figures and store the run (docs/evaluation.md). `--run NAME` again resumes it;
`--compare A B` prints two runs side by side."""

from __future__ import annotations

import asyncio
import json
import sys
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from thinking.people import estimates
from thinking.people.followups import minutes_problem
from thinking.provider import llm

from ... import questions, report
from ...models import EvaluationRun
from ...runner import Options, Progress, RunError, Runner, open_run

DEFAULT_MINUTES = 2.0
DEFAULT_DOLLARS = Decimal("20")
BAR_WIDTH = 30


def _dollars(value: str) -> Decimal:
    try:
        found = Decimal(value)
    except InvalidOperation:
        raise CommandError(f"--max-dollars: {value!r} is not an amount.") from None
    if not found.is_finite() or found <= 0:
        raise CommandError("--max-dollars: give an amount above zero.")
    return found.quantize(Decimal("0.01"))


class Command(BaseCommand):
    help = "Answer a question set with real sessions, grade the answers and report."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--set",
            dest="question_set",
            help=f"A shipped set ({', '.join(questions.shipped())}) or a CSV/JSONL path.",
        )
        parser.add_argument("--limit", type=int, help="Only the first N questions.")
        parser.add_argument(
            "--minutes",
            type=float,
            default=DEFAULT_MINUTES,
            help=f"Thinking budget per question (default {DEFAULT_MINUTES:g}).",
        )
        parser.add_argument("--model", default="", help="The model that thinks.")
        parser.add_argument(
            "--no-web", action="store_true", help="Research never searches the web."
        )
        parser.add_argument(
            "--no-research", action="store_true", help="No plan, no searches: own knowledge only."
        )
        parser.add_argument(
            "--concurrency", type=int, default=1, help="Questions thinking at once (default 1)."
        )
        parser.add_argument(
            "--run", dest="name", help="Name the run; the same name again resumes it."
        )
        parser.add_argument(
            "--max-dollars",
            help=f"Ceiling for the whole run at list prices (default ${DEFAULT_DOLLARS} "
            "for a new run; a resumed run keeps its own unless given).",
        )
        parser.add_argument("--owner", help="Username of the owner (default: first superuser).")
        parser.add_argument(
            "--compare", nargs=2, metavar=("A", "B"), help="Print runs A and B side by side."
        )
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["compare"]:
            self._compare(*options["compare"], as_json=options["json"])
            return
        if not options["question_set"]:
            raise CommandError("Give a question set: --set NAME or --set PATH (or --compare A B).")
        if not llm.is_configured():
            raise CommandError(llm.NOT_CONFIGURED)
        if options["concurrency"] < 1:
            raise CommandError("--concurrency: at least 1.")
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit: at least 1.")
        problem = minutes_problem(options["minutes"])
        if problem:
            raise CommandError(f"--minutes: {problem}")
        try:
            found = questions.load(options["question_set"])
        except questions.QuestionSetError as error:
            raise CommandError(str(error)) from None
        found = found[: options["limit"]] if options["limit"] else found
        owner = self._owner(options["owner"])
        name = options["name"] or f"{options['question_set']}-{timezone.now():%Y%m%d-%H%M%S}"
        wanted = Options(
            minutes=options["minutes"],
            model=options["model"],
            web=not options["no_web"],
            research=not options["no_research"],
            concurrency=options["concurrency"],
        )
        ceiling = _dollars(options["max_dollars"]) if options["max_dollars"] else None
        try:
            run, resumed = open_run(
                name=name,
                owner=owner,
                question_set=options["question_set"],
                questions=found,
                options=wanted,
                max_dollars=ceiling,
                default_dollars=DEFAULT_DOLLARS,
            )
        except RunError as error:
            raise CommandError(str(error)) from None
        self._introduce(run, resumed, len(found))
        runner = Runner(run, [q.position for q in found], report=self._bar)
        try:
            asyncio.run(runner.execute())
        except KeyboardInterrupt:
            self.stdout.write("")
            self.stderr.write(
                f"Interrupted. `manage.py evaluate --set {run.question_set} --run {run.name}` "
                "resumes it: graded questions are kept."
            )
            sys.exit(130)
        self.stdout.write("")
        run.refresh_from_db()
        if run.stop_reason:
            self.stderr.write(self.style.WARNING(run.stop_reason))
        self._print(report.build(run), as_json=options["json"])

    # -- output ----------------------------------------------------------------------

    def _introduce(self, run: EvaluationRun, resumed: bool, count: int) -> None:
        opts = Options.of(run.options)
        model = opts.model or settings.DEEPTHINK_MODEL
        verb = "Resuming" if resumed else "Starting"
        self.stdout.write(
            self.style.MIGRATE_HEADING(f"{verb} evaluation run {run.name!r}: {count} questions")
        )
        self.stdout.write(
            f"{opts.minutes:g} min each on {model}, research {'on' if opts.research else 'off'}"
            f", web {'on' if opts.web else 'off'}, {opts.concurrency} at once; ceiling "
            f"${run.max_dollars} for the run (spent so far ${run.spent():.2f})."
        )
        one = estimates.estimate(model=model, minutes=opts.minutes, research=opts.research)
        if one.expected is not None:
            self.stdout.write(
                f"Estimated ${one.expected * count:.2f} (${one.low * count:.2f} to "  # type: ignore[operator]
                f"${one.high * count:.2f}) for {count} questions, before grading."  # type: ignore[operator]
            )
        if run.offline:
            self.stdout.write(self.style.WARNING(report.OFFLINE_NOTE))

    def _bar(self, progress: Progress) -> None:
        filled = round(BAR_WIDTH * progress.done / progress.total) if progress.total else 0
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        line = (
            f"[{bar}] {progress.done}/{progress.total} graded · {progress.correct} correct · "
            f"${progress.spent:.2f} spent"
        )
        if progress.last:
            line += f" · {progress.last}"
        if self.stdout.isatty():
            self.stdout.write(f"\r{line}", ending="")
            self.stdout.flush()
        else:
            self.stdout.write(line)

    def _print(self, found: report.Report, *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(found.as_json(), indent=2))
            return
        width = max(len(label) for label, _ in report.summary_lines(found))
        self.stdout.write(self.style.MIGRATE_HEADING(f"Run {found.run.name}"))
        for label, value in report.summary_lines(found):
            self.stdout.write(f"  {label:<{width}}  {value}")
        self.stdout.write("")
        self.stdout.write(f"  {'#':>4}  {'grade':<13} {'conf':>5} {'cost':>9} {'min':>5}  question")
        for row in found.rows:
            confidence = report.number(row.confidence, 2)
            self.stdout.write(
                f"  {row.position:>4}  {row.grade or row.status:<13} {confidence:>5} "
                f"${row.cost_usd:>8.4f} {row.minutes:>5.2f}  {' '.join(row.question.split())[:70]}"
            )
        self.stdout.write(f"\nThe page: {found.run.get_absolute_url()}")
        if found.run.offline:
            self.stdout.write(self.style.WARNING(report.OFFLINE_NOTE))

    def _compare(self, a: str, b: str, *, as_json: bool) -> None:
        runs = []
        for name in (a, b):
            run = EvaluationRun.objects.filter(name=name).first()
            if run is None:
                raise CommandError(f"No evaluation run named {name!r}.")
            runs.append(run)
        paired = report.compare_runs(*runs)
        if as_json:
            self.stdout.write(json.dumps(paired.as_json(), indent=2))
            return
        lines = report.comparison_lines(paired)
        width = max(len(label) for label, _ in lines)
        self.stdout.write(self.style.MIGRATE_HEADING(f"{a} (A) against {b} (B)"))
        for label, value in lines:
            self.stdout.write(f"  {label:<{width}}  {value}")

    def _owner(self, username: str | None) -> Any:
        User = get_user_model()
        if username:
            owner = User.objects.filter(username=username).first()
            if owner is None:
                raise CommandError(f"No user named {username!r}.")
            return owner
        owner = User.objects.filter(is_superuser=True).order_by("pk").first()
        if owner is None:
            raise CommandError(
                "No superuser to own the sessions: create one (manage.py createsuperuser) "
                "or give --owner."
            )
        return owner
