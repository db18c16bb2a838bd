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
    "tests/thinking/test_seed_loop.py",
    "tests/thinking/test_real_claude.py",
    "tests/thinking/test_step_hops.py",
    "tests/thinking/test_lifecycle.py",
    "tests/thinking/test_worker.py",  # run_session as the worker calls it (its shared pools)
)

LIFECYCLE_TESTS = (
    "tests/thinking/test_lifecycle.py",
    "tests/thinking/test_actions.py",
    "tests/thinking/test_step_hops.py",
    "tests/thinking/test_models.py",
    "tests/thinking/test_thinking_sessions.py",
    "tests/thinking/test_worker.py",
    "tests/thinking/test_loop.py",
    "tests/thinking/test_promises.py",
    "tests/thinking/test_steering.py",
    "tests/thinking/test_consumers.py",
    "tests/test_authorization.py",
)

MODULES: dict[str, tuple[str, ...]] = {
    # authorization: who may see a session (every view, API route and socket looks up here)
    "thinking/web/access.py": ("tests/test_authorization.py", "tests/thinking/test_teams.py"),
    # limits and budgets
    "thinking/people/limits.py": (
        "tests/thinking/test_limits.py",
        "tests/thinking/test_api_limits.py",
        "tests/thinking/test_teams.py",
        "tests/thinking/test_actions.py",
    ),
    "thinking/people/budget.py": (
        "tests/thinking/test_real_claude.py",
        "tests/thinking/test_teams.py",
        "tests/thinking/test_limits.py",
        "tests/thinking/test_thinking_sessions.py",
    ),
    # capabilities and request building
    "thinking/provider/capabilities.py": (
        "tests/thinking/test_capabilities.py",
        "tests/thinking/test_model_capabilities.py",
    ),
    # the tag extractor and reply parsing
    "thinking/provider/parsing.py": (
        "tests/thinking/test_parsing.py",
        "tests/thinking/test_seed_parts.py",
    ),
    "thinking/provider/tags.py": ("tests/thinking/test_tags.py", "tests/thinking/test_parsing.py"),
    # evidence and citations
    "thinking/deliberation/evidence.py": (
        "tests/thinking/test_source_store.py",  # the stores one at a time
        "tests/thinking/test_evidence_blocks.py",
        "tests/thinking/test_tools.py",
        "tests/thinking/test_research.py",
        "tests/thinking/test_citations.py",
    ),
    "thinking/deliberation/citations.py": (
        "tests/thinking/test_citations.py",
        "tests/thinking/test_export.py",
        "tests/thinking/test_rendering.py",
    ),
    "thinking/deliberation/tools.py": (
        "tests/thinking/test_tools.py",
        "tests/thinking/test_research.py",
        "tests/thinking/test_promises.py",
        "tests/thinking/test_evidence_blocks.py",
    ),
    # re-ranking: what the model is shown, and the moves (a person's question keeps its place)
    "thinking/deliberation/rerank.py": (
        "tests/thinking/test_seed_loop.py",
        "tests/thinking/test_seed_parts.py",
    ),
    "thinking/deliberation/planner.py": (
        "tests/thinking/test_planner.py",
        "tests/thinking/test_research.py",
        "tests/thinking/test_promises.py",
        "tests/thinking/test_seed_loop.py",
    ),
    # the lifecycle and the step context: people's verbs, the one door for writes, the stores
    "thinking/people/actions.py": (
        *LIFECYCLE_TESTS,
        "tests/thinking/test_cli.py",  # think_here: a session run in this process
        "tests/thinking/test_followups.py",  # extend: more time for a completed session
        "tests/thinking/test_views.py",  # start: the form's errors on the page
    ),
    "thinking/models.py": (*LIFECYCLE_TESTS, "tests/thinking/test_step_stores.py"),
    # the stores one at a time (a cancel mid-failure, the notice while waiting), then sessions
    "thinking/deliberation/steps.py": ("tests/thinking/test_step_stores.py", *LOOP_TESTS),
    # the loop (the longest runs)
    "thinking/deliberation/prompts.py": ("tests/thinking/test_prompts.py", *LOOP_TESTS),
    "thinking/deliberation/loop.py": (
        "tests/thinking/test_focus.py",
        "tests/thinking/test_schedule.py",
        *LOOP_TESTS,
    ),
    # the session log every model call carries
    "thinking/deliberation/transcript.py": (
        "tests/thinking/test_transcript.py",
        "tests/thinking/test_prompts.py",
    ),
}

# Only these mutants of a module are run and counted (mutmut's own names, as globs): of the
# models, the lifecycle and the step context, not field declarations or display helpers.
MUTANTS: dict[str, tuple[str, ...]] = {
    "thinking/models.py": (
        "thinking.models.x__open_step__mutmut_*",
        "thinking.models.xǁStepǁ*",
        "thinking.models.xǁSessionQuerySetǁ*",
        "thinking.models.xǁThinkingSessionǁ*",
        "thinking.models.xǁSubQuestionǁ*",
    ),
}

# `make mutate` with no MODULE: the small, pure modules first; the loop last.
DEFAULT_ORDER = tuple(MODULES)

# CI's smoke run: request building (`build_request`, ~110 mutants) against its pure unit tests,
# so it finishes well under two minutes on two busy cores. It has its own cache slot, so it
# never disturbs the full run's results for the module.
SMOKE_MODULE = "thinking/provider/capabilities.py"
SMOKE_TESTS = ("tests/thinking/test_capabilities.py",)
SMOKE_MUTANTS = "thinking.provider.capabilities.x_build_request__mutmut_*"
