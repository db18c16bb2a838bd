"""The modules that carry the product's promises, and the fast tests that guard each one.

A mutant is run only against the tests that reach its function (mutmut records which), and
only within the module's test files here, so a module's run stays short: unit tests first,
whole sessions against the fake servers where the promise lives in the loop.
"""

from __future__ import annotations

LOOP_TESTS = (
    "tests/thinking/test_loop.py",
    "tests/thinking/test_promises.py",
    "tests/thinking/test_research.py",
    "tests/thinking/test_format.py",
    "tests/thinking/test_steering.py",
    "tests/thinking/test_provider_outages.py",
    "tests/thinking/test_tokens.py",
)

MODULES: dict[str, tuple[str, ...]] = {
    # capabilities and request building
    "thinking/capabilities.py": (
        "tests/thinking/test_capabilities.py",
        "tests/thinking/test_model_capabilities.py",
    ),
    # the tag extractor and reply parsing
    "thinking/parsing.py": ("tests/thinking/test_parsing.py",),
    "thinking/tags.py": ("tests/thinking/test_tags.py", "tests/thinking/test_parsing.py"),
    # limits and budgets
    "thinking/limits.py": (
        "tests/thinking/test_teams.py",
        "tests/thinking/test_views.py",
        "tests/thinking/test_api.py",
    ),
    # evidence and citations
    "thinking/evidence.py": ("tests/thinking/test_research.py",),
    # authorization
    "thinking/access.py": ("tests/test_authorization.py", "tests/thinking/test_teams.py"),
    # the loop and its steps (run it on the loop's final shape; it is the longest run)
    "thinking/loop.py": LOOP_TESTS,
    "thinking/planner.py": ("tests/thinking/test_research.py", "tests/thinking/test_promises.py"),
    "thinking/tools.py": ("tests/thinking/test_research.py", "tests/thinking/test_promises.py"),
    "thinking/prompts.py": LOOP_TESTS,
    # The lifecycle / step-context module joins here when it lands (issue 15).
}

# `make mutate` with no MODULE: the small, pure modules first; the loop last.
DEFAULT_ORDER = tuple(MODULES)

# CI's smoke run: request building (`build_request`, ~110 mutants) against its pure unit tests,
# so it finishes well under two minutes on two busy cores. It has its own cache slot, so it
# never disturbs the full run's results for the module.
SMOKE_MODULE = "thinking/capabilities.py"
SMOKE_TESTS = ("tests/thinking/test_capabilities.py",)
SMOKE_MUTANTS = "thinking.capabilities.x_build_request__mutmut_*"
