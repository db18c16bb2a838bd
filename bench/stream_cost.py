"""CPU of reading one streamed reply: the SDK's `messages.stream()` helper against the raw
events read by `thinking.streaming.collect` (what the app does), side by side in one run.

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
    client = anthropic.AsyncAnthropic(api_key="test", base_url=address.get(), max_retries=0)

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

    async def raw() -> None:
        stream = await client.messages.create(stream=True, **REQUEST)
        async with stream:
            await streaming.collect(stream, on_text=shown, on_thinking=shown)

    cpu: dict[str, list[float]] = {"helper": [], "raw events": []}
    for _ in range(3):  # alternated, so load on the machine falls on both alike
        for name, read in (("helper", helper), ("raw events", raw)):
            await read()  # warm
            started = time.process_time()
            for _ in range(calls):
                await read()
            cpu[name].append((time.process_time() - started) * 1000 / calls)
    server.kill()
    await client.close()
    helper_ms, raw_ms = statistics.median(cpu["helper"]), statistics.median(cpu["raw events"])
    print(f"CPU per reply: helper {helper_ms:.1f} ms, raw events {raw_ms:.1f} ms", end=" ")
    print(f"({raw_ms / helper_ms:.2f} x), median of 3 rounds of {calls} calls")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
