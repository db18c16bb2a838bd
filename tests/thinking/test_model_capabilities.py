"""What a model accepts, as the Models API says it (through the fake server and the real SDK):
the thinking modes a person may pick, the effort levels, and the output limit."""

from __future__ import annotations

from typing import Any

import pytest

from thinking.provider import llm as llm_module
from thinking.provider.capabilities import UNKNOWN, builtin_capabilities
from thinking.provider.llm import LLM

YES = {"supported": True}
NO = {"supported": False}


def model_info(model: str, *, types: dict | None = None, effort: dict | None = None, **more: Any):
    """A Models API body; `types` and `effort` replace the thinking types and effort blocks."""
    capabilities: dict[str, Any] = {
        "thinking": {"supported": True, "types": types if types is not None else {}},
    }
    if effort is not None:
        capabilities["effort"] = effort
    body = {
        "type": "model",
        "id": model,
        "display_name": model,
        "created_at": "2026-11-01T00:00:00Z",
        "capabilities": capabilities,
    }
    body.update(more)
    return body


@pytest.fixture
async def capabilities_of(fake_claude: Any) -> Any:
    llm_module._capabilities_cache.clear()
    client = LLM.from_settings()

    async def ask(model: str, body: dict | None) -> Any:
        if body is not None:
            fake_claude.models[model] = body
        return await client.capabilities(model)

    yield ask
    await client.close()


async def test_the_models_api_decides_modes_effort_and_output_limit(capabilities_of: Any):
    types = {"adaptive": YES, "enabled": YES, "disabled": YES, "between_tools": YES}
    effort = {"supported": True, "low": YES, "medium": NO, "high": YES, "max": NO}
    body = model_info("claude-sonnet-4-6-20990101", types=types, effort=effort, max_tokens=50_000)

    caps = await capabilities_of("claude-sonnet-4-6-20990101", body)

    assert caps.thinking_types == {"adaptive", "enabled", "disabled", "between_tools"}
    assert caps.modes == ("auto", "off", "adaptive", "manual")
    assert caps.effort_levels == {"low", "high"}
    assert caps.max_tokens == 50_000
    assert caps.source == "api"
    # What the API does not say comes from the table for the model's family.
    family = builtin_capabilities("claude-sonnet-4-6")
    assert caps.default_effort == family.default_effort == "high"
    assert caps.interleaved_beta is True


async def test_unsupported_or_missing_thinking_types_are_not_offered(capabilities_of: Any):
    types = {"adaptive": YES, "enabled": NO, "disabled": {}}  # between_tools not mentioned
    caps = await capabilities_of("claude-x-1", model_info("claude-x-1", types=types))

    assert caps.thinking_types == {"adaptive"}
    assert caps.modes == ("auto", "off", "adaptive")


async def test_effort_levels_count_only_when_effort_itself_is_supported(capabilities_of: Any):
    switched_off = {"supported": False, "low": YES, "high": YES}
    caps = await capabilities_of("claude-x-2", model_info("claude-x-2", effort=switched_off))
    assert caps.effort_levels == frozenset()

    unclear = {"supported": True, "low": YES, "high": {}}  # a level without a verdict
    caps = await capabilities_of("claude-x-3", model_info("claude-x-3", effort=unclear))
    assert caps.effort_levels == {"low"}

    caps = await capabilities_of("claude-x-4", model_info("claude-x-4"))  # no effort block
    assert caps.effort_levels == frozenset() and caps.source == "api"


async def test_the_default_effort_is_the_familys(capabilities_of: Any):
    # claude-opus-5-5's default effort is medium: an effort of medium is then not sent.
    caps = await capabilities_of("claude-opus-5-5-2099", model_info("claude-opus-5-5-2099"))
    assert caps.default_effort == "medium"


async def test_without_an_output_limit_the_family_table_decides(capabilities_of: Any):
    caps = await capabilities_of("claude-opus-4-5-2099", model_info("claude-opus-4-5-2099"))
    assert caps.max_tokens == builtin_capabilities("claude-opus-4-5").max_tokens == 64_000

    # A model the table does not know: no limit, the default effort of an unknown model.
    caps = await capabilities_of("local-9b", model_info("local-9b"))
    assert caps.max_tokens is None
    assert caps.default_effort == UNKNOWN.default_effort
    assert caps.interleaved_beta is False


async def test_a_models_api_that_says_nothing_about_thinking_falls_back_to_the_table(
    capabilities_of: Any,
):
    body = model_info("claude-opus-5-5-2099")
    del body["capabilities"]["thinking"]
    caps = await capabilities_of("claude-opus-5-5-2099", body)
    assert caps == builtin_capabilities("claude-opus-5-5")

    body = model_info("claude-haiku-4-5-2099")
    del body["capabilities"]
    caps = await capabilities_of("claude-haiku-4-5-2099", body)
    assert caps == builtin_capabilities("claude-haiku-4-5")
