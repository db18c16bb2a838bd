"""CPU of reading one streamed reply four ways, side by side in one run: the SDK's
`messages.stream()` helper; the SDK's stream of typed events, each block's deltas joined at
the end (what the app did until 2026-11-26); the events' JSON through the SDK's SSE decoder,
`thinking.streaming.api_events` and `collect` (what the app did until 2026-11-27); the same
on the SDK's aiohttp client (`thinking.llm._new_client`: what the app does). The first three
run on the SDK's default HTTP client (httpx2, h11).

    .venv/bin/python bench/stream_cost.py 100

The fake Claude server runs in a child process (as in bench/fakehost.py), so only the client's
work is counted in this one. The reply has adaptive-sized thinking and text (~270 deltas, a
long thought cycle's reply; the benchmarks' scripted replies are shorter), and both readers
hand every delta to a callback, as the live page's reasoning does.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.getcwd())
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

REQUEST: dict[str, Any] = {
    "model": "claude-test",
    "max_tokens": 4096,
    "messages": [{"role": "user", "content": "Think about it."}],
    "thinking": {"type": "enabled", "budget_tokens": 2048},
}


def _serve(address: Any) -> None:
    from tests.fakes import anthropic_server
    from tests.fakes.anthropic_server import FakeAnthropic, Reply

    anthropic_server._Handler.disable_nagle_algorithm = True  # see bench/fakehost.py
    fake = FakeAnthropic().start()
    reply = Reply(thinking="Let me consider the evidence. " * 30, text="THOUGHT: " + "word " * 600)
    fake.responder = lambda body: reply
    address.put(fake.base_url)
    time.sleep(3600)


async def main(calls: int) -> None:
    import anthropic

    from thinking import streaming

    address: Any = multiprocessing.Queue()
    server = multiprocessing.Process(target=_serve, args=(address,), daemon=True)
    server.start()
    url = address.get()
    client = anthropic.AsyncAnthropic(api_key="test", base_url=url, max_retries=0)
    aio_client = anthropic.AsyncAnthropic(
        api_key="test", base_url=url, max_retries=0, http_client=anthropic.DefaultAioHttpClient()
    )

    async def shown(delta: str) -> None:
        return None

    async def helper() -> None:
        async with client.messages.stream(**REQUEST) as stream:
            async for event in stream:
                if event.type == "text":
                    await shown(event.text)
                elif event.type == "thinking":
                    await shown(event.thinking)
            await stream.get_final_message()

    async def typed() -> None:
        stream = await client.messages.create(stream=True, **REQUEST)
        async with stream:
            parts: dict[int, list[str]] = {}
            async for event in stream:
                if event.type == "content_block_start":
                    event.content_block.model_dump(mode="json", exclude_none=True)
                    parts[event.index] = []
                elif event.type == "content_block_delta":
                    if event.delta.type == "text_delta":
                        parts[event.index].append(event.delta.text)
                        await shown(event.delta.text)
                    elif event.delta.type == "thinking_delta":
                        parts[event.index].append(event.delta.thinking)
                        await shown(event.delta.thinking)
            ["".join(p) for p in parts.values()]

    async def json_events(on: anthropic.AsyncAnthropic = client) -> None:
        stream = await on.messages.create(stream=True, **REQUEST)
        async with stream:
            events = streaming.api_events(stream)
            await streaming.collect(events, on_text=shown, on_thinking=shown)

    async def json_events_aiohttp() -> None:
        await json_events(aio_client)

    readers = (
        ("helper", helper),
        ("typed events", typed),
        ("JSON events", json_events),
        ("JSON events on aiohttp", json_events_aiohttp),
    )
    cpu: dict[str, list[float]] = {name: [] for name, _ in readers}
    for _ in range(3):  # alternated, so load on the machine falls on all alike
        for name, read in readers:
            await read()  # warm
            started = time.process_time()
            for _ in range(calls):
                await read()
            cpu[name].append((time.process_time() - started) * 1000 / calls)
    server.kill()
    await client.close()
    await aio_client.close()
    medians = {name: statistics.median(times) for name, times in cpu.items()}
    helper_ms = medians["helper"]
    shown_ms = ", ".join(
        f"{name} {ms:.1f} ms ({ms / helper_ms:.2f} x)" for name, ms in medians.items()
    )
    print(f"CPU per reply: {shown_ms}; median of 3 rounds of {calls} calls")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
