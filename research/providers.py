"""The web-search providers: Exa (exa-py), SearxNG (its JSON API over httpx) and Tavily
(tavily-python). The only module that imports `exa_py` or `tavily`.

Each provider makes one attempt at a search and turns what it got back into `WebResult`s;
`describe` turns any failure into a sentence a person can act on, naming the provider and
the setting to check. The retry, the cache and the merging of several providers live in
research/web.py.

Addresses come from the operator's settings only (EXA_BASE_URL, SEARXNG_URL,
TAVILY_BASE_URL); a session chooses providers by name, never an address, so nothing a
person types makes the server call a host of their choosing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import httpx
import tavily
import tavily.errors
from django.conf import settings
from exa_py import AsyncExa
from exa_py.api import ContentsOptions

from .results import RECENCY_DAYS, ResearchError, SearchOptions, WebResult, clipped, web_result

logger = logging.getLogger(__name__)

TEXT_CHARS = 3000  # page text asked per result (DEEPTHINK_WEB_TEXT_CHARS)
MAX_NUM_RESULTS = 100  # Exa's own ceiling
# Highlights are the passages Exa picks for the query (the SDK's advice for LLM context);
# the summary is a short abstract of the page; the text (bounded) is the page itself, so a
# citation can be checked against what the page says, not only Exa's picks.
CONTENTS: ContentsOptions = {"highlights": True, "summary": True}


class Provider:
    """One search provider at one address. `search` is one attempt: it raises whatever
    the transport or SDK raised, and `describe` says what that means."""

    name: ClassVar[str]
    label: ClassVar[str]
    key_setting: ClassVar[str] = ""  # the setting holding its key ("" : it takes none)
    address_setting: ClassVar[str]
    default_address: ClassVar[str] = ""

    def __init__(
        self,
        *,
        api_key: str = "",
        address: str = "",
        timeout: float = 20.0,
        text_chars: int = TEXT_CHARS,
        limits: httpx.Limits | None = None,
    ) -> None:
        self.api_key = api_key
        self.address = (address or self.default_address).rstrip("/")
        self.timeout = timeout
        self.text_chars = text_chars
        self.limits = limits  # None: httpx's default
        self.pool: LoopClient  # set by each provider

    def request_options(self, count: int, options: SearchOptions) -> dict[str, Any]:
        """What, besides the query, decides this provider's answer (for the cache key)."""
        return {"num_results": count, **options.filters()}

    async def search(self, text: str, count: int, options: SearchOptions) -> list[WebResult]:
        raise NotImplementedError

    def pool_of(self, headers: Mapping[str, str]) -> LoopClient:
        """An HTTP pool at this provider's address, with its timeout and limits."""
        return LoopClient(
            base_url=self.address, headers=headers, timeout=self.timeout, limits=self.limits
        )

    def from_json(
        self,
        text: str,
        results: Iterable[Mapping[str, Any]],
        *,
        date: str,
        page: str = "",
    ) -> list[WebResult]:
        """JSON results with `url`, `title`, `content` (the provider's pick for the query),
        `score`, a date under `date` and the page text, bounded, under `page`."""
        found = []
        for result in results:
            content = result.get("content") or ""
            item = web_result(
                provider=self.name,
                query=text,
                url=result.get("url"),
                title=result.get("title"),
                picks=[content] if content else [],
                text=(result.get(page) or "")[: max(self.text_chars, 0)] if page else None,
                score=result.get("score"),
                published_date=result.get(date),
            )
            if item is not None:
                found.append(item)
        return found

    def open(self) -> None:
        """Build the HTTP pool now, on the running event loop (which it then belongs to)."""
        self.pool.get()

    async def aclose(self) -> None:
        """Close the pool; a later search builds a new one."""
        await self.pool.aclose()

    # -- failures --------------------------------------------------------------------

    def describe(self, error: BaseException, *, timeout: float) -> ResearchError:
        """Any failure of `search` in words a person can act on."""
        if isinstance(error, ResearchError):
            return error
        if isinstance(error, TimeoutError | httpx.TimeoutException | tavily.errors.TimeoutError):
            return ResearchError(
                f"{self.label} did not answer within {timeout:g} seconds.",
                kind="timeout",
                retryable=True,
            )
        if isinstance(error, httpx.TransportError):
            return ResearchError(
                f"Could not reach {self.label} (network, or {self.address_setting}).",
                kind="connection",
                retryable=True,
            )
        if isinstance(error, httpx.HTTPStatusError):
            return self.status_error(error.response.status_code, _detail(error.response.text))
        if isinstance(error, ValueError | KeyError | TypeError):  # a reply not as documented
            logger.warning("Unreadable reply from %s: %r", self.label, error)
            return ResearchError(
                f"{self.label} sent a reply that could not be read.", kind="bad_reply"
            )
        logger.exception("%s failed unexpectedly", self.label, exc_info=error)
        return ResearchError(f"{self.label} failed unexpectedly.", kind="unexpected")

    def status_error(self, status: int, detail: str = "") -> ResearchError:
        if status == 401:
            check = f" (check {self.key_setting})" if self.key_setting else ""
            return ResearchError(
                f"{self.label} rejected the API key{check}.", kind="auth", status=status
            )
        if status == 402:
            return ResearchError(
                f"{self.label} has no credits left on this API key.", kind="billing", status=status
            )
        if status in (403, 432, 433):
            return ResearchError(
                f"{self.label} refused the request (HTTP {status}): the API key or plan may "
                "not allow it.",
                kind="forbidden",
                status=status,
            )
        if status == 429:
            return ResearchError(
                f"{self.label} is rate limited; try again shortly.",
                kind="rate_limited",
                status=status,
                retryable=True,
            )
        if status >= 500:
            return ResearchError(
                f"{self.label} is unavailable (HTTP {status}).",
                kind="unavailable",
                status=status,
                retryable=True,
            )
        return ResearchError(
            f"{self.label} rejected the query (HTTP {status}){': ' + detail if detail else ''}.",
            kind="rejected",
            status=status,
        )


def _detail(body: str) -> str:
    """A provider's own explanation from an error body, if any: Exa's {"error": "..."},
    Tavily's {"detail": {"error": "..."}}, SearxNG's plain text."""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = body
    if isinstance(payload, dict):
        inner = payload.get("detail", payload)
        payload = inner.get("error", "") if isinstance(inner, dict) else inner
    detail = " ".join(str(payload or "").split()).rstrip(".")
    return clipped(detail, 200) if "<" not in detail else ""


class LoopClient:
    """An httpx pool built on first use on the event loop that uses it, refusing any other
    loop (an httpx client belongs to one); `aclose()` and a later use builds a new one."""

    def __init__(
        self,
        *,
        base_url: str,
        headers: Mapping[str, str],
        timeout: float | None,
        limits: httpx.Limits | None,
    ) -> None:
        self.base_url = base_url
        self.headers = dict(headers)
        self.timeout = timeout
        self.limits = limits
        self.http: httpx.AsyncClient | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> httpx.AsyncClient:
        running = asyncio.get_running_loop()
        if self.http is None:
            sized: dict[str, Any] = {} if self.limits is None else {"limits": self.limits}
            self.http = httpx.AsyncClient(
                base_url=self.base_url, headers=self.headers, timeout=self.timeout, **sized
            )
            self.loop = running
        elif self.loop is not running:
            raise RuntimeError("A web-search client belongs to the event loop that built it")
        return self.http

    async def aclose(self) -> None:
        http, self.http, self.loop = self.http, None, None
        if http is not None:
            await http.aclose()


# --- Exa ------------------------------------------------------------------------------


class ExaClient(AsyncExa):
    """exa-py's client on an httpx pool of given limits (exa-py takes no HTTP client or
    limits; its requests go through its public `client`, so that is where this one gives
    its own, with exa-py's base URL, headers and timeout)."""

    def __init__(
        self, *, api_key: str, api_base: str, timeout: float, limits: httpx.Limits | None = None
    ) -> None:
        super().__init__(api_key=api_key, api_base=api_base, timeout=timeout)
        self.pool = LoopClient(
            base_url=self.base_url, headers=self.headers, timeout=self.timeout, limits=limits
        )

    @property
    def client(self) -> httpx.AsyncClient:
        return self.pool.get()

    async def aclose(self) -> None:
        await self.pool.aclose()


class Exa(Provider):
    name = "exa"
    label = "Exa"
    key_setting = "EXA_API_KEY"
    address_setting = "EXA_BASE_URL"
    default_address = "https://api.exa.ai"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.contents: ContentsOptions = {**CONTENTS}
        if self.text_chars > 0:
            self.contents["text"] = {"max_characters": self.text_chars}
        # exa-py joins base URL and path by plain concatenation: no trailing slash.
        self.exa = ExaClient(
            api_key=self.api_key, api_base=self.address, timeout=self.timeout, limits=self.limits
        )
        self.pool = self.exa.pool

    def request_options(self, count: int, options: SearchOptions) -> dict[str, Any]:
        return {**super().request_options(count, options), "contents": self.contents}

    async def search(self, text: str, count: int, options: SearchOptions) -> list[WebResult]:
        filters: dict[str, Any] = {}
        # Exa takes one list or the other; the other is applied to its results.
        if options.include_domains:
            filters["include_domains"] = list(options.include_domains)
        elif options.exclude_domains:
            filters["exclude_domains"] = list(options.exclude_domains)
        if options.recency:
            since = datetime.now(UTC) - timedelta(days=RECENCY_DAYS[options.recency])
            filters["start_published_date"] = since.strftime("%Y-%m-%dT00:00:00.000Z")
        # exa-py's timeout bounds each wait for data; the caller bounds the whole call.
        response = await self.exa.search(
            text,
            contents=self.contents,
            num_results=min(count, MAX_NUM_RESULTS),
            timeout=self.timeout,
            **filters,
        )
        return [
            found
            for result in response.results
            if (
                found := web_result(
                    provider=self.name,
                    query=text,
                    url=result.url,
                    title=result.title,
                    picks=result.highlights or [],
                    summary=result.summary,
                    text=result.text,
                    score=result.score,
                    published_date=result.published_date,
                )
            )
        ]

    def describe(self, error: BaseException, *, timeout: float) -> ResearchError:
        # exa-py never retries and reports every HTTP error as a bare
        # ValueError("Request failed with status code N: <body>").
        if isinstance(error, ValueError) and (status := _status_in(str(error))) is not None:
            _, _, body = str(error).partition(": ")
            return self.status_error(status, _detail(body))
        return super().describe(error, timeout=timeout)


def _status_in(message: str) -> int | None:
    _head, found, rest = message.partition("status code ")
    digits = rest[:3]
    return int(digits) if found and digits.isdigit() else None


# --- SearxNG --------------------------------------------------------------------------


class Searxng(Provider):
    """A SearxNG instance's JSON API: `GET /search?q=…&format=json` (the instance must list
    `json` under `search.formats` in its settings.yml; else it answers 403). No key. It
    returns a page of results whatever the count asked; the domain lists are applied to
    them here, the recency window is its `time_range`."""

    name = "searxng"
    label = "SearxNG"
    address_setting = "SEARXNG_URL"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pool = self.pool_of({"Accept": "application/json"})

    async def search(self, text: str, count: int, options: SearchOptions) -> list[WebResult]:
        params = {"q": text, "format": "json", "pageno": "1"}
        if options.recency:
            params["time_range"] = options.recency
        response = await self.pool.get().get("/search", params=params)
        if response.status_code != 200:
            raise self.status_error(response.status_code, _detail(response.text))
        body = response.json()
        results = body["results"]
        if not results and body.get("unresponsive_engines"):
            names = ", ".join(str(entry[0]) for entry in body["unresponsive_engines"][:5])
            raise ResearchError(
                f"SearxNG's engines did not answer ({names}).", kind="unavailable", retryable=True
            )
        return self.from_json(text, results, date="publishedDate")

    def status_error(self, status: int, detail: str = "") -> ResearchError:
        if status == 403:
            return ResearchError(
                "SearxNG refused to answer in JSON: add json to search.formats in its "
                "settings.yml.",
                kind="forbidden",
                status=status,
            )
        return super().status_error(status, detail)


# --- Tavily ---------------------------------------------------------------------------


class Tavily(Provider):
    """Tavily through its official SDK (tavily-python's AsyncTavilyClient), given our own
    httpx pool and base URL (TAVILY_BASE_URL, for a stand-in)."""

    name = "tavily"
    label = "Tavily"
    key_setting = "TAVILY_API_KEY"
    address_setting = "TAVILY_BASE_URL"
    default_address = "https://api.tavily.com"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pool = self.pool_of({"Authorization": f"Bearer {self.api_key}"})

    def request_options(self, count: int, options: SearchOptions) -> dict[str, Any]:
        return {**super().request_options(count, options), "text_chars": self.text_chars}

    async def search(self, text: str, count: int, options: SearchOptions) -> list[WebResult]:
        client = tavily.AsyncTavilyClient(
            api_key=self.api_key, api_base_url=self.address, client=self.pool.get()
        )
        optional: dict[str, Any] = {}
        if options.include_domains:
            optional["include_domains"] = list(options.include_domains)
        if options.exclude_domains:
            optional["exclude_domains"] = list(options.exclude_domains)
        if options.recency:
            optional["time_range"] = options.recency
        if self.text_chars > 0:
            optional["include_raw_content"] = "text"
        body = await client.search(
            text,
            search_depth="basic",
            max_results=min(count, 20),
            timeout=self.timeout,
            **optional,
        )
        return self.from_json(text, body["results"], date="published_date", page="raw_content")

    def describe(self, error: BaseException, *, timeout: float) -> ResearchError:
        # tavily-python raises its own errors for the statuses it knows.
        statuses: Sequence[tuple[type[Exception], int]] = (
            (tavily.UsageLimitExceededError, 429),
            (tavily.InvalidAPIKeyError, 401),
            (tavily.errors.ForbiddenError, 403),
            (tavily.BadRequestError, 400),
        )
        for kind, status in statuses:
            if isinstance(error, kind):
                return self.status_error(status, _detail(str(error)))
        return super().describe(error, timeout=timeout)


PROVIDERS: dict[str, type[Provider]] = {"exa": Exa, "searxng": Searxng, "tavily": Tavily}
NAMES = tuple(PROVIDERS)


def configured() -> dict[str, dict[str, str]]:
    """The providers this deployment is set up for, by name, with their key and address:
    Exa with EXA_API_KEY, SearxNG with SEARXNG_URL, Tavily with TAVILY_API_KEY."""
    found = {}
    exa_key = getattr(settings, "EXA_API_KEY", "")
    if exa_key:
        found["exa"] = {"api_key": exa_key, "address": getattr(settings, "EXA_BASE_URL", "")}
    searxng = getattr(settings, "SEARXNG_URL", "")
    if searxng:
        found["searxng"] = {"api_key": "", "address": searxng}
    tavily_key = getattr(settings, "TAVILY_API_KEY", "")
    if tavily_key:
        found["tavily"] = {
            "api_key": tavily_key,
            "address": getattr(settings, "TAVILY_BASE_URL", ""),
        }
    return found


def default_names() -> list[str]:
    """The providers a session searches when it chose none: DEEPTHINK_WEB_SEARCH (those of
    them configured), else the first configured of exa, searxng, tavily."""
    ready = configured()
    named = [name for name in getattr(settings, "DEEPTHINK_WEB_SEARCH", []) if name in ready]
    return named or [name for name in NAMES if name in ready][:1]


def not_configured(name: str) -> str:
    """Why a session may not choose `name` here ("" when it may)."""
    if name not in PROVIDERS:
        return f"Unknown web search provider “{name}”: choose from {', '.join(NAMES)}."
    if name in configured():
        return ""
    provider = PROVIDERS[name]
    needs = provider.key_setting or provider.address_setting
    return f"{provider.label} is not set up on this server ({needs} is not set)."


def make(
    name: str, config: Mapping[str, str], *, common: Mapping[str, Any], limits: httpx.Limits | None
) -> Provider:
    """The provider `name` as `configured()` and the shared settings (`timeout`,
    `text_chars`) give it, on a pool of `limits` (None: httpx's default)."""
    return PROVIDERS[name](
        api_key=config["api_key"],
        address=config["address"],
        timeout=float(common["timeout"]),
        text_chars=int(common["text_chars"]),
        limits=limits,
    )
