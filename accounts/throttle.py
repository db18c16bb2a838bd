"""Counting attempts in the cache, to slow down password guessing.

Counts live in Django's cache: the local-memory cache on embedded defaults (one process),
Redis when REDIS_URL is set, so every web process shares them.
"""

from __future__ import annotations

import hashlib

from django.core.cache import cache


def _key(scope: str, *parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]
    return f"throttle:{scope}:{digest}"


def too_many(scope: str, *parts: str, limit: int) -> bool:
    return int(cache.get(_key(scope, *parts), 0)) >= limit


def count(scope: str, *parts: str, window_seconds: int) -> int:
    key = _key(scope, *parts)
    # add() only sets a missing key, so the window starts at the first attempt.
    cache.add(key, 0, timeout=window_seconds)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add() and incr()
        cache.set(key, 1, timeout=window_seconds)
        return 1


def reset(scope: str, *parts: str) -> None:
    cache.delete(_key(scope, *parts))
