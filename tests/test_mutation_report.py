"""The mutation report (issue 16) keeps what an earlier run measured for modules whose mutmut
results are gone (their caches cleared), saying when it was measured."""

from __future__ import annotations

import json

from mutation import report

EARLIER = """Measured on 2026-11-01 at commit abc1234, mutmut 3.8.1.

| module | mutants | killed | survived | equivalent | timeout | no tests | not run | % killed |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
| thinking/web/access.py | 9 | 9 | 0 | 0 | 0 | 0 | 0 | 100.0% |
| thinking/people/limits.py | 10 | 8 | 2 | 0 | 0 | 0 | 0 | 80.0% (below 90) |
| thinking/deliberation/loop.py | not run yet | | | | | | | |

## thinking/people/limits.py

Survivors:

- thinking/people/limits.py:5 `a` -> `b` (x)
"""


def test_a_module_without_results_keeps_its_earlier_row_and_says_when_it_was_measured():
    kept = report.earlier(EARLIER)
    rows = [
        report.Row("thinking/web/access.py"),  # no results here: the earlier row stays
        report.Row("thinking/people/limits.py", ran=True, killed=10),  # measured again: replaced
        report.Row("thinking/deliberation/loop.py"),
    ]
    text = report.markdown(rows, kept)
    assert (
        "| thinking/web/access.py | 9 | 9 | 0 | 0 | 0 | 0 | 0 | 100.0% (measured at abc1234) |"
        in text
    )
    assert "| thinking/people/limits.py | 10 | 10 | 0 | 0 | 0 | 0 | 0 | 100.0% |" in text
    assert "| thinking/deliberation/loop.py | not run yet |" in text
    assert "`a` -> `b`" not in text  # the earlier survivors went with the earlier row
    assert "No results here for thinking/web/access.py: their rows" in text
    assert "Not run yet: thinking/deliberation/loop.py." in text
    # Carried again by a later report, a row keeps the commit it was measured at.
    again = report.table([report.Row("thinking/web/access.py")], report.earlier(text))
    assert again.splitlines()[-1].endswith("100.0% (measured at abc1234) |")


def test_an_earlier_rows_section_comes_with_it():
    text = report.markdown([report.Row("thinking/people/limits.py")], report.earlier(EARLIER))
    assert "| thinking/people/limits.py | 10 | 8 | 2 |" in text
    assert "- thinking/people/limits.py:5 `a` -> `b` (x)" in text


def test_survivors_are_tested_again_but_not_those_listed_as_equivalent(tmp_path, monkeypatch):
    from mutation import run

    module = "thinking/deliberation/loop.py"
    meta = tmp_path / (module + ".meta")
    meta.parent.mkdir(parents=True)
    codes = {"m.equivalent": 0, "m.survivor": 0, "m.killed": 1, "m.no_tests": 33}
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    monkeypatch.setattr(run, "MUTANTS", tmp_path)
    equivalents = tmp_path / "equivalents"
    equivalents.mkdir()
    (equivalents / "thinking.deliberation.loop.toml").write_text(
        '[[equivalent]]\nmutant = "m.equivalent"\nchange = "x"\nreason = "y"\n'
    )
    monkeypatch.setattr(report, "EQUIVALENTS", equivalents)

    run.retest_survivors(module)

    assert json.loads(meta.read_text())["exit_code_by_key"] == {
        "m.equivalent": 0,  # no new test can kill it: its function's tests are not rerun
        "m.survivor": None,
        "m.killed": 1,
        "m.no_tests": None,
    }


def test_a_cleared_cache_resumes_from_the_kept_verdicts(tmp_path, monkeypatch):
    from mutation import run

    module = "thinking/deliberation/loop.py"
    mutants, results = tmp_path / "mutants", tmp_path / "results"
    monkeypatch.setattr(run, "MUTANTS", mutants)
    monkeypatch.setattr(run, "RESULTS", results)
    results.mkdir()
    kept = {"exit_code_by_key": {"thinking.deliberation.loop.x_f__mutmut_1": 1}}
    (results / "thinking.deliberation.loop.json").write_text(json.dumps(kept))

    run.resume(module)  # no local results: mutmut starts from the kept ones
    meta = mutants / f"{module}.meta"
    assert json.loads(meta.read_text()) == kept

    local = {"exit_code_by_key": {"thinking.deliberation.loop.x_f__mutmut_1": 0}}
    meta.write_text(json.dumps(local))
    run.resume(module)  # local results win over the kept ones
    assert json.loads(meta.read_text()) == local
    run.keep(module)  # and are kept for the next time the cache is cleared
    assert json.loads((results / "thinking.deliberation.loop.json").read_text()) == local


def test_a_module_given_more_test_files_keeps_its_verdicts(tmp_path, monkeypatch):
    from mutation import run

    module = "thinking/deliberation/loop.py"
    mutants, results = tmp_path / "mutants", tmp_path / "results"
    monkeypatch.setattr(run, "MUTANTS", mutants)
    monkeypatch.setattr(run, "RESULTS", results)
    monkeypatch.setattr(run, "CACHE", tmp_path / "cache")
    run.activate(module)
    local = {"exit_code_by_key": {"m.killed": 1, "m.survivor": 0}}
    meta = mutants / f"{module}.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps(local))
    (mutants / "mutmut-stats.json").write_text("{}")  # built with the old test files
    run.widen_tests(module, ("tests/a.py",))  # the first run records its test files

    run.widen_tests(module, ("tests/a.py", "tests/b.py"))
    run.resume(module)

    # mutmut would reset every verdict for the new selection: it starts from the kept ones.
    assert json.loads(meta.read_text()) == local
    assert not (mutants / "mutmut-stats.json").exists()
    assert (mutants / run.TESTS).read_text().split() == ["tests/a.py", "tests/b.py"]

    (mutants / "mutmut-stats.json").write_text("{}")
    run.widen_tests(module, ("tests/b.py",))  # a file taken away: left to mutmut's reset
    assert (mutants / "mutmut-stats.json").exists()


def test_a_survivor_is_placed_on_its_own_line_when_the_same_text_occurs_twice():
    # The periodic synthesis's check and the final answer's are the same call; a survivor
    # list that named the first for a mutant of the second sent readers to the wrong code.
    lines = [
        "def deliberate():",
        "    while True:",
        "        check(worker_id=run.worker_id)",
        "    final = answer()",
        "    check(worker_id=run.worker_id)",
        "    return final",
    ]
    diff = (
        "--- m.py\n+++ m.py\n@@ -4,3 +4,3 @@\n"
        "     final = answer()\n"
        "-    check(worker_id=run.worker_id)\n"
        "+    check(worker_id=None)\n"
        "     return final\n"
    )
    assert report._changed_line(diff, lines, 1, len(lines)) == 5
    assert report._change(diff) == ("check(worker_id=run.worker_id)", "check(worker_id=None)")
    # A hunk that no longer matches the code (it changed since) gives no line.
    assert report._changed_line(diff.replace("answer()", "other()"), lines, 1, 6) is None
