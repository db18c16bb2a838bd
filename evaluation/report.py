"""What a run reports, built once from its rows: for the page, the JSON and Markdown
exports and the terminal. The figures are evaluation/metrics.py's."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from thinking.deliberation.citations import session_counts

from . import metrics
from .models import EvaluationItem, EvaluationRun, ItemStatus

OFFLINE_NOTE = (
    "This run talked to a model server on this machine (ANTHROPIC_BASE_URL is a loopback "
    "address). On the fake Claude server the tests use, its figures mean nothing: they show "
    "that the machinery works, not how good any model is."
)
VERDICTS = ("supported", "partial", "unsupported")


@dataclass(frozen=True)
class Row:
    position: int
    question: str
    reference: str
    grade: str
    status: str
    grader_why: str
    error: str
    session_id: str | None
    answer: str
    confidence: float | None
    cost_usd: Decimal
    tokens: int
    minutes: float
    citations: dict[str, int]
    unknown_citations: int

    def as_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "question": self.question,
            "reference": self.reference,
            "grade": self.grade or None,
            "status": self.status,
            "grader_why": self.grader_why,
            "error": self.error,
            "session": self.session_id,
            "final_answer": self.answer,
            "final_confidence": self.confidence,
            "cost_usd": float(self.cost_usd),
            "tokens": self.tokens,
            "thinking_minutes": round(self.minutes, 3),
            "citations": self.citations,
            "unknown_citations": self.unknown_citations,
        }


def _row(item: EvaluationItem) -> Row:
    session = item.session
    grader_cost = item.grader_cost_usd + item.earlier_cost_usd
    grader_tokens = item.grader_input_tokens + item.grader_output_tokens
    if session is None:
        return Row(
            item.position, item.question, item.reference, item.grade, item.status,
            item.grader_why, item.error, None, "", None, grader_cost, grader_tokens, 0.0,
            {}, 0,
        )  # fmt: skip
    return Row(
        position=item.position,
        question=item.question,
        reference=item.reference,
        grade=item.grade,
        status=item.status,
        grader_why=item.grader_why,
        error=item.error,
        session_id=str(session.pk),
        answer=session.final_answer,
        confidence=session.final_confidence,
        cost_usd=session.cost_usd + grader_cost,
        tokens=session.total_tokens + grader_tokens,
        minutes=session.active_seconds / 60,
        citations=session_counts(session),
        unknown_citations=session.unknown_citations,
    )


def _mean(values: Iterable[float]) -> float | None:
    found = list(values)
    return sum(found) / len(found) if found else None


@dataclass(frozen=True)
class Report:
    run: EvaluationRun
    rows: tuple[Row, ...]
    scores: metrics.Scores
    calibration: metrics.Calibration
    citations: dict[str, Any]
    per_question: dict[str, float | None]
    spent: Decimal

    @property
    def graded(self) -> list[Row]:
        return [r for r in self.rows if r.status == ItemStatus.GRADED]

    def as_json(self) -> dict[str, Any]:
        run = self.run
        return {
            "run": run.name,
            "question_set": run.question_set,
            "owner": run.owner.get_username(),
            "options": run.options,
            "grader_model": run.grader_model,
            "max_dollars": float(run.max_dollars),
            "spent_usd": float(self.spent),
            "created_at": run.created_at.isoformat(),
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "stop_reason": run.stop_reason or None,
            "offline": run.offline,
            "note": OFFLINE_NOTE if run.offline else None,
            "questions": len(self.rows),
            "scores": self.scores.as_json(),
            "calibration": self.calibration.as_json(),
            "citations": self.citations,
            "per_question": self.per_question,
            "rows": [row.as_json() for row in self.rows],
        }


def build(run: EvaluationRun) -> Report:
    items = run.items.select_related("session").order_by("position")
    rows = tuple(_row(item) for item in items)
    graded = [r for r in rows if r.status == ItemStatus.GRADED]
    confident = [(r.confidence, r.grade == "correct") for r in graded if r.confidence is not None]
    totals = {v: sum(r.citations.get(v, 0) for r in graded) for v in (*VERDICTS, "unchecked")}
    checked = sum(totals[v] for v in VERDICTS)
    citations: dict[str, Any] = {
        "checked": checked,
        **{f"{v}_share": (totals[v] / checked if checked else None) for v in VERDICTS},
        **totals,
        "unknown_citations": sum(r.unknown_citations for r in graded),
    }
    per_question = {
        "cost_usd": _mean(float(r.cost_usd) for r in graded),
        "tokens": _mean(r.tokens for r in graded),
        "thinking_minutes": _mean(r.minutes for r in graded),
    }
    return Report(
        run=run,
        rows=rows,
        scores=metrics.scores([r.grade for r in graded]),
        calibration=metrics.calibration([(c, right) for c, right in confident if c is not None]),
        citations=citations,
        per_question=per_question,
        spent=run.spent(),
    )


# --- text ---------------------------------------------------------------------------------


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary_lines(report: Report) -> list[tuple[str, str]]:
    """(label, value) pairs: the table the terminal prints and the Markdown starts with."""
    s, c, q = report.scores, report.calibration, report.per_question
    cites = report.citations
    return [
        ("Graded", f"{s.graded} of {len(report.rows)}"),
        ("Correct / incorrect / not attempted", f"{s.correct} / {s.incorrect} / {s.not_attempted}"),
        ("Accuracy", percent(s.accuracy)),
        ("Accuracy on attempted", percent(s.accuracy_attempted)),
        ("F-score", percent(s.f_score)),
        ("Calibration: ECE", number(c.ece)),
        ("Calibration: Brier score", number(c.brier)),
        (
            "Cited claims supported / partial / unsupported",
            f"{percent(cites['supported_share'])} / {percent(cites['partial_share'])} / "
            f"{percent(cites['unsupported_share'])} of {cites['checked']}",
        ),
        ("Unknown citations", str(cites["unknown_citations"])),
        ("Cost per question", "-" if q["cost_usd"] is None else f"${q['cost_usd']:.4f}"),
        ("Tokens per question", "-" if q["tokens"] is None else f"{q['tokens']:,.0f}"),
        ("Thinking-minutes per question", number(q["thinking_minutes"], 2)),
        ("Spent", f"${report.spent:.4f} of ${report.run.max_dollars}"),
    ]


def _cell(text: str, limit: int = 80) -> str:
    """Model and data text inside a Markdown table cell: one line, no pipes to break it."""
    flat = " ".join(text.split()).replace("\\", "\\\\").replace("|", "\\|")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def settings_line(run: EvaluationRun) -> str:
    """The run's session settings in words."""
    o = run.options
    parts = [
        f"{o.get('minutes', 0):g} min a question",
        f"model {o.get('model') or 'the default'}",
        f"research {'on' if o.get('research', True) else 'off'}",
        f"web {'on' if o.get('web', True) else 'off'}",
        f"{o.get('concurrency', 1)} at once",
    ]
    return ", ".join(parts)


def markdown(report: Report, *, site: str = "") -> str:
    run = report.run
    lines = [f"# Evaluation run {_cell(run.name)}", ""]
    if run.offline:
        lines += [f"> {OFFLINE_NOTE}", ""]
    lines += [
        f"Set `{_cell(run.question_set)}` · {_cell(settings_line(run), 200)} · grader "
        f"{_cell(run.grader_model or '-')}",
        "",
        "| | |",
        "|---|---|",
        *(f"| {label} | {value} |" for label, value in summary_lines(report)),
        "",
        "## Reliability (final confidence against correctness)",
        "",
        "| confidence | answers | mean confidence | accuracy |",
        "|---|---|---|---|",
    ]
    for b in report.calibration.bins:
        if b.count:
            lines.append(
                f"| {b.low:.1f}-{b.high:.1f} | {b.count} | {number(b.mean_confidence, 2)} "
                f"| {percent(b.accuracy)} |"
            )
    lines += [
        "",
        "## Questions",
        "",
        "| # | grade | confidence | cost | tokens | minutes | question | reference | session |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.rows:
        link = f"[{r.session_id[:8]}]({site}/sessions/{r.session_id}/)" if r.session_id else "-"
        lines.append(
            f"| {r.position} | {r.grade or r.status} | {number(r.confidence, 2)} "
            f"| ${r.cost_usd:.4f} | {r.tokens:,} | {r.minutes:.2f} | {_cell(r.question)} "
            f"| {_cell(r.reference, 40)} | {link} |"
        )
    return "\n".join(lines) + "\n"


# --- the reliability diagram --------------------------------------------------------------

SIZE, MARGIN = 320, 40


def diagram(calibration: metrics.Calibration) -> dict[str, Any]:
    """Coordinates for the page's inline SVG: a bar per bin with answers (its accuracy),
    a dot at its mean confidence, and the diagonal of perfect calibration."""
    plot = SIZE - 2 * MARGIN
    width = plot / len(calibration.bins)
    bars = []
    for b in calibration.bins:
        if not b.count or b.accuracy is None or b.mean_confidence is None:
            continue
        height = b.accuracy * plot
        bars.append(
            {
                "column_x": round(MARGIN + b.low * plot, 1),
                "column_width": round(width, 1),
                "x": round(MARGIN + b.low * plot + 1, 1),
                "y": round(MARGIN + plot - height, 1),
                "width": round(width - 2, 1),
                "height": round(height, 1),
                "dot_x": round(MARGIN + b.mean_confidence * plot, 1),
                "dot_y": round(MARGIN + plot - b.mean_confidence * plot, 1),
                "label": (
                    f"{b.low:.1f}-{b.high:.1f}: {b.count} answer{'s' if b.count != 1 else ''}, "
                    f"mean confidence {b.mean_confidence:.2f}, accuracy {b.accuracy:.0%}"
                ),
            }
        )
    ticks = [
        {"value": f"{t / 5:.1f}", "at": round(MARGIN + t / 5 * plot, 1),
         "up": round(MARGIN + plot - t / 5 * plot, 1)}
        for t in range(6)
    ]  # fmt: skip
    return {
        "size": SIZE,
        "low": MARGIN,
        "high": MARGIN + plot,
        "plot": plot,
        "below": MARGIN + plot + 16,  # the x axis's numbers
        "left": MARGIN - 6,  # the y axis's numbers
        "middle": SIZE / 2,
        "bars": bars,
        "ticks": ticks,
    }


# --- two runs side by side ----------------------------------------------------------------


@dataclass(frozen=True)
class PairedRow:
    question: str
    a: Row
    b: Row

    @property
    def agree(self) -> bool:
        return (self.a.grade == "correct") == (self.b.grade == "correct")


@dataclass(frozen=True)
class Paired:
    a: EvaluationRun
    b: EvaluationRun
    rows: tuple[PairedRow, ...]
    comparison: metrics.Comparison
    cost_a: float | None  # mean per paired question
    cost_b: float | None

    @property
    def cost_difference(self) -> float | None:
        if self.cost_a is None or self.cost_b is None:
            return None
        return self.cost_b - self.cost_a

    def as_json(self) -> dict[str, Any]:
        return {
            "a": self.a.name,
            "b": self.b.name,
            **self.comparison.as_json(),
            "ci_level": 0.95,
            "bootstrap": {
                "resamples": metrics.BOOTSTRAP_RESAMPLES,
                "seed": metrics.BOOTSTRAP_SEED,
            },
            "cost_per_question_a": self.cost_a,
            "cost_per_question_b": self.cost_b,
            "cost_difference": self.cost_difference,
            "rows": [
                {"question": r.question, "a": r.a.grade, "b": r.b.grade, "agree": r.agree}
                for r in self.rows
            ],
        }


def compare_runs(a: EvaluationRun, b: EvaluationRun) -> Paired:
    """The questions both runs graded, paired by their text."""
    graded_b = {" ".join(r.question.split()).lower(): r for r in build(b).graded}
    rows = []
    for row in build(a).graded:
        other = graded_b.get(" ".join(row.question.split()).lower())
        if other is not None:
            rows.append(PairedRow(row.question, row, other))
    outcomes = [(r.a.grade == "correct", r.b.grade == "correct") for r in rows]
    return Paired(
        a=a,
        b=b,
        rows=tuple(rows),
        comparison=metrics.compare(outcomes),
        cost_a=_mean(float(r.a.cost_usd) for r in rows),
        cost_b=_mean(float(r.b.cost_usd) for r in rows),
    )


def comparison_lines(paired: Paired) -> list[tuple[str, str]]:
    c = paired.comparison
    interval = (
        "-"
        if c.ci_low is None or c.ci_high is None
        else f"{c.ci_low * 100:+.1f} to {c.ci_high * 100:+.1f} points"
    )
    difference = "-" if c.difference is None else f"{c.difference * 100:+.1f} points"
    cost = paired.cost_difference
    return [
        ("Questions both graded", str(c.pairs)),
        ("Accuracy A / B", f"{percent(c.accuracy_a)} / {percent(c.accuracy_b)}"),
        ("Agreement (same outcome)", percent(c.agreement)),
        ("Both right / only A / only B / neither",
         f"{c.both_correct} / {c.only_a} / {c.only_b} / {c.neither}"),
        ("Accuracy difference (B - A)", difference),
        ("95% paired bootstrap interval", interval),
        ("McNemar exact p", number(c.mcnemar_p)),
        ("Cost per question difference (B - A)", "-" if cost is None else f"${cost:+.4f}"),
    ]  # fmt: skip
