"""What a model accepts (thinking types, effort levels, output size) and how a request asks
for thinking. Pure: no Django, no SDK, so settings can validate with it at start-up.

Capabilities come from the Models API when the server has it (see `llm.LLM.capabilities`);
this module's table is the fallback for servers that do not (local Anthropic-compatible
servers) and for validating before any request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# "auto" (the setting left unset): the best mode the model takes, resolved per call from
# what the server says the model accepts.
THINKING_MODES = ("auto", "off", "adaptive", "manual")
EFFORT_LEVELS = ("low", "medium", "high", "xhigh", "max")
MIN_BUDGET_TOKENS = 1024
DEFAULT_BUDGET_TOKENS = 10_000
INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"


@dataclass(frozen=True)
class Capabilities:
    # Thinking config types the model accepts: "adaptive", "enabled", "disabled", ...
    thinking_types: frozenset[str]
    effort_levels: frozenset[str] = frozenset()
    default_effort: str = "high"
    max_tokens: int | None = None
    # Claude 4-era models need a beta header to think between tool calls in manual mode.
    interleaved_beta: bool = False
    source: str = "table"

    @property
    def modes(self) -> tuple[str, ...]:
        """The thinking modes a person may pick for this model."""
        modes = ["auto", "off"]
        if "adaptive" in self.thinking_types:
            modes.append("adaptive")
        if "enabled" in self.thinking_types:
            modes.append("manual")
        return tuple(modes)


_ALL = frozenset(EFFORT_LEVELS)
_NO_XHIGH = frozenset({"low", "medium", "high", "max"})

# Prefix -> capabilities, longest prefix first. From the model pages (see shared/reference).
_TABLE: tuple[tuple[str, Capabilities], ...] = (
    ("claude-opus-5-5", Capabilities(frozenset({"adaptive"}), _ALL, "medium", 128_000)),
    ("claude-fable-5", Capabilities(frozenset({"adaptive"}), _ALL, "high", 128_000)),
    ("claude-mythos", Capabilities(frozenset({"adaptive"}), _ALL, "high", 128_000)),
    (
        "claude-sonnet-5-5",
        Capabilities(frozenset({"adaptive", "between_tools"}), _ALL, "high", 128_000),
    ),
    (
        "claude-haiku-5-5",
        Capabilities(frozenset({"adaptive", "disabled"}), _ALL, "medium", 128_000),
    ),
    ("claude-opus-5", Capabilities(frozenset({"adaptive", "disabled"}), _ALL, "high", 128_000)),
    ("claude-sonnet-5", Capabilities(frozenset({"adaptive"}), _ALL, "high", 128_000)),
    ("claude-opus-4-8", Capabilities(frozenset({"adaptive"}), _ALL, "high", 128_000)),
    ("claude-opus-4-7", Capabilities(frozenset({"adaptive"}), _ALL, "high", 128_000)),
    (
        "claude-opus-4-6",
        Capabilities(
            frozenset({"adaptive", "enabled", "disabled"}),
            _NO_XHIGH,
            "high",
            128_000,
            interleaved_beta=True,
        ),
    ),
    (
        "claude-sonnet-4-6",
        Capabilities(
            frozenset({"adaptive", "enabled", "disabled"}),
            _NO_XHIGH,
            "high",
            64_000,
            interleaved_beta=True,
        ),
    ),
    (
        "claude-opus-4-5",
        Capabilities(
            frozenset({"enabled", "disabled"}),
            frozenset({"low", "medium", "high"}),
            "high",
            64_000,
            interleaved_beta=True,
        ),
    ),
    (
        "claude-sonnet-4-5",
        Capabilities(
            frozenset({"enabled", "disabled"}), frozenset(), "high", 64_000, interleaved_beta=True
        ),
    ),
    (
        "claude-haiku-4-5",
        Capabilities(
            frozenset({"enabled", "disabled"}), frozenset(), "high", 64_000, interleaved_beta=True
        ),
    ),
    (
        "claude-",
        Capabilities(
            frozenset({"enabled", "disabled"}), frozenset(), "high", None, interleaved_beta=True
        ),
    ),
)
# A model we know nothing about (a local server's): manual thinking is the widely accepted
# form; servers that do not think ignore it.
UNKNOWN = Capabilities(
    frozenset({"enabled", "disabled"}), frozenset(), "high", None, source="default"
)


# The current model ids (for the start form when the server cannot list its models, and for
# checking that every one of them starts with default settings).
MODEL_IDS = (
    "claude-opus-5-5",
    "claude-sonnet-5-5",
    "claude-haiku-5-5",
    "claude-fable-5-2",
    "claude-fable-5-1",
    "claude-fable-5",
    "claude-mythos-5",
    "claude-opus-5",
    "claude-sonnet-5",
    "claude-opus-4-8",
    "claude-opus-4-7",
    "claude-opus-4-6",
    "claude-sonnet-4-6",
    "claude-opus-4-5",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
)


def builtin_capabilities(model: str) -> Capabilities:
    for prefix, capabilities in _TABLE:
        if model.startswith(prefix):
            return capabilities
    return UNKNOWN


def from_models_api(info: Any) -> Capabilities | None:
    """Capabilities from a Models API `ModelInfo`, or None when it does not say."""
    caps = getattr(info, "capabilities", None)
    thinking = getattr(caps, "thinking", None)
    if caps is None or thinking is None:
        return None
    types = frozenset(
        name
        for name in ("adaptive", "enabled", "disabled", "between_tools")
        if getattr(getattr(thinking.types, name, None), "supported", False)
    )
    effort = getattr(caps, "effort", None)
    levels: frozenset[str] = frozenset()
    if effort is not None and getattr(effort, "supported", False):
        levels = frozenset(
            name
            for name in EFFORT_LEVELS
            if getattr(getattr(effort, name, None), "supported", False)
        )
    fallback = builtin_capabilities(getattr(info, "id", "") or "")
    return Capabilities(
        thinking_types=types,
        effort_levels=levels,
        default_effort=fallback.default_effort,
        max_tokens=getattr(info, "max_tokens", None) or fallback.max_tokens,
        interleaved_beta=fallback.interleaved_beta,
        source="api",
    )


def best_mode(caps: Capabilities, *, max_tokens: int) -> str:
    """What an unset thinking mode means for this model: adaptive where it is accepted, else
    manual when a valid budget fits under max_tokens, else off."""
    if "adaptive" in caps.thinking_types:
        return "adaptive"
    if "enabled" in caps.thinking_types and min(max_tokens, caps.max_tokens or max_tokens) > (
        MIN_BUDGET_TOKENS
    ):
        return "manual"
    return "off"


def manual_budget(requested: int | None, max_tokens: int) -> int:
    """A budget the API accepts: at least 1024 and less than max_tokens (0 if none fits)."""
    budget = requested or min(DEFAULT_BUDGET_TOKENS, max_tokens // 2)
    budget = min(max(budget, MIN_BUDGET_TOKENS), max_tokens - 1)
    return budget if budget >= MIN_BUDGET_TOKENS else 0


@dataclass(frozen=True)
class ThinkingSettings:
    mode: str = "off"
    budget_tokens: int | None = None
    effort: str = ""  # empty: the model's default
    max_tokens: int = 4096


def validate(settings: ThinkingSettings, caps: Capabilities | None = None) -> dict[str, str]:
    """Problems with a thinking configuration, by field name; empty when it is valid."""
    errors: dict[str, str] = {}
    if settings.mode not in THINKING_MODES:
        errors["mode"] = f"Thinking mode must be one of {', '.join(THINKING_MODES)}."
    if settings.effort and settings.effort not in EFFORT_LEVELS:
        errors["effort"] = f"Effort must be one of {', '.join(EFFORT_LEVELS)}."
    if settings.max_tokens < 1:
        errors["max_tokens"] = "Max tokens must be positive."
    if settings.mode == "manual":
        budget = settings.budget_tokens
        if budget is None:
            errors["budget_tokens"] = "Manual thinking needs a thinking budget."
        elif budget < MIN_BUDGET_TOKENS:
            errors["budget_tokens"] = f"The thinking budget must be at least {MIN_BUDGET_TOKENS}."
        elif budget >= settings.max_tokens:
            errors["budget_tokens"] = (
                f"The thinking budget ({budget}) must be less than max tokens "
                f"({settings.max_tokens})."
            )
    if caps is not None and "mode" not in errors and settings.mode not in caps.modes:
        errors["mode"] = (
            f"This model does not accept {settings.mode} thinking "
            f"(it accepts: {', '.join(caps.modes)})."
        )
    if caps is not None and settings.effort and "effort" not in errors:
        if not caps.effort_levels:
            errors["effort"] = "This model does not take an effort level."
        elif settings.effort not in caps.effort_levels:
            levels = ", ".join(e for e in EFFORT_LEVELS if e in caps.effort_levels)
            errors["effort"] = f"This model takes effort {levels}."
    if caps is not None and caps.max_tokens and settings.max_tokens > caps.max_tokens:
        errors["max_tokens"] = f"This model writes at most {caps.max_tokens} tokens."
    return errors


@dataclass
class Request:
    """The thinking-related part of one Messages API call."""

    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    thinking: str = "off"  # what was actually asked for: off / adaptive / manual


def build_request(
    settings: ThinkingSettings,
    caps: Capabilities,
    *,
    tools: bool = False,
    skip_thinking: bool = False,
) -> Request:
    """`thinking`, `output_config` and `max_tokens` for a call, fitted to the model.

    An adaptive request to a model that only knows manual thinking becomes manual, and a
    manual one to a model that refuses budgets becomes adaptive, so neither errors.
    Utility calls pass `skip_thinking` and get no thinking at all.
    """
    max_tokens = settings.max_tokens
    if caps.max_tokens:
        max_tokens = min(max_tokens, caps.max_tokens)
    request = Request(params={"max_tokens": max_tokens})
    mode = "off" if skip_thinking else settings.mode
    if mode == "auto":
        mode = best_mode(caps, max_tokens=max_tokens)
    if mode == "adaptive" and "adaptive" not in caps.thinking_types:
        mode = "manual" if "enabled" in caps.thinking_types else "off"
    elif mode == "manual" and "enabled" not in caps.thinking_types:
        mode = "adaptive" if "adaptive" in caps.thinking_types else "off"
    if mode == "adaptive":
        # Newer models omit thinking text unless asked; the page shows it.
        request.params["thinking"] = {"type": "adaptive", "display": "summarized"}
    elif mode == "manual":
        budget = manual_budget(settings.budget_tokens, max_tokens)
        if budget:
            request.params["thinking"] = {"type": "enabled", "budget_tokens": budget}
            if tools and caps.interleaved_beta:
                request.headers["anthropic-beta"] = INTERLEAVED_BETA
        else:
            mode = "off"
    request.thinking = mode
    effort = settings.effort
    if effort and effort in caps.effort_levels and effort != caps.default_effort:
        request.params["output_config"] = {"effort": effort}
    return request
