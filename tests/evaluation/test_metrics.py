"""The figures against values worked out by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import math

import pytest

from evaluation import metrics

C, W, N = "correct", "incorrect", "not_attempted"  # W: wrong


def test_accuracy_accuracy_on_attempted_and_their_harmonic_mean():
    found = metrics.scores([C, C, W, N, C, W])
    assert (found.correct, found.incorrect, found.not_attempted, found.graded) == (3, 2, 1, 6)
    assert found.accuracy == pytest.approx(3 / 6)
    assert found.accuracy_attempted == pytest.approx(3 / 5)
    # 2 · 0.5 · 0.6 / (0.5 + 0.6) = 0.6 / 1.1
    assert found.f_score == pytest.approx(0.5454545, abs=1e-6)


def test_nothing_attempted_has_no_accuracy_on_attempted_and_no_f_score():
    found = metrics.scores([N, N])
    assert found.accuracy == 0 and found.accuracy_attempted is None and found.f_score is None
    assert metrics.scores([]).accuracy is None


def test_expected_calibration_error_and_brier_score():
    pairs = [(0.95, True), (0.9, True), (0.85, False), (0.3, False), (0.35, True), (0.05, False)]
    found = metrics.calibration(pairs)
    # bins of 0.1: [0.9, 1.0]: mean 0.925, accuracy 1 -> 2/6 · 0.075 = 0.025
    #              [0.8, 0.9): 0.85, 0 -> 1/6 · 0.85 = 0.141667
    #              [0.3, 0.4): 0.325, 0.5 -> 2/6 · 0.175 = 0.058333
    #              [0.0, 0.1): 0.05, 0 -> 1/6 · 0.05 = 0.008333
    assert found.ece == pytest.approx(0.233333, abs=1e-6)
    # (0.05² + 0.1² + 0.85² + 0.3² + 0.65² + 0.05²) / 6 = 1.25 / 6
    assert found.brier == pytest.approx(0.208333, abs=1e-6)
    counts = {b.low: b.count for b in found.bins if b.count}
    assert counts == {0.9: 2, 0.8: 1, 0.3: 2, 0.0: 1}
    top = found.bins[9]
    assert top.mean_confidence == pytest.approx(0.925) and top.accuracy == 1.0


def test_perfect_confidence_lands_in_the_top_bin_and_a_sure_right_answer_costs_nothing():
    found = metrics.calibration([(1.0, True), (0.0, False)])
    assert found.bins[9].count == 1 and found.bins[0].count == 1
    assert found.ece == 0 and found.brier == 0
    assert metrics.calibration([]).ece is None


def test_mcnemar_exact_p_value():
    # 1 and 5 discordant pairs: 2 · (C(6,0) + C(6,1)) / 2⁶ = 14 / 64
    assert metrics.mcnemar_exact(1, 5) == pytest.approx(14 / 64)
    assert metrics.mcnemar_exact(3, 3) == 1.0
    assert metrics.mcnemar_exact(0, 0) == 1.0


def test_the_paired_bootstrap_interval_matches_the_normal_approximation():
    # 40 questions: 20 both right, 2 only A, 10 only B, 8 neither: B gains 8 / 40 = 0.2.
    outcomes = [(True, True)] * 20 + [(True, False)] * 2 + [(False, True)] * 10
    outcomes += [(False, False)] * 8
    found = metrics.compare(outcomes)
    assert (found.both_correct, found.only_a, found.only_b, found.neither) == (20, 2, 10, 8)
    assert found.difference == pytest.approx(0.2) and found.agreement == pytest.approx(28 / 40)
    assert found.accuracy_a == pytest.approx(22 / 40) and found.accuracy_b == pytest.approx(0.75)
    # differences: ten +1, two -1, 28 zeros: sd = sqrt(12/40 - 0.2²) = 0.5099; se = sd / √40
    se = math.sqrt(12 / 40 - 0.2**2) / math.sqrt(40)
    assert found.ci_low == pytest.approx(0.2 - 1.96 * se, abs=0.02)
    assert found.ci_high == pytest.approx(0.2 + 1.96 * se, abs=0.02)
    assert found.ci_low > 0  # a real gain: McNemar agrees (2 vs 10 discordant)
    assert found.mcnemar_p == pytest.approx(2 * (1 + 12 + 66) / 4096)
    assert metrics.compare(outcomes) == found  # the seed is fixed


def test_identical_runs_have_a_zero_width_interval():
    found = metrics.compare([(True, True), (False, False)] * 5)
    assert found.difference == 0 and (found.ci_low, found.ci_high) == (0, 0)
    assert found.agreement == 1 and found.mcnemar_p == 1
    assert metrics.compare([]).difference is None
