"""Question sets: the samples shipped in `evaluation/sets/` by name, or any CSV or JSONL file
of questions with reference answers by path."""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SETS_DIR = Path(__file__).resolve().parent / "sets"
QUESTION_KEYS = ("question", "problem", "prompt")
ANSWER_KEYS = ("answer", "true_answer", "reference_answer", "reference", "gold")
MAX_QUESTION_CHARS = 4000  # the start form's own limit is checked when a session starts


class QuestionSetError(ValueError):
    """A set that cannot be read, with the reason in words."""


@dataclass(frozen=True)
class Question:
    position: int
    question: str
    reference: str


def shipped() -> list[str]:
    """The names of the sets that ship with the app."""
    return sorted(path.stem for path in SETS_DIR.glob("*.csv"))


def _pick(row: dict[str, object], keys: Sequence[str]) -> str | None:
    lowered = {str(k).strip().lower(): v for k, v in row.items() if k is not None}
    for key in keys:
        if key in lowered:
            return " ".join(str(lowered[key] or "").split())
    return None


def _rows(path: Path) -> list[dict[str, object]]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise QuestionSetError(f"Cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise QuestionSetError(f"{path} is not UTF-8 text.") from None
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise QuestionSetError(f"{path}, line {number}: not JSON ({error.msg}).") from None
            if not isinstance(row, dict):
                raise QuestionSetError(f"{path}, line {number}: not a JSON object.")
            rows.append(row)
        return rows
    if path.suffix.lower() == ".csv":
        return list(csv.DictReader(text.splitlines()))
    raise QuestionSetError(f"{path}: give a .csv or .jsonl file.")


def load(name_or_path: str) -> list[Question]:
    """The questions of a shipped set (by name) or of a CSV/JSONL file (by path). Each row
    needs a question (`question`, `problem` or `prompt`) and a reference answer (`answer`,
    `true_answer`, `reference_answer`, `reference` or `gold`)."""
    path = SETS_DIR / f"{name_or_path}.csv"
    if not path.is_file():
        path = Path(name_or_path)
        if not path.is_file():
            names = ", ".join(shipped())
            raise QuestionSetError(
                f"No question set {name_or_path!r}: give one of {names}, or a CSV/JSONL path."
            )
    rows = _rows(path)
    if not rows:
        raise QuestionSetError(f"{path} has no questions.")
    found = []
    for index, row in enumerate(rows):
        question, answer = _pick(row, QUESTION_KEYS), _pick(row, ANSWER_KEYS)
        if question is None or answer is None:
            columns = ", ".join(map(str, row))
            raise QuestionSetError(
                f"{path}, row {index + 1}: needs a question column ({'/'.join(QUESTION_KEYS)}) "
                f"and a reference answer column ({'/'.join(ANSWER_KEYS)}); it has {columns}."
            )
        if not question or not answer:
            raise QuestionSetError(f"{path}, row {index + 1}: the question or answer is empty.")
        if len(question) > MAX_QUESTION_CHARS:
            raise QuestionSetError(
                f"{path}, row {index + 1}: the question is over {MAX_QUESTION_CHARS} characters."
            )
        found.append(Question(index, question, answer))
    return found


def seeded_sample(count: int, size: int, seed: int) -> list[int]:
    """`size` row numbers of `count`, the same ones for the same seed, in order."""
    return sorted(random.Random(seed).sample(range(count), size))
