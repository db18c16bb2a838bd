"""The small HTTP server both fakes (Claude and Exa) are built on.

A stdlib ``ThreadingHTTPServer`` on 127.0.0.1 in a daemon thread, HTTP/1.1 keep-alive, no
Nagle delays, quiet about clients that went away, and a ``stop()`` that also cuts open
keep-alive connections so a stopped fake is really gone. Subclasses of :class:`FakeServer`
name their handler class and thread; handlers subclass :class:`FakeHandler`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

DISCONNECT_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class FakeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # A real API's backlog, not socketserver's 5: a burst of connections from many sessions
    # at once must wait to be accepted, not be reset while the accept loop catches up.
    request_queue_size = 1024
    fake: Any

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client that gave up: stay quiet
            return
        super().handle_error(request, client_address)


class FakeHandler(BaseHTTPRequestHandler):
    # Small (SSE) chunks must not wait ~40 ms on Nagle's algorithm and delayed ACKs.
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server: FakeHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.fake.verbose:
            super().log_message(format, *args)

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            with contextlib.suppress(*DISCONNECT_ERRORS):
                super().finish()
        finally:
            self.server.fake._track(self.connection, add=False)

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def send_json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class FakeServer:
    """What the fakes share: ``start()``/``stop()``, ``with fake:``, ``serve_forever()``."""

    handler_class: ClassVar[type[FakeHandler]] = FakeHandler
    thread_name: ClassVar[str] = "fake"

    def __init__(
        self, *, delay: float = 0.0, host: str = "127.0.0.1", port: int = 0, verbose: bool = False
    ) -> None:
        self.delay = delay
        self.host = host
        self.port = port
        self.verbose = verbose
        self.base_url = ""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        # TCP connections accepted since start (clients that pool reuse theirs).
        self.connections_opened = 0
        self._server: FakeHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = FakeHTTPServer((self.host, self.port), self.handler_class)
        server.fake = self
        self._server = server
        self.port = server.server_address[1]
        self.base_url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self.thread_name}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # wakes handlers that are waiting out a delay
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
            self._connections.clear()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Start and block until KeyboardInterrupt (used by the CLIs)."""
        self.start()
        try:
            while True:
                time.sleep(3600)
        finally:
            self.stop()

    @property
    def open_connections(self) -> int:
        """Client connections still open (kept alive between requests, or in one)."""
        with self._lock:
            return len(self._connections)

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
                self.connections_opened += 1
            else:
                self._connections.discard(conn)


class ScriptedFake(FakeServer):
    """A fake whose next answers a test may script: failures (`fail_next`) first, then bodies
    (`enqueue`); `requests` records every request, in order."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requests: list[Any] = []
        self._failures: deque[int] = deque()
        self._bodies: deque[dict[str, Any]] = deque()

    def fail_next(self, status: int, count: int = 1) -> None:
        """Answer the next `count` requests with HTTP `status` and the service's error body."""
        with self._lock:
            self._failures.extend([status] * count)

    def enqueue(self, body: dict[str, Any]) -> None:
        """Answer a later search with these fields (e.g. ``{"results": [...]}``)."""
        with self._lock:
            self._bodies.append(body)

    def _arrived(self, record: Any) -> tuple[int | None, dict[str, Any] | None]:
        """Record a request; the failure or body scripted for it, if any."""
        with self._lock:
            self.requests.append(record)
            failure = self._failures.popleft() if self._failures else None
            queued = self._bodies.popleft() if self._bodies and failure is None else None
        if self.delay > 0:
            self._stopping.wait(self.delay)
        return failure, queued


def command_line(description: str, *, port: int) -> argparse.ArgumentParser:
    """The options every fake's command line takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each response")
    parser.add_argument("--quiet", action="store_true", help="do not log requests")
    return parser


def serve(fake: FakeServer, name: str, settings: str) -> None:
    """Run `fake` until Ctrl-C, saying where and with which settings to point the app at it
    (`settings` may use {url})."""
    fake.start()
    print(f"{name} listening on {fake.base_url}", flush=True)
    print(f"Try: {settings.format(url=fake.base_url)}", flush=True)
    try:
        fake.serve_forever()
    except KeyboardInterrupt:
        print("stopped", flush=True)
