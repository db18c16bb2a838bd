"""The search cache: an identical search within the cache period is answered from the
database instead of the provider.

Identical means the same kind, the same provider at the same address (another SearxNG
instance, or a stand-in, answers differently), the same scope ("user:5", "team:3"), the
same query once case and spacing are normalised, and the same options. The scope is part of
the key so one person's searches (which may reveal their question) never answer another's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.utils import timezone

from config.hops import db_hop

from .models import SearchCache

# Bump when the stored result shape changes, so old rows are simply never read again.
FORMAT_VERSION = 2  # 2: the provider and its address are in the key


def normalise_query(text: str) -> str:
    return " ".join(text.split()).casefold()


def cache_key(
    *,
    kind: str,
    scope: str,
    query: str,
    options: Mapping[str, Any],
    provider: str = "",
    address: str = "",
) -> str:
    material = json.dumps(
        {
            "v": FORMAT_VERSION,
            "kind": kind,
            "provider": provider,
            "address": address,
            "scope": scope,
            "query": normalise_query(query),
            "options": options,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(material.encode()).hexdigest()


async def cached_results(key: str) -> list[dict[str, Any]] | None:
    """The stored results for `key` if they have not expired, else None."""
    return (await cached_many([key])).get(key)


def _cached_many(keys: list[str]) -> dict[str, list[dict[str, Any]]]:
    rows = SearchCache.objects.fresh().filter(key__in=keys).order_by().values_list("key", "results")
    return {key: results for key, results in rows if isinstance(results, list)}


# The stored results of each of `keys` that has not expired, in one statement; a key
# without them is left out.
cached_many = db_hop(_cached_many)


def cache_row(
    *,
    key: str,
    kind: str,
    scope: str,
    query: str,
    options: Mapping[str, Any],
    results: list[dict[str, Any]],
    ttl_seconds: float,
) -> SearchCache:
    """The row keeping `results` under `key` for `ttl_seconds` from now (see `store_rows`)."""
    now = timezone.now()
    return SearchCache(
        key=key,
        kind=kind,
        scope=scope,
        query=normalise_query(query),
        options=dict(options),
        results=results,
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_seconds),
    )


async def store_rows(rows: list[SearchCache]) -> None:
    """Keep `rows` (from `cache_row`), each replacing an expired row of its key."""
    if rows:
        await upsert(rows)


def _upsert(rows: list[SearchCache]) -> None:
    # One statement for them all (INSERT … ON CONFLICT DO UPDATE), where update_or_create
    # took a transaction each (a locking read, then the write). The same search may finish
    # at the same moment elsewhere and store its row first; its results are as good as
    # ours, and the later write wins.
    SearchCache.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["key"],
        update_fields=["kind", "scope", "query", "options", "results", "created_at", "expires_at"],
    )


upsert = db_hop(_upsert)
