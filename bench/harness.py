"""Setting the stage for the benchmarks: the environment before Django starts, a throwaway
database, the machine, users, sessions, and running sessions through the real Supervisor.

Nothing here imports Django at module level: `prepare()` must run first.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .fakehost import TOKEN_CEILING, FakeHost, session_tag

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"

QUESTIONS = (
    "Why do we dream?",
    "How do bees decide where to build a new nest?",
    "What limits the speed of a database transaction?",
    "Why did the Bronze Age collapse?",
)

NOTES = (
    ("Dreams and memory", "REM sleep dreams replay memory and consolidate what was learned."),
    ("Sleep cycles", "Sleep cycles last about ninety minutes; dreams cluster in REM sleep."),
    ("Bee swarms", "Scout bees dance for candidate nest sites; a quorum decides the new home."),
    ("Transactions", "A commit waits for the log to reach disk; fsync latency bounds it."),
    ("Bronze Age", "Drought, earthquakes and broken trade routes hit the palace economies."),
    ("Evidence", "Strong claims need several independent sources that agree."),
)


@dataclass
class Setup:
    """Where the benchmarks run: database, channel layers, fakes, and the options."""

    quick: bool
    fakes: FakeHost
    database: str = "sqlite"  # or "postgresql"
    admin_url: str = ""  # the DATABASE_URL given, used to create and drop the bench database
    database_url: str = ""  # the throwaway PostgreSQL database the benchmarks use
    database_name: str = ""
    sqlite_dir: str = ""
    static_dir: str = ""  # collectstatic's output, as production serves it
    redis_url: str = ""  # REDIS_URL given (the in-process benchmarks use the in-memory layer)
    prefix: str = field(default_factory=lambda: f"bench-{os.getpid()}-{secrets.token_hex(3)}")
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    notes: list[str] = field(default_factory=list)

    def redis_layers(self, prefix: str = "") -> dict[str, Any]:
        return {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [self.redis_url], "prefix": prefix or self.prefix},
            }
        }


MEMORY_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def _admin_connection(url: str) -> Any:
    import psycopg

    parts = urlsplit(url)
    return psycopg.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        user=parts.username or None,
        password=parts.password or None,
        dbname=parts.path.lstrip("/") or "postgres",
        autocommit=True,
        connect_timeout=10,
    )


def prepare(*, quick: bool, fakes: FakeHost) -> Setup:
    """Set the environment Django will read, before it starts."""
    setup = Setup(quick=quick, fakes=fakes)
    env = os.environ
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    # Production-like: DEBUG off (no query log), quiet logs.
    env.setdefault("DEBUG", "0")
    env.setdefault("SECRET_KEY", "bench-" + secrets.token_hex(24))
    env.setdefault("LOG_LEVEL", "WARNING")
    # DEBUG off needs the host names (the test client's, and the live pages' origin first)
    # and the static files collected, as a deployment does.
    env.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
    setup.static_dir = tempfile.mkdtemp(prefix="deepthink-bench-static-")
    env["STATIC_ROOT"] = setup.static_dir
    env["DEEPTHINK_INPROCESS_WORKER"] = "0"
    # The per-person limit on sessions thinking at once is a product rule, not the worker's
    # capacity: the benchmarks start hundreds of sessions of one user.
    env["DEEPTHINK_MAX_CONCURRENT_SESSIONS"] = "1000"
    env["DEEPTHINK_SESSIONS_PER_HOUR"] = "100000"
    env["ANTHROPIC_BASE_URL"] = fakes.claude_url
    env["ANTHROPIC_API_KEY"] = "bench-key"
    env["EXA_BASE_URL"] = fakes.exa_url
    env["EXA_API_KEY"] = fakes.exa_key
    # This process uses the in-memory layer unless a benchmark switches to Redis.
    setup.redis_url = env.pop("REDIS_URL", "").strip()
    admin_url = env.get("DATABASE_URL", "").strip()
    if admin_url:
        setup.database = "postgresql"
        setup.admin_url = admin_url
        base = urlsplit(admin_url).path.lstrip("/") or "postgres"
        setup.database_name = f"{base}_bench_{os.getpid()}"[:63]
        with _admin_connection(admin_url) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{setup.database_name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{setup.database_name}"')
        setup.database_url = _with_database(admin_url, setup.database_name)
        env["DATABASE_URL"] = setup.database_url
    else:
        setup.sqlite_dir = tempfile.mkdtemp(prefix="deepthink-bench-")
        env["SQLITE_PATH"] = str(Path(setup.sqlite_dir) / "bench.sqlite3")
    return setup


def start_django() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)
    # The ASGI application, loaded at start as daphne and `runworker` load it (and with it
    # the start-up objects frozen out of the collector's full passes: config/startup.py).
    import config.asgi  # noqa: F401


def teardown(setup: Setup) -> None:
    """Close connections and drop the throwaway database."""
    with contextlib.suppress(Exception):
        from django.db import connections

        connections.close_all()
    if setup.database_name:
        try:
            with _admin_connection(setup.admin_url) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{setup.database_name}" WITH (FORCE)')
        except Exception as error:
            print(f"bench: could not drop {setup.database_name}: {error}", file=sys.stderr)
    if setup.sqlite_dir:
        shutil.rmtree(setup.sqlite_dir, ignore_errors=True)
    if setup.static_dir:
        shutil.rmtree(setup.static_dir, ignore_errors=True)


# --- the machine -----------------------------------------------------------------------


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def code_version() -> dict[str, Any]:
    """The commit measured, and whether the working tree had other changes."""

    def git(*args: str) -> str:
        try:
            done = subprocess.run(  # noqa: S603 - a fixed git command
                ["git", *args],  # noqa: S607
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.rstrip("\n")

    changed = [
        line[3:]
        for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
        if not line[3:].startswith("bench/")
    ]
    return {"commit": git("rev-parse", "--short", "HEAD"), "uncommitted_files": changed}


def machine(setup: Setup) -> dict[str, Any]:
    from importlib.metadata import version

    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SHOW server_version")
            database = f"PostgreSQL {cursor.fetchone()[0]}"
        else:
            cursor.execute("select sqlite_version()")
            database = f"SQLite {cursor.fetchone()[0]} (WAL, one file)"
    redis = "not used (REDIS_URL unset)"
    if setup.redis_url:
        try:
            import redis as redis_py

            client = redis_py.Redis.from_url(setup.redis_url, socket_timeout=5)
            redis = f"Redis {client.info('server')['redis_version']}"
            client.close()
        except Exception as error:
            redis = f"Redis unreachable ({error})"
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "database": database,
        "redis": redis,
        "packages": {
            name: version(name)
            for name in ("Django", "channels", "channels_redis", "anthropic", "httpx", "exa-py")
        },
    }


# --- users and sessions ----------------------------------------------------------------


def make_user(name: str, *, notes: int = len(NOTES)) -> Any:
    """A user with a few knowledge-base notes, so memory searches find something."""
    from django.contrib.auth import get_user_model

    from research.knowledge import add_item

    user = get_user_model().objects.create_user(name, password=None)
    for title, body in NOTES[:notes]:
        add_item(owner=user, title=title, body=body)
    return user


def create_session(
    owner: Any, key: str, *, synthesis_seconds: float = 36000.0, index: int = 0
) -> uuid.UUID:
    """A session as the start form makes it, tagged for the fake model, with a token ceiling
    (the fake ends it after its cycle limit) and an hour of budget it never reaches."""
    from django.db import transaction

    from thinking.forms import StartSessionForm

    form = StartSessionForm(
        data={
            "question": f"{QUESTIONS[index % len(QUESTIONS)]} {session_tag(key)}",
            "minutes": 60,
            "synthesis_minutes": synthesis_seconds / 60,
            "token_ceiling": TOKEN_CEILING,
        }
    )
    if not form.is_valid():
        raise RuntimeError(f"the start form refused the session: {form.errors.as_json()}")
    with transaction.atomic():
        return form.create_session(owner=owner).pk


@dataclass
class SessionRun:
    key: str
    id: uuid.UUID
    started: float = 0.0  # monotonic, when the supervisor was asked to start it
    ended: float = 0.0  # monotonic, when its task finished
    status: str | None = None

    @property
    def wall(self) -> float:
        return self.ended - self.started


@contextlib.asynccontextmanager
async def watching(session_ids: list[uuid.UUID]) -> AsyncIterator[None]:
    """One open page per session, as the publisher sees it: a channel that joined the
    session's group as a page does (`watchers.join`), its messages received as they come.
    Without it nobody watches, and the publisher skips the renders (thinking/watchers.py)."""
    from channels.layers import get_channel_layer

    from thinking import watchers
    from thinking.broadcast import group_name

    layer = get_channel_layer()
    members = [(group_name(pk), await layer.new_channel()) for pk in session_ids]
    joined = [await watchers.join(layer, group, channel) for group, channel in members]

    async def receive(channel: str) -> None:
        while True:
            await layer.receive(channel)

    readers = [asyncio.create_task(receive(channel)) for _, channel in members]
    try:
        yield
    finally:
        for (group, channel), when in zip(members, joined, strict=True):
            await watchers.leave(layer, group, channel, when)
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)


def pages(session_ids: list[uuid.UUID], watched: bool) -> contextlib.AbstractAsyncContextManager:
    """`watching` these sessions, or nobody watching (the renders skipped)."""
    return watching(session_ids) if watched else contextlib.nullcontext()


PAGES = {True: "a page open each", False: "no page open"}  # how the figures name the two


async def run_supervised(
    runs: list[SessionRun], *, publish: Any = None, timeout: float = 600.0, watched: bool = True
) -> list[SessionRun]:
    """Start every session at once on one Supervisor (the worker's own class, with its
    heartbeat running), and wait until all have finished; with `watched`, each with a page
    open (`watching`), so every step is rendered and sent as for a person watching."""
    async with pages([run.id for run in runs], watched):
        return await _run_supervised(runs, publish=publish, timeout=timeout)


async def _run_supervised(
    runs: list[SessionRun], *, publish: Any, timeout: float
) -> list[SessionRun]:
    from thinking import broadcast
    from thinking.worker import Supervisor, new_worker_id

    supervisor = Supervisor(
        worker_id=new_worker_id("bench"),
        capacity=max(1, len(runs)),
        publish=publish or broadcast.publish,
        sweeping=False,
    )
    # A worker builds its model and web clients once in its life, not once a session (as
    # this harness's supervisor per run would): built before any session's clock starts.
    supervisor.open_clients()
    beat = asyncio.create_task(supervisor.run_forever())

    def finisher(run: SessionRun) -> Any:
        def done(task: asyncio.Task[Any]) -> None:
            run.ended = time.monotonic()
            if not task.cancelled() and task.exception() is None:
                run.status = task.result()

        return done

    try:
        for run in runs:
            run.started = time.monotonic()
            if not await supervisor.start(run.id):
                raise RuntimeError(f"the supervisor could not claim session {run.key}")
            supervisor.running[run.id].add_done_callback(finisher(run))
        try:
            await asyncio.wait_for(supervisor.wait_idle(), timeout)
        except TimeoutError:
            for task in list(supervisor.running.values()):
                task.cancel()
            await asyncio.gather(*supervisor.running.values(), return_exceptions=True)
            raise RuntimeError(f"sessions still running after {timeout:.0f} s") from None
    finally:
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
        await supervisor.aclose()  # the client pools its sessions shared
    failed = [r for r in runs if r.status != "completed"]
    if failed:
        raise RuntimeError(
            f"{len(failed)} of {len(runs)} sessions did not complete "
            f"(e.g. {failed[0].key}: {failed[0].status})"
        )
    return runs


# --- small statistics ------------------------------------------------------------------


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (share in 0..1) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(share * len(ordered))))
    return ordered[rank - 1]


def merged_intervals(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping (start, end) spans merged: searches run in parallel count once."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


@contextlib.contextmanager
def layers(config: dict[str, Any]) -> Iterator[None]:
    """Use these channel layers (a fresh backend) inside the block."""
    from django.test import override_settings

    with override_settings(CHANNEL_LAYERS=config):
        yield


def with_benchmark_session(tag: str, use: Callable[[Setup, uuid.UUID], None]) -> None:
    """One 30-cycle benchmark session run against the fake servers in a throwaway database,
    then `use(setup, its id)`, for the benchmarks that read a real session's rows back
    (`row_read_cost`, `log_growth`); everything is torn down after."""
    fakes = FakeHost().start()
    setup = prepare(quick=False, fakes=fakes)
    try:
        start_django()
        from .scenarios import _new_sessions, _new_user

        async def one_session() -> uuid.UUID:
            fakes.configure(delay=0.0, exa_delay=0.0, cycles=30)
            user = await _new_user(f"{tag}-{setup.run_id}")
            runs = await _new_sessions(user, [f"{setup.run_id}-{tag}"], synthesis_seconds=0.5)
            await run_supervised(runs, timeout=300)
            return runs[0].id

        use(setup, asyncio.run(one_session()))
    finally:
        teardown(setup)
        fakes.stop()
