"""What every web-search provider gives back, and the filters a session puts on them.

Shared by the providers (research/providers.py) and the search itself (research/web.py),
which import this module and never each other's internals.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

PASSAGE_CHARS = 1200  # the passage of a page shown to the model and kept with the source
SNIPPET_CHARS = 600
# Query parameters that only track where a click came from.
TRACKING_PARAMS = re.compile(r"^(utm_\w+|fbclid|gclid|mc_cid|mc_eid|ref_src)$", re.IGNORECASE)
# How recent a page must be, by the window a session chose ("" : any age), in days.
RECENCY_DAYS = {"day": 1, "week": 7, "month": 31, "year": 366}


class ResearchError(Exception):
    """A research call that failed for good; `str(error)` is fit to show a person."""

    def __init__(
        self,
        message: str,
        *,
        kind: str = "error",
        status: int | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retryable = retryable


@dataclass(frozen=True)
class WebResult:
    url: str
    title: str
    snippet: str  # the provider's picks (highlights, its snippet), else the page's summary
    summary: str
    score: float | None  # the provider's relevance, higher is better; None when it gives none
    published_date: str | None  # as the provider gives it, ISO 8601
    query: str  # the search that found it
    # What the model is shown of the page: highlights, then the page text, bounded. Stored
    # with the source so a citation is checked against exactly this.
    passage: str = ""
    provider: str = ""  # the search provider that found it ("exa", "searxng", "tavily")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WebResult:
        known = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in data.items() if name in known})


@dataclass(frozen=True)
class SearchOptions:
    """A session's choices for its web searches. Empty `providers`: the deployment's
    default (DEEPTHINK_WEB_SEARCH)."""

    providers: tuple[str, ...] = ()
    include_domains: tuple[str, ...] = ()  # only pages on these (or their subdomains)
    exclude_domains: tuple[str, ...] = ()  # never pages on these
    recency: str = ""  # "", or a key of RECENCY_DAYS

    def filters(self) -> dict[str, Any]:
        """The filters as they enter a search's cache key."""
        return {
            "include_domains": sorted(self.include_domains),
            "exclude_domains": sorted(self.exclude_domains),
            "recency": self.recency,
        }

    def admits(self, url: str) -> bool:
        """Whether a result's page passes the domain lists (a provider that ignores or only
        loosely applies them is held to them here)."""
        host = (urlsplit(url).hostname or "").lower().removeprefix("www.")
        if any(on_domain(host, domain) for domain in self.exclude_domains):
            return False
        return not self.include_domains or any(
            on_domain(host, domain) for domain in self.include_domains
        )


def on_domain(host: str, domain: str) -> bool:
    """`host` is `domain` or one of its subdomains."""
    return host == domain or host.endswith("." + domain)


def normalise_url(url: str) -> str:
    """A URL reduced to what identifies the page: lower-case scheme and host, no "www.",
    default port, fragment, trailing slash or tracking parameters; sorted query."""
    parts = urlsplit(url.strip())
    scheme = (parts.scheme or "https").lower()
    host = (parts.hostname or "").lower().removeprefix("www.")
    port = parts.port if parts.port not in (None, 80, 443) else None
    netloc = f"{host}:{port}" if port else host
    path = parts.path.rstrip("/") or ""
    query = urlencode(
        sorted(
            (name, value)
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
            if not TRACKING_PARAMS.match(name)
        )
    )
    # http and https of one page are the same page.
    scheme = "https" if scheme in ("http", "https") else scheme
    return urlunsplit((scheme, netloc, path, query, ""))


def dedupe(results: Iterable[WebResult]) -> list[WebResult]:
    """Results with the same normalised URL collapse into the first (the better-ranked)."""
    seen: set[str] = set()
    unique: list[WebResult] = []
    for result in results:
        key = normalise_url(result.url)
        if key not in seen:
            seen.add(key)
            unique.append(result)
    return unique


def is_web_url(url: str) -> bool:
    """Only http(s) links are kept: a `javascript:` or `data:` URL from a search result would
    otherwise reach storage, the API, exports and every page that links a source."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def passage_of(picks: Sequence[str], text: str | None, summary: str | None) -> str:
    """What the model is shown of a page: the provider's picks, then the page text (unless
    it starts with the first pick), else the summary; bounded."""
    parts = [one_line(pick) for pick in picks if pick and pick.strip()]
    body = one_line(text)
    if body and not any(body.startswith(pick[:60]) for pick in parts):
        parts.append(body)
    return clipped(" … ".join(parts) or one_line(summary), PASSAGE_CHARS)


def snippet_of(picks: Sequence[str], summary: str | None, text: str | None) -> str:
    """The short text a source shows: the provider's picks, else the summary or the text."""
    joined = " … ".join(one_line(pick) for pick in picks if pick and pick.strip())
    return clipped(one_line(joined or summary or text), SNIPPET_CHARS)


def web_result(
    *,
    provider: str,
    query: str,
    url: str | None,
    title: str | None,
    picks: Sequence[str] = (),
    summary: str | None = None,
    text: str | None = None,
    score: object = None,
    published_date: str | None = None,
) -> WebResult | None:
    """A provider's result as a WebResult; None for a link that is not http(s)."""
    url = (url or "").strip()
    if not is_web_url(url):
        return None
    return WebResult(
        url=url,
        title=one_line(title) or url,
        snippet=snippet_of(picks, summary, text),
        summary=one_line(summary),
        score=float(score) if isinstance(score, int | float) else None,
        published_date=published_date or None,
        query=query,
        passage=passage_of(picks, text, summary),
        provider=provider,
    )
