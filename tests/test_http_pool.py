"""The web client's connection pool checks its idle connections with one poll
(config/http_pool.py), and still notices a connection the server closed; the model client's
(aiohttp) keeps its connection and drops one the server closed."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from config.http_pool import QuickCheckBackend, QuickCheckStream, quick_idle_checks, readable
from research.web import SharedWebClient
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.exa_server import FakeExa
from thinking.llm import _new_client


def test_a_socket_is_readable_once_its_peer_writes_or_closes():
    mine, peer = socket.socketpair()
    try:
        assert not readable(mine)
        peer.sendall(b"x")
        assert readable(mine)
        mine.recv(1)
        assert not readable(mine)
        peer.close()
        assert readable(mine)  # the end of the stream is there to read
    finally:
        mine.close()
    assert readable(mine)  # closed: no descriptor left
    assert readable(None)


def _streams(client: Any) -> list[Any]:
    """The network streams of the pool's connections (the libraries' own objects)."""
    pool = client._transport._pool
    return [c._connection._network_stream for c in pool.connections if c._connection]


async def test_the_model_client_keeps_its_connection_and_not_one_the_server_closed():
    # The model client runs on aiohttp (thinking/llm.py), whose pool needs no wrapping: it
    # reuses a kept-alive connection, and one the server closed is dropped, not written to.
    fake = FakeAnthropic().start()
    try:
        client = _new_client("test-key", fake.base_url).with_options(max_retries=0)
        request = {
            "model": "claude-test",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
        }
        await client.messages.create(**request)
        await client.messages.create(**request)
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
        reply = await client.messages.create(**request)  # no retries: a reused one would fail
        assert reply.content and fake.connections_opened == 2
        await client.close()
    finally:
        fake.stop()


@pytest.fixture
def closing_server() -> Iterator[str]:
    """An HTTP server that answers each connection's first request with keep-alive and
    then closes the connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                body = b'{"ok": true}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nConnection: keep-alive\r\n\r\n%s" % (len(body), body)
                )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    listener.close()


async def test_a_connection_the_server_closed_is_not_reused(closing_server: str):
    # If the idle check missed the close, the second request would go out on the closed
    # connection and fail (no retries here).
    async with quick_idle_checks(httpx.AsyncClient()) as client:
        first = await client.get(closing_server)
        assert first.json() == {"ok": True}
        for _ in range(50):  # the server's close reaches our socket
            if all(readable(s._socket) for s in _streams(client)):
                break
            await asyncio.sleep(0.01)
        second = await client.get(closing_server)
        assert second.json() == {"ok": True}


@pytest.mark.django_db(transaction=True)
async def test_the_web_clients_pool_is_wrapped_too(fake_exa: FakeExa):
    shared = SharedWebClient()
    try:
        web = shared.web_search()
        results = await web.search("pool check", num_results=2, scope="user:1")
        assert results
        http = web._exa.client
        assert isinstance(http._transport._pool._network_backend, QuickCheckBackend)
        assert all(isinstance(s, QuickCheckStream) for s in _streams(http))
    finally:
        await shared.aclose()


def test_wrapping_twice_wraps_once_and_a_mock_transport_is_left_alone():
    client = quick_idle_checks(quick_idle_checks(httpx.AsyncClient()))
    backend = client._transport._pool._network_backend
    assert isinstance(backend, QuickCheckBackend)
    assert not isinstance(backend._inner, QuickCheckBackend)
    mocked = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(204)))
    assert quick_idle_checks(mocked) is mocked
