"""CPU of the HTTP clients N session starts build (and close).

    .venv/bin/python bench/client_start_cost.py 50

Per session start: the model client, the web-search client and the httpx pool exa-py builds
at the session's first search. Works on trees before the shared clients too (issue 17's
before/after: then each start builds its own), so it imports what the tree has.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ["ANTHROPIC_API_KEY"] = "k"  # no request is made: construction only
os.environ["EXA_API_KEY"] = "k"
sys.path.insert(0, os.getcwd())

import django

django.setup()

from research import web  # noqa: E402
from thinking import llm  # noqa: E402

SHARED = hasattr(llm, "SharedModelClient")


async def once(count: int) -> tuple[float, float]:
    """CPU seconds to build `count` session starts' clients, and to close them."""
    started = time.process_time()
    shared: Any = (llm.SharedModelClient(), web.SharedWebClient()) if SHARED else None
    made = []
    for _ in range(count):
        if shared is not None:
            model, search = shared[0].llm(), shared[1].web_search()
        else:
            model, search = llm.LLM.from_settings(), web.WebSearch.from_settings()
        assert search._exa.client is not None  # what its first search builds (exa-py: lazily)
        made.append((model, search))
    built = time.process_time()
    for model, search in made:
        await model.close()
        await search.aclose()
    if shared is not None:
        await shared[0].aclose()
        await shared[1].aclose()
    return built - started, time.process_time() - built


async def main(count: int) -> None:
    await once(count)  # imports and first TLS context out of the way
    runs = [await once(count) for _ in range(3)]
    build = sorted(r[0] for r in runs)[1] / count * 1000
    close = sorted(r[1] for r in runs)[1] / count * 1000
    kind = "shared" if SHARED else "per-session"
    print(
        f"{kind}: {count} session starts, median of 3: {build:.2f} ms CPU per start to build "
        f"the clients, {close:.2f} ms to close them"
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50))
