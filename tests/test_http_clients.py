"""The model client and the web client both run on aiohttp (thinking/llm.py,
research/web.py): each keeps a connection alive between requests, and drops one the server
closed instead of writing to it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from httpx_aiohttp import AiohttpTransport

from research.web import SharedWebClient, WebSearch
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.exa_server import FakeExa
from tests.fakes.http_base import FakeServer
from thinking.llm import _new_client


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
    exa = shared.web_search()._exa
    queries = iter(("first", "second", "third"))

    async def call() -> Any:
        return (await exa.search(next(queries), num_results=2)).results

    try:
        await _keeps_one_and_not_a_closed_one(fake_exa, call)
    finally:
        await shared.aclose()


@pytest.mark.django_db(transaction=True)
async def test_a_sessions_own_web_client_and_the_shared_one_run_on_aiohttp(fake_exa: FakeExa):
    shared = SharedWebClient()
    own = WebSearch.from_settings()
    try:
        for web in (own, shared.web_search()):
            assert await web.search("which stack", num_results=2, scope="user:1")
            assert isinstance(web._exa.client._transport, AiohttpTransport)
    finally:
        await own.aclose()
        await shared.aclose()
