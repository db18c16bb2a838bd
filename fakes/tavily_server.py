"""A fake Tavily API for tests and offline runs.

A real HTTP server on 127.0.0.1 (fakes/http_base.py) that speaks what the official
``tavily-python`` SDK sends and parses: ``POST /search`` with a JSON body (``query``,
``max_results``, ``include_domains``, ``exclude_domains``, ``time_range``,
``include_raw_content``, …) and ``Authorization: Bearer <key>``; results with ``title``,
``url``, ``content``, ``score`` and, when asked, ``raw_content``; errors as Tavily sends them,
``{"detail": {"error": "..."}}``, which the SDK turns into its own exceptions. Like Tavily it
keeps results to the included domains and away from the excluded ones::

    with FakeTavily() as fake:
        client = tavily.AsyncTavilyClient(api_key=fake.api_key, api_base_url=fake.base_url)
        fake.fail_next(429)            # the next request hits the rate limit
        ...
        assert fake.searches[0].body["max_results"] == 5

Run it standalone to try the app offline::

    python -m fakes.tavily_server --port 8768
    TAVILY_API_KEY=tvly-test-key TAVILY_BASE_URL=http://127.0.0.1:8768 \
        DEEPTHINK_WEB_SEARCH=tavily ...
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from fakes.http_base import DISCONNECT_ERRORS, FakeHandler, ScriptedFake, command_line, serve

__all__ = ["DEFAULT_API_KEY", "FakeTavily", "TavilyRequest", "default_results", "main"]

DEFAULT_API_KEY = "tvly-test-key"
HOSTS = ("www.nature.com", "www.bbc.co.uk", "arxiv.org", "www.lemonde.fr", "example.edu")
_ERRORS = {
    400: "Invalid request: query is required.",
    401: "Unauthorized: missing or invalid API key.",
    403: "Forbidden.",
    429: "Your request has been blocked due to excessive requests.",
    432: "This request exceeds your plan's set usage limit.",
    500: "Internal server error.",
    502: "Bad gateway.",
    503: "Service unavailable.",
}


@dataclass
class TavilyRequest:
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0


def _slug(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())[:6]) or "result"


def default_results(query: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Up to ``max_results`` (5) results derived from the query, on the included domains
    when there are some, never on the excluded ones."""
    digest = hashlib.sha256(query.encode()).digest()
    wanted = body.get("max_results") or 5
    excluded = set(body.get("exclude_domains") or ())
    hosts = list(body.get("include_domains") or HOSTS)
    hosts = [h for h in hosts if h not in excluded and h.removeprefix("www.") not in excluded]
    slug = _slug(query)
    results = []
    for n in range(1, min(int(wanted), 4 + digest[0] % 3) + 1):
        if not hosts:
            break
        host = hosts[(n - 1) % len(hosts)]
        url = f"https://{host}/{slug}-{n}"
        item: dict[str, Any] = {
            "title": f"{query.strip()[:80]} | {host}",
            "url": url,
            "content": f"{host} on {query}: the main findings, summarised for the question "
            f"(result {n}).",
            "score": round(0.9 - 0.07 * n, 4),
            "raw_content": None,
        }
        if body.get("include_raw_content"):
            item["raw_content"] = (
                f"Page {n} on {host} about {query}. " + f"It reports evidence on {query}. " * 30
            )
        if body.get("topic") == "news" or body.get("time_range"):
            item["published_date"] = f"Mon, 0{n} Dec 2026 08:00:00 GMT"
        results.append(item)
    return results


class _Handler(FakeHandler):
    def do_POST(self) -> None:
        fake: FakeTavily = self.server.fake
        raw = self.read_body()
        try:
            body: Any = json.loads(raw or b"{}")
        except ValueError:
            body = None
        headers = {name.lower(): value for name, value in self.headers.items()}
        record = TavilyRequest(self.path, headers, body)
        failure, queued = fake._arrived(record)
        status, payload = fake._answer(record, failure, queued)
        record.status = status
        with contextlib.suppress(DISCONNECT_ERRORS):
            self.send_json(status, payload)

    def do_GET(self) -> None:
        self.send_json(404, {"detail": {"error": "Not found."}})


class FakeTavily(ScriptedFake):
    """A local Tavily API. Use ``start()``/``stop()`` or ``with FakeTavily():``."""

    handler_class = _Handler
    thread_name = "fake-tavily"

    def __init__(self, *, api_key: str = DEFAULT_API_KEY, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.api_key = api_key
        self._serial = 0

    @property
    def searches(self) -> list[TavilyRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == "/search"]

    def _answer(
        self, record: TavilyRequest, failure: int | None, queued: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self._serial += 1
            request_id = f"fake-tavily-{self._serial:06d}"
        if record.headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, {"detail": {"error": _ERRORS[401]}}
        if failure is not None:
            return failure, {"detail": {"error": _ERRORS.get(failure, f"HTTP {failure}")}}
        if record.path != "/search":
            return 404, {"detail": {"error": "Not found."}}
        body = record.body
        query = body.get("query") if isinstance(body, dict) else None
        if not isinstance(query, str) or not query.strip():
            return 400, {"detail": {"error": _ERRORS[400]}}
        return 200, {
            "query": query,
            "follow_up_questions": None,
            "answer": None,
            "images": [],
            "results": default_results(query, body),
            **(queued or {}),
            "response_time": 0.42,
            "request_id": request_id,
        }


def main(argv: list[str] | None = None) -> None:
    parser = command_line("Run a fake Tavily API server.", port=8768)
    parser.add_argument("--api-key", default=DEFAULT_API_KEY, help="the key clients must send")
    args = parser.parse_args(argv)
    fake = FakeTavily(
        api_key=args.api_key,
        host=args.host,
        port=args.port,
        delay=args.delay,
        verbose=not args.quiet,
    )
    serve(
        fake,
        "Fake Tavily API",
        f"TAVILY_API_KEY={fake.api_key} TAVILY_BASE_URL={{url}} DEEPTHINK_WEB_SEARCH=tavily",
    )


if __name__ == "__main__":
    main()
