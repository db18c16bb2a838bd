"""The benchmarks' own arithmetic and choices (`make bench` itself runs in CI as a smoke run)."""

from __future__ import annotations

import pytest

from bench import report
from bench.compare import merge
from bench.harness import covered, percentile
from bench.run import NAMES, chosen


def test_calls_and_searches_in_parallel_count_once_on_the_critical_path():
    # Two searches at once, then a model call that starts before they end, then a gap.
    spans = [(0.0, 0.3), (0.05, 0.35), (0.3, 0.5), (1.0, 1.1)]
    assert covered(spans) == pytest.approx(0.6)
    assert covered([]) == 0.0


def test_percentile_is_a_value_that_was_measured():
    delays = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(delays, 0.5) == 3.0
    assert percentile(delays, 0.95) == 5.0


def test_benchmarks_are_chosen_by_name_or_number_and_an_unknown_one_is_refused():
    assert chosen("") == list(NAMES)
    assert chosen("1, live") == ["cpu", "live"]
    with pytest.raises(SystemExit, match="no benchmark 'speed'"):
        chosen("speed")


def test_the_comparison_takes_each_sides_median_and_shows_after_over_before():
    def run(value: float) -> dict:
        figure = {"key": "cpu.page", "label": "CPU per model call", "value": value}
        return {"figures": [{**figure, "unit": "ms", "target": "< 19 ms"}]}

    before = merge([run(10.0), run(30.0), run(12.0)])
    after = merge([run(14.0), run(15.0), run(16.0)])
    assert before["cpu.page"]["median"] == 12.0
    row = {
        "label": "CPU per model call",
        "unit": "ms",
        "target": "< 19 ms",
        "before": before["cpu.page"]["median"],
        "after": after["cpu.page"]["median"],
    }
    line = report.comparison([row], markdown=True).splitlines()[-1]
    assert line == "| CPU per model call | 12.0 ms | 15.0 ms | 1.25 | < 19 ms |"
