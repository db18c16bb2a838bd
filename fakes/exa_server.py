"""A fake Exa API server for tests and offline runs.

A real HTTP server on 127.0.0.1 (stdlib ``ThreadingHTTPServer`` in a daemon thread) that
speaks the JSON the ``exa_py`` SDK sends and parses: camelCase request bodies on
``POST /search`` and ``POST /contents``, camelCase results, and Exa-shaped error bodies
(``{"requestId", "error", "tag"}``). It checks the ``x-api-key`` header, records every request,
counts how many are in flight at once, and can be told to be slow or to fail::

    with FakeExa() as fake:
        exa = exa_py.AsyncExa(api_key=fake.api_key, api_base=fake.base_url)
        fake.fail_next(429)            # the next request gets a rate-limit error
        fake.delay = 0.3               # every request takes 300 ms
        ...
        assert fake.request_count == 2 and fake.max_in_flight == 1

Search results come first from bodies queued with :meth:`FakeExa.enqueue`, then from
:func:`default_results`, which derives 3-5 results from the query deterministically.

Run it standalone to try the app offline::

    python -m fakes.exa_server --port 8766
    EXA_BASE_URL=http://127.0.0.1:8766 EXA_API_KEY=exa-test-key ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fakes.http_base import DISCONNECT_ERRORS as _DISCONNECT_ERRORS
from fakes.http_base import FakeHandler, FakeServer

__all__ = ["DEFAULT_API_KEY", "Failure", "FakeExa", "Recorded", "default_results", "main"]

DEFAULT_API_KEY = "exa-test-key"

# Exa's error tags per status (exa.ai/docs/reference/error-codes).
_ERROR_TAGS = {
    400: ("INVALID_REQUEST_BODY", "Invalid request body"),
    401: ("INVALID_API_KEY", "Invalid API key"),
    402: ("NO_MORE_CREDITS", "You have run out of credits"),
    403: ("ACCESS_DENIED", "Your plan does not include this endpoint"),
    404: ("NOT_FOUND", "Not found"),
    422: ("UNPROCESSABLE_URL", "The URL could not be processed"),
    429: ("RATE_LIMIT_EXCEEDED", "Rate limit exceeded"),
    500: ("INTERNAL_ERROR", "Internal server error"),
    502: ("BAD_GATEWAY", "Bad gateway"),
    503: ("SERVICE_UNAVAILABLE", "Service temporarily unavailable"),
    504: ("GATEWAY_TIMEOUT", "Gateway timeout"),
}


@dataclass
class Failure:
    """An HTTP error answered instead of results."""

    status: int
    error: str | None = None
    tag: str | None = None


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0  # filled in once answered


@dataclass
class _Queued:
    body: dict[str, Any]
    delay: float | None = None


@dataclass
class _State:
    in_flight: int = 0
    max_in_flight: int = 0
    serial: int = 0
    failures: deque[Failure] = field(default_factory=deque)
    bodies: deque[_Queued] = field(default_factory=deque)


def _slug(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())[:6]
    return "-".join(words) or "result"


def default_results(query: str, num_results: int | None, contents: Any) -> list[dict[str, Any]]:
    """3-5 results derived from the query (the same query always gives the same results),
    with the content fields the request asked for."""
    digest = hashlib.sha256(query.encode()).digest()
    count = 3 + digest[0] % 3
    if num_results:
        count = min(count, num_results)
    slug = _slug(query)
    results = []
    for n in range(1, count + 1):
        url = f"https://example.org/{slug}-{n}"
        page = {
            "url": url,
            "title": f"{query.strip()[:80]} — source {n}",
            "text": (
                f"Full text of source {n} about {query}. "
                + f"Source {n} reports measurements on {query}. " * 40
            ),
            "highlights": [f"Source {n} explains {query} with evidence (passage {n})."],
            "summary": f"Source {n} summarises what is known about {query}.",
        }
        results.append(
            {
                "id": url,
                "url": url,
                "title": page["title"],
                "score": round(0.95 - 0.1 * n, 3),
                "publishedDate": f"2026-0{1 + (digest[n] % 9)}-1{n % 10}T00:00:00.000Z",
                "author": f"Author {n}",
                **_contents_fields(page, contents),
            }
        )
    return results


def _contents_fields(page: dict[str, Any], contents: Any) -> dict[str, Any]:
    """Only the content the request asked for, as Exa answers."""
    if not isinstance(contents, dict):
        return {}
    fields: dict[str, Any] = {}
    if contents.get("text"):
        fields["text"] = page["text"]
        options = contents["text"]
        # {"text": {"maxCharacters": n}} bounds the text, as Exa does.
        limit = options.get("maxCharacters") if isinstance(options, dict) else None
        if isinstance(limit, int) and limit > 0:
            fields["text"] = page["text"][:limit]
    if contents.get("highlights"):
        fields["highlights"] = page["highlights"]
        fields["highlightScores"] = [0.8 for _ in page["highlights"]]
    if contents.get("summary"):
        fields["summary"] = page["summary"]
    return fields


class _Handler(FakeHandler):
    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw or b"{}")
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in self.headers.items()}
        record = Recorded(path=self.path, headers=headers, body=body)
        fake._enter(record)
        try:
            status, payload = fake._answer(record)
            record.status = status
            self._send_json(status, payload)
        except _DISCONNECT_ERRORS:
            pass
        finally:
            fake._leave()

    def do_GET(self) -> None:
        self._send_json(404, fake_error(404, request_id="req_get"))

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-request-id", str(payload.get("requestId", "")))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


def fake_error(status: int, *, request_id: str, error: str | None = None, tag: str | None = None):
    default_tag, default_message = _ERROR_TAGS.get(status, ("ERROR", f"HTTP {status}"))
    return {"requestId": request_id, "error": error or default_message, "tag": tag or default_tag}


class FakeExa(FakeServer):
    """A local Exa API. Use ``start()``/``stop()`` or ``with FakeExa():``."""

    handler_class = _Handler
    thread_name = "fake-exa"

    def __init__(
        self,
        *,
        api_key: str = DEFAULT_API_KEY,
        delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        verbose: bool = False,
    ) -> None:
        super().__init__(delay=delay, host=host, port=port, verbose=verbose)
        self.api_key = api_key
        self.requests: list[Recorded] = []
        self._state = _State()
        # Called with each search's body before it is answered, on the server's thread: a
        # test's hook into "while the search was in flight" (another worker takes over, ...).
        self.on_search: Callable[[dict[str, Any]], None] | None = None

    # -- scripting -----------------------------------------------------------------

    def fail_next(
        self, status: int, count: int = 1, *, error: str | None = None, tag: str | None = None
    ) -> None:
        """Answer the next `count` requests with HTTP `status` and Exa's error body."""
        with self._lock:
            self._state.failures.extend(Failure(status, error, tag) for _ in range(count))

    def enqueue(self, body: dict[str, Any], *, delay: float | None = None) -> None:
        """Answer a later request with this JSON body (first in, first out), e.g.
        ``{"results": [...]}``; failures queued with :meth:`fail_next` come first."""
        with self._lock:
            self._state.bodies.append(_Queued(body, delay))

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._state = _State()

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    @property
    def searches(self) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.path == "/search"]

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._state.in_flight

    @property
    def max_in_flight(self) -> int:
        """The most requests this server was handling at the same moment."""
        with self._lock:
            return self._state.max_in_flight

    # -- used by the handler -------------------------------------------------------

    def _enter(self, record: Recorded) -> None:
        with self._lock:
            self.requests.append(record)
            self._state.in_flight += 1
            self._state.max_in_flight = max(self._state.max_in_flight, self._state.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._state.in_flight -= 1

    def _answer(self, record: Recorded) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self._state.serial += 1
            request_id = f"req_fake_exa_{self._state.serial:06d}"
            failure = self._state.failures.popleft() if self._state.failures else None
            queued = None
            if failure is None and record.path == "/search" and self._state.bodies:
                queued = self._state.bodies.popleft()
        delay = queued.delay if queued is not None and queued.delay is not None else self.delay
        if delay > 0:
            self._stopping.wait(delay)

        if record.headers.get("x-api-key") != self.api_key:
            return 401, fake_error(401, request_id=request_id)
        if failure is not None:
            error = fake_error(
                failure.status, request_id=request_id, error=failure.error, tag=failure.tag
            )
            return failure.status, error
        if not isinstance(record.body, dict):
            return 400, fake_error(400, request_id=request_id)
        if record.path == "/search":
            if self.on_search is not None:
                self.on_search(record.body)
            return self._search(record.body, request_id, queued)
        if record.path == "/contents":
            return self._contents(record.body, request_id)
        return 404, fake_error(404, request_id=request_id, error=f"No route {record.path}")

    def _search(
        self, body: dict[str, Any], request_id: str, queued: _Queued | None
    ) -> tuple[int, dict[str, Any]]:
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            return 400, fake_error(400, request_id=request_id, error="query is required")
        if queued is not None:
            return 200, {"requestId": request_id, **queued.body}
        results = default_results(query, body.get("numResults"), body.get("contents"))
        return 200, {
            "requestId": request_id,
            "resolvedSearchType": "neural",
            "searchTime": 12.5,
            "results": results,
            "costDollars": {"total": 0.005},
        }

    def _contents(self, body: dict[str, Any], request_id: str) -> tuple[int, dict[str, Any]]:
        urls = body.get("urls") or body.get("ids") or []
        if not isinstance(urls, list) or not urls:
            return 400, fake_error(400, request_id=request_id, error="urls is required")
        # On /contents the content options are top-level fields of the body.
        results = []
        for url in urls:
            topic = str(url).rstrip("/").rsplit("/", 1)[-1].replace("-", " ")
            page = {
                "text": f"Full text of {url} about {topic}.",
                "highlights": [f"The key passage of {url} about {topic}."],
                "summary": f"A summary of {url}.",
            }
            results.append(
                {
                    "id": url,
                    "url": url,
                    "title": f"Page about {topic}",
                    **_contents_fields(page, body),
                }
            )
        statuses = [{"id": url, "status": "success"} for url in urls]
        return 200, {"requestId": request_id, "results": results, "statuses": statuses}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run a fake Exa API server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each response")
    parser.add_argument("--api-key", default=DEFAULT_API_KEY, help="the key clients must send")
    parser.add_argument("--quiet", action="store_true", help="do not log requests")
    args = parser.parse_args(argv)
    fake = FakeExa(
        api_key=args.api_key,
        delay=args.delay,
        host=args.host,
        port=args.port,
        verbose=not args.quiet,
    )
    fake.start()
    print(f"Fake Exa API listening on {fake.base_url}", flush=True)
    print(f"Try: EXA_BASE_URL={fake.base_url} EXA_API_KEY={fake.api_key}", flush=True)
    try:
        fake.serve_forever()
    except KeyboardInterrupt:
        print("stopped", flush=True)


if __name__ == "__main__":
    main()
