"""The model client (the SDK's aiohttp client, thinking/provider/llm.py) and the web client (httpx,
research/web.py) each keep a connection alive between requests, and drop one the server
closed instead of writing to it; a worker's shared web client does not queue a burst of
sessions' searches."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fakes.anthropic_server import FakeAnthropic
from fakes.exa_server import FakeExa
from fakes.http_base import FakeServer
from research.web import SharedWebClient
from thinking.provider.llm import _new_client


async def _keeps_one_and_not_a_closed_one(fake: FakeServer, call: Callable[[], Awaitable[Any]]):
    """Two calls on one connection; the server ends it; a third call (no retries: a reused
    connection would fail) opens a new one."""
    await call()
    await call()
    assert fake.connections_opened == 1
    with fake._lock:
        kept = list(fake._connections)
    for conn in kept:  # the server ends the idle connection
        conn.shutdown(socket.SHUT_RDWR)
    for _ in range(50):
        if not fake.open_connections:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # the close reaches the client's socket
    assert await call()
    assert fake.connections_opened == 2


async def test_the_model_client_keeps_its_connection_and_not_one_the_server_closed():
    fake = FakeAnthropic().start()
    client = _new_client("test-key", fake.base_url).with_options(max_retries=0)
    request = {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
    }

    async def call() -> Any:
        return (await client.messages.create(**request)).content

    try:
        await _keeps_one_and_not_a_closed_one(fake, call)
    finally:
        await client.close()
        fake.stop()


@pytest.mark.django_db(transaction=True)
async def test_the_web_client_keeps_its_connection_and_not_one_the_server_closed(
    fake_exa: FakeExa,
):
    # exa-py's own call (it never retries), on the client a worker's sessions share.
    shared = SharedWebClient()
    exa = shared.web_search().provider("exa").exa
    queries = iter(("first", "second", "third"))

    async def call() -> Any:
        return (await exa.search(next(queries), num_results=2)).results

    try:
        await _keeps_one_and_not_a_closed_one(fake_exa, call)
    finally:
        await shared.aclose()


@pytest.mark.django_db(transaction=True)
async def test_a_workers_shared_web_client_carries_more_searches_at_once_than_httpxs_default(
    fake_exa: FakeExa,
):
    """A burst of sessions each searching at once all reach the server together, not 100 at
    a time (httpx's default pool) while the rest wait their turn."""
    fake_exa.delay = 3  # each search held long enough for (nearly) all of them to be in flight
    shared = SharedWebClient()
    exa = shared.web_search().provider("exa").exa
    count = 120

    async def search(index: int) -> Any:
        await asyncio.sleep(index * 0.01)
        return (await exa.search(f"query {index}", num_results=1)).results

    try:
        found = await asyncio.gather(*(search(i) for i in range(count)))
    finally:
        await shared.aclose()
    assert all(found)
    # Past httpx's default pool of 100 connections; a loaded machine may start the last few
    # after the first ones finished, so not necessarily all 120 at once.
    assert fake_exa.max_in_flight > 100
