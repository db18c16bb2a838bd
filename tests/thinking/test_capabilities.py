"""Request building and validation for thinking and effort (pure: no server)."""

from __future__ import annotations

import pytest

from thinking.provider.capabilities import (
    INTERLEAVED_BETA,
    Capabilities,
    ThinkingSettings,
    build_request,
    builtin_capabilities,
    validate,
)

ADAPTIVE_ONLY = builtin_capabilities("claude-opus-5-5")  # default effort medium
BOTH = builtin_capabilities("claude-sonnet-4-6")
MANUAL_ONLY = builtin_capabilities("claude-haiku-4-5")


def request(mode: str, caps: Capabilities, **kwargs: object) -> object:
    settings = ThinkingSettings(
        mode=mode,
        budget_tokens=kwargs.pop("budget", 2048),  # type: ignore[arg-type]
        effort=kwargs.pop("effort", ""),  # type: ignore[arg-type]
        max_tokens=kwargs.pop("max_tokens", 8000),  # type: ignore[arg-type]
    )
    return build_request(settings, caps, **kwargs)  # type: ignore[arg-type]


def test_adaptive_asks_for_summarized_thinking():
    built = request("adaptive", ADAPTIVE_ONLY)
    assert built.params["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert built.thinking == "adaptive" and not built.headers


def test_manual_sends_a_budget():
    built = request("manual", BOTH, budget=3000)
    assert built.params["thinking"] == {"type": "enabled", "budget_tokens": 3000}
    assert built.params["max_tokens"] == 8000


def test_off_sends_no_thinking_key():
    assert "thinking" not in request("off", BOTH).params


def test_utility_calls_can_skip_thinking():
    built = request("adaptive", ADAPTIVE_ONLY, skip_thinking=True)
    assert "thinking" not in built.params and built.thinking == "off"


def test_an_older_model_gets_manual_thinking_instead_of_adaptive():
    built = request("adaptive", MANUAL_ONLY, budget=None, max_tokens=8000)
    assert built.params["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert built.thinking == "manual"


def test_a_newer_model_never_gets_a_budget():
    built = request("manual", ADAPTIVE_ONLY, budget=5000)
    assert built.params["thinking"] == {"type": "adaptive", "display": "summarized"}


def test_the_interleaved_beta_header_goes_with_manual_thinking_and_tools_on_claude_4():
    assert request("manual", BOTH, tools=True).headers == {"anthropic-beta": INTERLEAVED_BETA}
    assert request("manual", BOTH, tools=False).headers == {}
    assert request("adaptive", BOTH, tools=True).headers == {}


@pytest.mark.parametrize("effort", ["low", "medium", "high", "xhigh", "max"])
def test_effort_is_sent_only_when_it_is_not_the_models_default(effort: str):
    built = request("adaptive", ADAPTIVE_ONLY, effort=effort)
    expected = None if effort == "medium" else {"effort": effort}
    assert built.params.get("output_config") == expected


def test_effort_is_left_out_for_models_without_it():
    assert "output_config" not in request("manual", MANUAL_ONLY, effort="low").params


def test_max_tokens_is_capped_by_the_model():
    assert request("off", MANUAL_ONLY, max_tokens=500_000).params["max_tokens"] == 64_000


@pytest.mark.parametrize(
    ("wanted", "field", "message"),
    [
        (ThinkingSettings("manual", 512, "", 8000), "budget_tokens", "at least 1024"),
        (ThinkingSettings("manual", 8000, "", 8000), "budget_tokens", "less than max tokens"),
        (ThinkingSettings("manual", None, "", 8000), "budget_tokens", "needs a thinking budget"),
        (ThinkingSettings("sometimes", None, "", 8000), "mode", "must be one of"),
        (ThinkingSettings("off", None, "extreme", 8000), "effort", "must be one of"),
    ],
)
def test_invalid_combinations_are_explained(wanted: ThinkingSettings, field: str, message: str):
    assert message in validate(wanted)[field]


def test_a_mode_the_model_refuses_is_explained():
    problems = validate(ThinkingSettings("manual", 2048, "", 8000), ADAPTIVE_ONLY)
    assert "does not accept manual thinking" in problems["mode"]
    problems = validate(ThinkingSettings("adaptive", None, "", 8000), MANUAL_ONLY)
    assert "does not accept adaptive thinking" in problems["mode"]


def test_an_effort_the_model_refuses_is_explained():
    assert (
        "does not take an effort"
        in validate(ThinkingSettings("off", None, "low", 8000), MANUAL_ONLY)["effort"]
    )
    assert (
        "takes effort low, medium, high"
        in validate(
            ThinkingSettings("off", None, "max", 8000), builtin_capabilities("claude-opus-4-5")
        )["effort"]
    )


def test_a_valid_configuration_has_no_problems():
    assert validate(ThinkingSettings("adaptive", None, "high", 16000), ADAPTIVE_ONLY) == {}
    assert validate(ThinkingSettings("manual", 4096, "", 16000), BOTH) == {}


# --- defaults that fit the model (issue 13, item 1) ------------------------------------

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from thinking.provider.capabilities import MODEL_IDS, best_mode  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
THINKING_VARS = ("DEEPTHINK_THINKING", "DEEPTHINK_THINKING_BUDGET", "DEEPTHINK_EFFORT")


def start_up(model: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`manage.py check` as an operator runs it: only the model (and what is given) set."""
    clean = {k: v for k, v in os.environ.items() if k not in THINKING_VARS}
    clean.pop("DATABASE_URL", None)
    clean.pop("REDIS_URL", None)
    clean.update(DEEPTHINK_MODEL=model, ANTHROPIC_API_KEY="sk-test", **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_manual_only_model_starts_with_thinking_settings_unset():
    # The first real deployment of the issue: a common model that takes only manual thinking.
    done = start_up("claude-sonnet-4-5")
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("model", [*MODEL_IDS, "qwen3-coder:30b"])
def test_every_model_loads_the_settings_with_thinking_unset(
    model: str, monkeypatch: pytest.MonkeyPatch
):
    """The settings module, run again as at start-up, with only DEEPTHINK_MODEL set (a
    subprocess per model would take minutes on a loaded machine)."""
    import importlib

    import config.settings as module

    for name in THINKING_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEEPTHINK_MODEL", model)
    try:
        loaded = importlib.reload(module)
        assert loaded.DEEPTHINK_THINKING == "auto" and loaded.DEEPTHINK_THINKING_BUDGET is None
    finally:
        monkeypatch.undo()
        importlib.reload(module)


def test_a_value_the_operator_set_is_still_refused_loudly():
    done = start_up("claude-sonnet-4-5", DEEPTHINK_THINKING="adaptive")
    assert done.returncode != 0
    assert "DEEPTHINK_THINKING" in done.stderr and "does not accept adaptive" in done.stderr


@pytest.mark.parametrize("model", MODEL_IDS)
def test_unset_thinking_asks_for_the_best_mode_the_model_takes(model: str):
    caps = builtin_capabilities(model)
    built = build_request(ThinkingSettings(mode="auto", max_tokens=4096), caps)
    if "adaptive" in caps.thinking_types:
        assert built.params["thinking"]["type"] == "adaptive"
    else:
        # Manual with a budget the API accepts: at least 1024 and below max_tokens.
        budget = built.params["thinking"]["budget_tokens"]
        assert built.thinking == "manual" and 1024 <= budget < built.params["max_tokens"]


def test_unset_thinking_is_off_when_no_valid_budget_fits():
    assert best_mode(MANUAL_ONLY, max_tokens=1024) == "off"
    built = build_request(ThinkingSettings(mode="auto", max_tokens=1000), MANUAL_ONLY)
    assert "thinking" not in built.params and built.thinking == "off"


def test_an_unknown_model_gets_manual_thinking():
    caps = builtin_capabilities("qwen3-coder:30b")
    built = build_request(ThinkingSettings(mode="auto", max_tokens=8000), caps)
    assert built.params["thinking"] == {"type": "enabled", "budget_tokens": 4000}


def test_effort_is_sent_without_thinking_too():
    assert request("off", ADAPTIVE_ONLY, effort="low").params["output_config"] == {"effort": "low"}
    assert "thinking" not in request("off", ADAPTIVE_ONLY, effort="low").params


def test_the_allowed_values_are_named_in_the_messages():
    problems = validate(ThinkingSettings("sometimes", None, "extreme", 8000))
    assert problems["mode"] == "Thinking mode must be one of auto, off, adaptive, manual."
    assert problems["effort"] == "Effort must be one of low, medium, high, xhigh, max."


@pytest.mark.parametrize(("max_tokens", "refused"), [(0, True), (-5, True), (1, False)])
def test_max_tokens_must_be_positive(max_tokens: int, refused: bool):
    problems = validate(ThinkingSettings("off", None, "", max_tokens))
    assert problems.get("max_tokens") == ("Max tokens must be positive." if refused else None)


def test_a_model_that_cannot_think_gets_no_thinking_whatever_is_asked():
    no_thinking = Capabilities(frozenset({"disabled"}))
    for mode in ("adaptive", "manual"):
        built = request(mode, no_thinking, tools=True)
        assert built.thinking == "off"  # what the session's model calls record
        assert "thinking" not in built.params and not built.headers


def test_the_interleaved_beta_is_not_sent_without_tools():
    built = request("manual", MANUAL_ONLY)
    assert built.params["thinking"]["type"] == "enabled" and built.headers == {}


def test_each_problem_has_its_own_message():
    assert validate(ThinkingSettings("manual", None, "", 8000))["budget_tokens"] == (
        "Manual thinking needs a thinking budget."
    )
    assert validate(ThinkingSettings("adaptive", None, "", 8000), MANUAL_ONLY)["mode"] == (
        "This model does not accept adaptive thinking (it accepts: auto, off, manual)."
    )
    assert validate(ThinkingSettings("off", None, "low", 8000), MANUAL_ONLY)["effort"] == (
        "This model does not take an effort level."
    )
    assert validate(ThinkingSettings("off", None, "", 64_001), MANUAL_ONLY)["max_tokens"] == (
        "This model writes at most 64000 tokens."
    )


def test_the_smallest_budget_and_the_models_own_limit_are_allowed():
    assert validate(ThinkingSettings("manual", 1024, "", 8000), BOTH) == {}
    assert validate(ThinkingSettings("off", None, "", 64_000), MANUAL_ONLY) == {}


def test_a_value_that_is_not_allowed_at_all_is_explained_before_what_the_model_takes():
    problems = validate(ThinkingSettings("sometimes", None, "extreme", 8000), MANUAL_ONLY)
    assert problems["mode"] == "Thinking mode must be one of auto, off, adaptive, manual."
    assert problems["effort"] == "Effort must be one of low, medium, high, xhigh, max."


@pytest.mark.parametrize(
    ("budget", "max_tokens", "sent"),
    [
        (None, 40_000, 10_000),  # no budget given: half the output, at most 10k
        (None, 8_001, 4_000),
        (9_000, 8_000, 7_999),  # always below max_tokens, as the API requires
        (1_024, 8_000, 1_024),  # the API's minimum is allowed
    ],
)
def test_the_manual_budget_sent(budget: int | None, max_tokens: int, sent: int):
    built = request("manual", MANUAL_ONLY, budget=budget, max_tokens=max_tokens)
    assert built.params["thinking"] == {"type": "enabled", "budget_tokens": sent}
    assert built.thinking == "manual"


def test_a_budget_below_the_minimum_means_no_thinking_rather_than_an_error():
    # No room for the API's minimum budget (1024) below max tokens: no thinking, no error.
    built = request("manual", MANUAL_ONLY, budget=None, max_tokens=1_024)
    assert "thinking" not in built.params and built.thinking == "off"


def test_manual_thinking_without_a_budget_gets_the_minimum_that_fits():
    built = request("manual", MANUAL_ONLY, budget=None, max_tokens=1_500)
    assert built.params["thinking"] == {"type": "enabled", "budget_tokens": 1024}
