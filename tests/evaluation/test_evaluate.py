"""`manage.py evaluate` end to end on the wire-level fakes: real sessions through the start
path, graded by the fake grader, stored, printed, shown."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from evaluation import report
from evaluation.models import EvaluationItem, EvaluationRun, ItemStatus
from evaluation.questions import load
from evaluation.runner import Options, Runner, open_run
from evaluation.views import visible_runs
from tests.helpers import prompt_of
from thinking.models import Status, ThinkingSession

pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--minutes", "0.05", "--owner", "alice")


def evaluate(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("evaluate", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _graded_prompts(fake: Any) -> list[str]:
    return [p for p in map(prompt_of, fake.requests) if "GRADE: CORRECT | INCORRECT" in p]


def test_three_questions_on_the_fakes_run_end_to_end_and_the_page_shows_the_diagram(
    fake_claude: Any, alice: Any, bob: Any, client: Any, admin_client: Any
):
    out, _ = evaluate("--set", "simpleqa-sample", "--limit", "3", "--run", "smoke", *FAST)

    run = EvaluationRun.objects.get(name="smoke")
    items = list(run.items.select_related("session"))
    assert [i.position for i in items] == [0, 1, 2]
    assert all(i.status == ItemStatus.GRADED and i.grade for i in items)
    sessions = [i.session for i in items]
    assert all(s.status == Status.COMPLETED and s.owner == alice for s in sessions)
    assert [s.question for s in sessions] == [q.question for q in load("simpleqa-sample")[:3]]
    # Each session carried its share of what was left of the run's ceiling as its own: the
    # first a third of $20 less what grading is kept back for ($0.02 a question).
    assert sessions[0].max_cost_usd == Decimal("6.6466")
    assert sessions[1].max_cost_usd <= (run.max_dollars - sessions[0].cost_usd) / 2
    assert run.spent() <= run.max_dollars
    assert run.finished_at is not None and run.offline
    # Graded once each, with the reference as data and the session's final answer.
    graded = _graded_prompts(fake_claude)
    assert len(graded) == 3
    assert f"<reference_answer>{items[0].reference}</reference_answer>" in graded[0]
    assert run.grader_model and items[0].grader_cost_usd > 0
    # The table, and the warning that the fakes' numbers mean nothing.
    assert "Accuracy on attempted" in out and "Calibration: ECE" in out
    assert "3/3 graded" in out and "figures mean nothing" in out
    for item in items:
        assert re.search(rf"^\s+{item.position}\s+{item.grade}\s+0\.78 ", out, re.M)

    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert svg.count('class="bin"') == 1  # every answer said 0.78: one bin
    assert "0.7-0.8: 3 answers, mean confidence 0.78" in svg
    assert "figures mean nothing" in page
    assert page.count(f'href="/sessions/{sessions[0].pk}/"') == 1

    exported = client.get(f"/evaluations/{run.pk}.json").json()
    assert exported["scores"]["graded"] == 3 and exported["offline"]
    assert exported["calibration"]["bins"][7]["count"] == 3
    assert [r["session"] for r in exported["rows"]] == [str(s.pk) for s in sessions]
    markdown = client.get(f"/evaluations/{run.pk}.md").content.decode()
    assert "| Accuracy |" in markdown and str(sessions[2].pk) in markdown

    # Someone else's run is a 404 to them, staff included; staff browse it in the admin.
    client.force_login(bob)
    assert client.get(run.get_absolute_url()).status_code == 404
    assert client.get(f"/evaluations/{run.pk}.json").status_code == 404
    assert "smoke" not in client.get("/evaluations/").content.decode()
    assert admin_client.get(run.get_absolute_url()).status_code == 404
    assert admin_client.get(f"/admin/evaluation/evaluationrun/{run.pk}/change/").status_code == 200


def test_an_interrupted_run_resumes_without_asking_finished_questions_again(
    fake_claude: Any, alice: Any, monkeypatch: pytest.MonkeyPatch
):
    def interrupt_after_the_first(self: Any, progress: Any) -> None:
        if progress.done == 1:  # Ctrl-C, as the terminal sends it
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(
        "evaluation.management.commands.evaluate.Command._bar", interrupt_after_the_first
    )
    with pytest.raises(SystemExit) as stopped:
        evaluate("--set", "frames-sample", "--limit", "3", "--run", "long", *FAST)
    assert stopped.value.code == 130
    first = EvaluationItem.objects.get(run__name="long", position=0)
    assert first.status == ItemStatus.GRADED
    assert ThinkingSession.objects.count() == 1
    monkeypatch.undo()

    out, _ = evaluate("--set", "frames-sample", "--limit", "3", "--run", "long", *FAST)
    assert "Resuming evaluation run 'long'" in out
    items = list(EvaluationItem.objects.filter(run__name="long").select_related("session"))
    assert all(i.status == ItemStatus.GRADED for i in items)
    # The first question kept its session and its grade; only the other two were asked.
    assert items[0].session_id == first.session_id and items[0].graded_at == first.graded_at
    assert ThinkingSession.objects.count() == 3
    assert len(_graded_prompts(fake_claude)) == 3


def test_a_session_interrupted_mid_thought_thinks_on_instead_of_starting_again(
    fake_claude: Any, alice: Any
):
    found = load("simpleqa-sample")[:1]
    run, _ = open_run(
        name="mid", owner=alice, question_set="simpleqa-sample", questions=found,
        options=Options(minutes=0.05), max_dollars=None, default_dollars=Decimal(5),
    )  # fmt: skip
    runner = Runner(run, [0])
    item = run.items.get()
    session = runner._start(item, Decimal("1"))  # started, then the process stopped
    assert isinstance(session, ThinkingSession) and session.status == Status.CREATED

    asyncio.run(runner.execute())

    item.refresh_from_db()
    assert item.session_id == session.pk and item.status == ItemStatus.GRADED
    assert ThinkingSession.objects.get().status == Status.COMPLETED


def test_a_failed_session_is_asked_again_and_its_cost_stays_counted(
    fake_claude: Any, alice: Any, make_session: Any
):
    found = load("simpleqa-sample")[:1]
    run, _ = open_run(
        name="again", owner=alice, question_set="simpleqa-sample", questions=found,
        options=Options(minutes=0.05), max_dollars=None, default_dollars=Decimal(5),
    )  # fmt: skip
    failed = make_session(status=Status.FAILED, cost_usd=Decimal("0.25"), error_message="boom")
    run.items.update(session=failed, status=ItemStatus.FAILED, error="session failed: boom")

    asyncio.run(Runner(run, [0]).execute())

    item = run.items.get()
    assert item.status == ItemStatus.GRADED and item.session_id != failed.pk
    assert item.earlier_cost_usd == Decimal("0.25")
    assert run.spent() == Decimal("0.25") + item.session.cost_usd + item.grader_cost_usd


def test_the_dollar_ceiling_stops_the_run_before_it_overspends(fake_claude: Any, alice: Any):
    _, err = evaluate(
        "--set", "simpleqa-sample", "--limit", "3", "--run", "cheap", "--max-dollars", "0.10",
        *FAST,
    )  # fmt: skip
    assert "ceiling of $0.10 is reached" in err and "higher --max-dollars" in err
    assert ThinkingSession.objects.count() == 0
    run = EvaluationRun.objects.get(name="cheap")
    assert run.finished_at is None and run.items.filter(status=ItemStatus.PENDING).count() == 3


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("--set", "nope"), "No question set 'nope'"),
        (("--set", "simpleqa-sample", "--concurrency", "0"), "--concurrency: at least 1"),
        (("--set", "simpleqa-sample", "--max-dollars", "-3"), "above zero"),
        (("--set", "simpleqa-sample", "--max-dollars", "lots"), "not an amount"),
        (("--compare", "a", "b"), "No evaluation run named 'a'"),
        ((), "Give a question set"),
    ],
)
def test_bad_options_are_refused_with_the_reason(
    fake_claude: Any, alice: Any, args: tuple[str, ...], error: str
):
    with pytest.raises(CommandError, match=re.escape(error)):
        evaluate(*args, "--owner", "alice")
    assert not EvaluationRun.objects.exists()


def test_a_run_name_is_not_taken_over_by_another_set_or_person(
    fake_claude: Any, alice: Any, bob: Any
):
    open_run(
        name="mine", owner=alice, question_set="simpleqa-sample", questions=[],
        options=Options(minutes=1), max_dollars=None, default_dollars=Decimal(5),
    )  # fmt: skip
    with pytest.raises(CommandError, match="asks the set 'simpleqa-sample'"):
        evaluate("--set", "frames-sample", "--run", "mine", "--owner", "alice")
    with pytest.raises(CommandError, match="belongs to alice"):
        evaluate("--set", "simpleqa-sample", "--run", "mine", "--owner", "bob")


# --- comparison ---------------------------------------------------------------------------


def _fixture_run(owner: Any, name: str, grades: list[str], cost: str) -> EvaluationRun:
    run = EvaluationRun.objects.create(
        name=name, owner=owner, question_set="fixture", max_dollars=Decimal(10)
    )
    for position, grade in enumerate(grades):
        session = ThinkingSession.objects.create(
            owner=owner, question=f"Question {position}?", budget_seconds=60,
            synthesis_interval_seconds=15, model_id="claude-test", status=Status.COMPLETED,
            final_answer="An answer.", final_confidence=0.6, cost_usd=Decimal(cost),
            active_seconds=60,
        )  # fmt: skip
        EvaluationItem.objects.create(
            run=run, position=position, question=f"Question {position}?", reference="x",
            session=session, status=ItemStatus.GRADED, grade=grade,
        )  # fmt: skip
    return run


def test_two_runs_compared_give_agreement_the_paired_interval_and_the_cost_difference(
    alice: Any, client: Any
):
    # 12 questions: 5 both right, 1 only A, 4 only B, 2 neither (one of them not attempted).
    a = ["correct"] * 5 + ["correct"] + ["incorrect"] * 4 + ["incorrect", "not_attempted"]
    b = ["correct"] * 5 + ["incorrect"] + ["correct"] * 4 + ["incorrect", "incorrect"]
    run_a = _fixture_run(alice, "two-minutes", a, "0.10")
    run_b = _fixture_run(alice, "ten-minutes", b, "0.35")

    paired = report.compare_runs(run_a, run_b)
    c = paired.comparison
    assert (c.pairs, c.both_correct, c.only_a, c.only_b, c.neither) == (12, 5, 1, 4, 2)
    assert c.agreement == pytest.approx(7 / 12) and c.difference == pytest.approx(3 / 12)
    assert c.ci_low is not None and c.ci_high is not None
    assert c.ci_low < 3 / 12 < c.ci_high and c.ci_low < 0  # 12 questions prove nothing
    assert c.mcnemar_p == pytest.approx(2 * (1 + 5) / 32)
    assert paired.cost_difference == pytest.approx(0.25)

    out, _ = evaluate("--compare", "two-minutes", "ten-minutes", "--json")
    assert json.loads(out)["ci_low"] == c.ci_low and json.loads(out)["only_b"] == 4
    out, _ = evaluate("--compare", "two-minutes", "ten-minutes")
    assert "+25.0 points" in out and "$+0.2500" in out

    client.force_login(alice)
    page = client.get(f"/evaluations/compare/?a={run_a.pk}&b={run_b.pk}").content.decode()
    assert "95% paired bootstrap interval" in page and page.count("<tr>") >= 12
    chooser = client.get("/evaluations/compare/").content.decode()
    assert chooser.count(f'<option value="{run_a.pk}">two-minutes</option>') == 2
    assert list(visible_runs(alice)) == [run_b, run_a]


def test_model_text_on_the_run_page_is_escaped(alice: Any, client: Any):
    run = _fixture_run(alice, "<b>run</b>", ["correct"], "0.1")
    run.items.update(question="<script>alert(1)</script>", grader_why='"><img src=x>')
    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "<b>run</b>" not in page and '"><img src=x>' not in page
    markdown = client.get(f"/evaluations/{run.pk}.md").content.decode()
    assert "| correct |" in markdown
