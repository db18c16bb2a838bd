"""HTTP connection pools whose idle connections cost one `poll` each per request.

httpcore (under exa-py's httpx) and httpcore2 (under httpx2) look over every idle connection
of a pool each time a request joins or leaves it, and ask each one whether the server closed
it: its stream's `get_extra_info("is_readable")`. With anyio
underneath, that answer builds anyio's dict of socket attributes (a `getpeername` system
call among them) before it polls the socket, ~9 µs a connection. A worker shares one pool
per provider among all its sessions, so at 100 sessions at once each model call paid for up
to 100 idle connections, twice, and the sum grew with the square of the sessions (a
request's client CPU with 100 idle connections: a third less with this module; bench/README,
"Idle connections checked with one poll"). The model client no longer needs this: it runs
on aiohttp (thinking/llm.py), whose connector checks only the connection it takes.

`quick_idle_checks` wraps the pools' network backend so each stream keeps its socket and
answers "is_readable" with one `poll`, as httpcore's own helper does after the lookup;
everything else is passed through. The libraries let a pool take a network backend but
their clients do not pass one on, so the pools' `_network_backend` is replaced in place;
`tests/test_http_pool.py` fails if a new version moves it.
"""

from __future__ import annotations

import logging
import select
import socket
from typing import Any

logger = logging.getLogger(__name__)


def readable(sock: socket.socket | None) -> bool:
    """Whether `sock` has something to read (an idle HTTP connection: the server closed
    it). A socket that is gone counts as readable, as in httpcore."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class QuickCheckStream:
    """A network stream (httpcore's and httpcore2's interface alike) around another, with
    its socket looked up once."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._socket = inner.get_extra_info("socket")

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> QuickCheckStream:
        return QuickCheckStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and self._socket is not None:
            return readable(self._socket)
        return self._inner.get_extra_info(info)


class QuickCheckBackend:
    """A network backend whose streams are `QuickCheckStream`s."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> QuickCheckStream:
        return QuickCheckStream(await self._inner.connect_tcp(*args, **kwargs))

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> QuickCheckStream:
        return QuickCheckStream(await self._inner.connect_unix_socket(*args, **kwargs))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def quick_idle_checks[C](client: C) -> C:
    """`client` (an httpx or httpx2 `AsyncClient`) with every pool of its transports on a
    `QuickCheckBackend`. A transport without a pool (a test's mock transport) is left as it
    is; a pool without `_network_backend` is logged, and left as it is."""
    if not hasattr(select, "poll"):  # httpcore's own check falls back to select() there
        return client
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if pool is None:
            continue
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            logger.warning("HTTP pool %r has no network backend to wrap", pool)
        elif not isinstance(backend, QuickCheckBackend):
            pool._network_backend = QuickCheckBackend(backend)
    return client
