"""The model and web clients' connection pools check their idle connections with one poll
(config/http_pool.py), and still notice a connection the server closed."""

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


async def test_the_model_clients_pool_asks_its_idle_connections_with_one_poll(
    monkeypatch: pytest.MonkeyPatch,
):
    fake = FakeAnthropic().start()
    try:
        client = _new_client("test-key", fake.base_url).with_options(max_retries=0)
        http = client._client
        assert isinstance(http._transport._pool._network_backend, QuickCheckBackend)
        request = {
            "model": "claude-test",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
        }
        await client.messages.create(**request)
        (stream,) = _streams(http)
        assert isinstance(stream, QuickCheckStream)
        inner_asked: list[str] = []
        inner = stream._inner
        original = inner.get_extra_info

        def spy(info: str) -> Any:
            inner_asked.append(info)
            return original(info)

        monkeypatch.setattr(inner, "get_extra_info", spy)
        reply = await client.messages.create(**request)  # the idle connection is checked
        assert reply.content
        assert "is_readable" not in inner_asked  # the wrapper polled the socket itself
        assert _streams(http)[0] is stream  # and it was reused
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
