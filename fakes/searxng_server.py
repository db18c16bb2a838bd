"""A fake SearxNG instance for tests and offline runs.

A real HTTP server on 127.0.0.1 (fakes/http_base.py) that answers SearxNG's search
API as an instance with ``json`` in its ``search.formats`` does: ``GET /search?q=…&format=json``
(also ``GET /?q=…``) with SearxNG's result shape (``query``, ``number_of_results``,
``results`` with ``url``, ``title``, ``content``, ``engine``, ``engines``, ``score``,
``publishedDate``, ``parsed_url``, ``positions``, ``category``; ``answers``, ``corrections``,
``infoboxes``, ``suggestions``, ``unresponsive_engines``). Without ``format=json`` it answers
HTML; with ``json_enabled=False`` it refuses JSON with 403, as an instance whose settings do
not list the format. No key: SearxNG takes none. Like SearxNG it has no domain filter (the
client filters) and a ``time_range`` of day, week, month or year::

    with FakeSearxng() as fake:
        fake.fail_next(502)            # the next search gets a bad gateway
        ...
        assert fake.searches[0].params["q"] == ["tides"]

Run it standalone to try the app offline::

    python -m fakes.searxng_server --port 8767
    SEARXNG_URL=http://127.0.0.1:8767 DEEPTHINK_WEB_SEARCH=searxng ...
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fakes.http_base import DISCONNECT_ERRORS, FakeHandler, ScriptedFake, command_line, serve

__all__ = ["FakeSearxng", "SearxRequest", "default_results", "main"]

# The hosts the fake's results are spread over, so a domain filter has something to keep
# and something to drop.
HOSTS = ("en.wikipedia.org", "www.example.org", "news.example.com", "blog.example.net")
ENGINES = ("duckduckgo", "wikipedia", "brave", "startpage")


@dataclass
class SearxRequest:
    path: str
    params: dict[str, list[str]]
    headers: dict[str, str]
    status: int = 0


def _slug(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())[:6]) or "result"


def default_results(query: str, time_range: str = "") -> list[dict[str, Any]]:
    """4-6 results derived from the query (the same query always gives the same results)."""
    digest = hashlib.sha256(query.encode()).digest()
    count = 4 + digest[0] % 3
    slug = _slug(query)
    results = []
    for n in range(1, count + 1):
        host = HOSTS[(n - 1) % len(HOSTS)]
        url = f"https://{host}/{slug}-{n}"
        engines = [ENGINES[(n + k) % len(ENGINES)] for k in range(1 + n % 2)]
        1 + digest[n] % 9
        results.append(
            {
                "url": url,
                "title": f"{query.strip()[:80]} — {host} ({n})",
                "content": f"Result {n} from {host}: what is known about {query}, "
                f"with figures and the studies behind them (page {n}).",
                "engine": engines[0],
                "engines": engines,
                "parsed_url": ["https", host, f"/{slug}-{n}", "", "", ""],
                "template": "default.html",
                "positions": [n],
                "score": round(2.0 / n, 3),
                "category": "general",
                # SearxNG gives a date only when an engine does; recent with a time range.
                "publishedDate": (
                    f"2026-1{n % 2}-0{1 + n}T00:00:00" if time_range or n % 2 else None
                ),
            }
        )
    return results


class _Handler(FakeHandler):
    def do_GET(self) -> None:
        fake: FakeSearxng = self.server.fake
        parts = urlsplit(self.path)
        params = parse_qs(parts.query)
        record = SearxRequest(
            parts.path, params, {name.lower(): value for name, value in self.headers.items()}
        )
        failure, queued = fake._arrived(record)
        with contextlib.suppress(DISCONNECT_ERRORS):
            self._answer(fake, record, failure, queued)

    def _answer(
        self,
        fake: FakeSearxng,
        record: SearxRequest,
        failure: int | None,
        queued: dict[str, Any] | None,
    ) -> None:
        query = (record.params.get("q") or [""])[0]
        if record.path not in ("/", "/search"):
            return self._text(record, 404, "Not Found")
        if failure is not None:
            return self._text(record, failure, f"Error {failure}")
        if (record.params.get("format") or ["html"])[0] != "json":
            return self._text(record, 200, f"<html><body>Results for {query}</body></html>")
        if not fake.json_enabled:
            return self._text(record, 403, "Forbidden")
        if not query.strip():
            return self._text(record, 400, "Bad Request")
        time_range = (record.params.get("time_range") or [""])[0]
        body = queued or {
            "results": default_results(query, time_range),
            "unresponsive_engines": [],
        }
        payload = {
            "query": query,
            "number_of_results": 0,
            "answers": [],
            "corrections": [],
            "infoboxes": [],
            "suggestions": [f"{query} explained"],
            **body,
        }
        record.status = 200
        self.send_json(200, payload)
        return None

    def _text(self, record: SearxRequest, status: int, text: str) -> None:
        record.status = status
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class FakeSearxng(ScriptedFake):
    """A local SearxNG instance. Use ``start()``/``stop()`` or ``with FakeSearxng():``."""

    handler_class = _Handler
    thread_name = "fake-searxng"

    def __init__(self, *, json_enabled: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.json_enabled = json_enabled

    @property
    def searches(self) -> list[SearxRequest]:
        with self._lock:
            return [r for r in self.requests if r.path in ("/", "/search")]


def main(argv: list[str] | None = None) -> None:
    args = command_line("Run a fake SearxNG instance.", port=8767).parse_args(argv)
    fake = FakeSearxng(host=args.host, port=args.port, delay=args.delay, verbose=not args.quiet)
    serve(fake, "Fake SearxNG", "SEARXNG_URL={url} DEEPTHINK_WEB_SEARCH=searxng")


if __name__ == "__main__":
    main()
