"""The figures of a run and of two runs compared. Pure functions of grades and
confidences, so a test can check them against values worked out by hand.

- accuracy: correct / all graded; accuracy on attempted: correct / (correct + incorrect);
  F: their harmonic mean (SimpleQA's "F-score").
- calibration, over graded answers that carry a final confidence, an answer counting 1 when
  correct and 0 otherwise (not attempted included: "I am 20% sure" about no answer should
  not be right 80% of the time): the Brier score, mean((confidence - outcome)²); the
  expected calibration error over BINS equal-width bins, sum(n_b / n · |accuracy_b -
  mean confidence_b|); a confidence of exactly 1 falls in the top bin.
- comparison: questions paired by position; the difference in accuracy (B - A) with a 95%
  paired bootstrap interval (BOOTSTRAP_RESAMPLES resamples of the pairs, seed
  BOOTSTRAP_SEED, so the same runs give the same interval) and McNemar's exact two-sided
  p-value on the pairs where one run is right and the other is not.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

BINS = 10
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 71

CORRECT, INCORRECT, NOT_ATTEMPTED = "correct", "incorrect", "not_attempted"


@dataclass(frozen=True)
class Scores:
    graded: int
    correct: int
    incorrect: int
    not_attempted: int
    accuracy: float | None
    accuracy_attempted: float | None
    f_score: float | None

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def scores(grades: Sequence[str]) -> Scores:
    correct = grades.count(CORRECT)
    incorrect = grades.count(INCORRECT)
    graded = len(grades)
    accuracy = correct / graded if graded else None
    attempted = correct + incorrect
    on_attempted = correct / attempted if attempted else None
    f_score = None
    if accuracy is not None and on_attempted is not None:
        total = accuracy + on_attempted
        f_score = 2 * accuracy * on_attempted / total if total else 0.0
    return Scores(
        graded, correct, incorrect, grades.count(NOT_ATTEMPTED), accuracy, on_attempted, f_score
    )


@dataclass(frozen=True)
class Bin:
    low: float
    high: float
    count: int
    mean_confidence: float | None
    accuracy: float | None


@dataclass(frozen=True)
class Calibration:
    count: int  # answers with a confidence
    ece: float | None
    brier: float | None
    bins: tuple[Bin, ...]

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def calibration(pairs: Sequence[tuple[float, bool]], bins: int = BINS) -> Calibration:
    """`pairs` as (confidence in 0..1, was it correct)."""
    members: list[list[tuple[float, bool]]] = [[] for _ in range(bins)]
    for confidence, right in pairs:
        confidence = min(1.0, max(0.0, confidence))
        members[min(int(confidence * bins), bins - 1)].append((confidence, right))
    n = len(pairs)
    table = []
    ece = 0.0
    for index, inside in enumerate(members):
        mean = sum(c for c, _ in inside) / len(inside) if inside else None
        accuracy = sum(1 for _, r in inside if r) / len(inside) if inside else None
        if mean is not None and accuracy is not None:
            ece += len(inside) / n * abs(accuracy - mean)
        table.append(Bin(index / bins, (index + 1) / bins, len(inside), mean, accuracy))
    brier = sum((min(1.0, max(0.0, c)) - float(r)) ** 2 for c, r in pairs) / n if n else None
    return Calibration(n, ece if n else None, brier, tuple(table))


@dataclass(frozen=True)
class Comparison:
    pairs: int
    both_correct: int
    only_a: int  # A correct, B not
    only_b: int
    neither: int
    agreement: float | None  # share of pairs with the same outcome
    accuracy_a: float | None
    accuracy_b: float | None
    difference: float | None  # accuracy B - A
    ci_low: float | None
    ci_high: float | None
    mcnemar_p: float | None

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value: the discordant pairs as a fair coin's tosses."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2**n
    return min(1.0, 2 * tail)


def _percentile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * q
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def compare(
    outcomes: Sequence[tuple[bool, bool]],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Comparison:
    """`outcomes` as (A correct, B correct), one per question both runs graded."""
    n = len(outcomes)
    both = sum(1 for a, b in outcomes if a and b)
    only_a = sum(1 for a, b in outcomes if a and not b)
    only_b = sum(1 for a, b in outcomes if b and not a)
    if not n:
        return Comparison(0, 0, 0, 0, 0, None, None, None, None, None, None, None)
    differences = [int(b) - int(a) for a, b in outcomes]
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(differences, k=n)) / n for _ in range(resamples))
    return Comparison(
        pairs=n,
        both_correct=both,
        only_a=only_a,
        only_b=only_b,
        neither=n - both - only_a - only_b,
        agreement=(n - only_a - only_b) / n,
        accuracy_a=(both + only_a) / n,
        accuracy_b=(both + only_b) / n,
        difference=sum(differences) / n,
        ci_low=_percentile(means, 0.025),
        ci_high=_percentile(means, 0.975),
        mcnemar_p=mcnemar_exact(only_a, only_b),
    )
