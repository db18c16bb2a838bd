"""What a long-running server process does once it has started (config/asgi.py, which
daphne and `runworker` load)."""

from __future__ import annotations

import gc

from django.conf import settings


def freeze_start_up() -> None:
    """Leave what start-up made out of the garbage collector's full passes.

    A worker tracks ~350,000 objects once started (Django, the SDKs' types, the app), and a
    full pass walks every one while each thread of the process waits: ~0.22 s, a few times
    in a two-hour session (the benchmark diary, git show 1a29a6f^:bench/README.md). They
    live as long as the process; reference counting still frees what drops out of use.
    Start-up's own cyclic garbage is collected first, so none of it is kept."""
    if settings.DEEPTHINK_GC_FREEZE:
        gc.collect()
        gc.freeze()
