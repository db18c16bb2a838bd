"""The ASGI application's start-up (config/asgi.py), in a fresh process."""

from __future__ import annotations

from tests.helpers import in_fresh_python


def test_what_start_up_made_is_left_out_of_full_garbage_collections():
    """A full collection walks every object the collector tracks while the whole process
    waits (every session of a worker, every request): ~0.25 s over start-up's ~350,000
    objects, a few times in a two-hour session. Frozen at start-up, they are not walked."""
    code = "import gc, config.asgi; print(gc.get_freeze_count(), len(gc.get_objects()))"
    leave_out = ("DEEPTHINK_", "DATABASE_", "REDIS_URL")
    result = in_fresh_python(code, leave_out=leave_out, timeout=120)
    assert result.returncode == 0, result.stderr
    frozen, walked = map(int, result.stdout.split())
    assert walked < frozen / 10
