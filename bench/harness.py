"""Setting the stage: the environment before Django starts, a throwaway database, users and
sessions, a worker (the app's own `Supervisor`), pages open on a session (WebSocket viewers
through the app's ASGI application), and the process's CPU and memory.

Nothing here imports Django or the app at module level: `prepare()` must run first.
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
import threading
import time
import uuid
from collections.abc import AsyncIterator
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
    """Where the benchmarks run: the database, Redis, the fakes, and the options."""

    quick: bool
    fakes: FakeHost
    database: str = "sqlite"  # or "postgresql"
    admin_url: str = ""  # the DATABASE_URL given, used to create and drop the bench database
    database_name: str = ""
    sqlite_dir: str = ""
    redis_url: str = ""  # REDIS_URL given (the benchmarks use the in-memory layer unless told)
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))

    @property
    def prefix(self) -> str:
        return f"bench-{os.getpid()}-{self.run_id}"

    def redis_layers(self) -> dict[str, Any]:
        """Channel layers over REDIS_URL, as config/settings.py builds them."""
        host = {"address": self.redis_url, "socket_timeout": None}
        return {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [host], "prefix": self.prefix},
            }
        }


MEMORY_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


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
    """Set the environment Django will read, before it starts: production-like (DEBUG off,
    quiet logs), the fakes as the providers, a throwaway database."""
    setup = Setup(quick=quick, fakes=fakes)
    env = os.environ
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env.setdefault("DEBUG", "0")
    env.setdefault("SECRET_KEY", "bench-" + secrets.token_hex(24))
    env.setdefault("LOG_LEVEL", "WARNING")
    # DEBUG off needs the host names and the static files collected, as a deployment does.
    env.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
    env["STATIC_ROOT"] = tempfile.mkdtemp(prefix="deepthink-bench-static-")
    env["DEEPTHINK_INPROCESS_WORKER"] = "0"
    # Every page is opened as one user (50 on one session in `live`, one on each of 100 in
    # `concurrency`): the product's cap on a user's live pages (20) would close the rest.
    env["DEEPTHINK_WS_MAX_PER_USER"] = "1000"
    env["ANTHROPIC_BASE_URL"] = fakes.claude_url
    env["ANTHROPIC_API_KEY"] = "bench-key"
    env["EXA_BASE_URL"] = fakes.exa_url
    env["EXA_API_KEY"] = fakes.exa_key
    # The in-memory layer unless a benchmark switches to Redis (`layers`).
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
        parts = urlsplit(admin_url)
        env["DATABASE_URL"] = urlunsplit(
            (parts.scheme, parts.netloc, "/" + setup.database_name, parts.query, parts.fragment)
        )
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
    if static := os.environ.get("STATIC_ROOT", "").strip():
        shutil.rmtree(static, ignore_errors=True)


@contextlib.contextmanager
def layers(config: dict[str, Any]) -> Any:
    """Use these channel layers (a fresh backend) inside the block."""
    from django.test import override_settings

    with override_settings(CHANNEL_LAYERS=config):
        yield


# --- the machine and the code ----------------------------------------------------------


def _first_line(path: str, prefix: str) -> str:
    with contextlib.suppress(OSError):
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    return ""


def code_version() -> dict[str, Any]:
    """The commit measured, where its `thinking` package was imported from, and whether the
    tree had other changes than the benchmarks'."""
    import thinking

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
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted_files": changed,
        "thinking_from": str(Path(thinking.__file__).resolve().parent),
    }


def machine(setup: Setup) -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SHOW server_version")
            database = f"PostgreSQL {cursor.fetchone()[0]}"
        else:
            cursor.execute("select sqlite_version()")
            database = f"SQLite {cursor.fetchone()[0]}"
    redis = "not used (REDIS_URL unset)"
    if setup.redis_url:
        try:
            import redis as redis_py

            client = redis_py.Redis.from_url(setup.redis_url, socket_timeout=5)
            redis = f"Redis {client.info('server')['redis_version']}"
            client.close()
        except Exception as error:
            redis = f"Redis unreachable ({error})"
    memory = _first_line("/proc/meminfo", "MemTotal")
    return {
        "cpu": _first_line("/proc/cpuinfo", "model name") or platform.processor(),
        "cores": os.cpu_count(),
        "memory_gb": round(int(memory.split()[0]) / 1024 / 1024, 1) if memory else None,
        "python": platform.python_version(),
        "database": database,
        "redis": redis,
    }


# --- CPU and memory of the worker --------------------------------------------------------


def rss_mb() -> float:
    """Resident memory of this process now, in MB (Linux; 0 elsewhere)."""
    value = _first_line("/proc/self/status", "VmRSS")
    return int(value.split()[0]) / 1024 if value else 0.0


def children_cpu_seconds(fakes: FakeHost) -> float:
    """CPU seconds so far of the processes this one started and theirs (a tree that renders
    live updates in child processes), but not of the fakes' process: a real provider costs
    the worker nothing but waiting."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        pid = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / ticks
    total = 0.0
    waiting = [p for p in children.get(os.getpid(), []) if p != fakes.pid]
    while waiting:
        pid = waiting.pop()
        total += cpu.get(pid, 0.0)
        waiting += children.get(pid, [])
    return total


def worker_cpu_seconds(fakes: FakeHost) -> float:
    """CPU seconds so far of this process and of the processes it started (not the fakes)."""
    own = os.times()
    return own.user + own.system + children_cpu_seconds(fakes)


async def settle(fakes: FakeHost, *, timeout: float = 60.0) -> None:
    """Wait until the processes this one started are idle: a child the app starts on its
    first live update (to render them) takes seconds of CPU to start, which no session's
    figures should carry."""
    deadline = time.monotonic() + timeout
    before = children_cpu_seconds(fakes)
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = children_cpu_seconds(fakes)
        if now - before < 0.05:
            return
        before = now


class PeakRSS:
    """The highest resident memory seen while the block runs (a thread samples it, so a
    busy event loop does not hide a peak)."""

    def __init__(self, every: float = 0.02) -> None:
        self.every = every
        self.before = self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="bench-rss", daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, rss_mb())

    def __enter__(self) -> PeakRSS:
        import gc

        gc.collect()
        self.before = self.peak = rss_mb()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())

    @property
    def rise(self) -> float:
        return self.peak - self.before


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (share in 0..1) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(share * len(ordered))))
    return ordered[rank - 1]


def covered(spans: list[tuple[float, float]]) -> float:
    """Seconds inside any of the spans: spans that overlap count once."""
    total, end = 0.0, -math.inf
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


# --- users, sessions, pages ----------------------------------------------------------------


async def new_user(name: str) -> Any:
    """A user with a few knowledge-base notes, so memory searches find something."""
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model

    from . import app

    def make() -> Any:
        user = get_user_model().objects.create_user(name, password=None)
        for title, body in NOTES:
            app.add_item(owner=user, title=title, body=body)
        return user

    return await sync_to_async(make)()


async def new_sessions(
    user: Any, keys: list[str], *, synthesis_seconds: float = 36000.0
) -> list[uuid.UUID]:
    """Sessions of an hour's budget (never reached: the fake ends each after its cycle
    limit), tagged for the fake model, a synthesis every `synthesis_seconds` of active time."""
    from asgiref.sync import sync_to_async
    from django.conf import settings

    from . import app

    def make() -> list[uuid.UUID]:
        return [
            app.ThinkingSession.objects.create(
                owner=user,
                question=f"{QUESTIONS[i % len(QUESTIONS)]} {session_tag(key)}",
                budget_seconds=3600.0,
                synthesis_interval_seconds=synthesis_seconds,
                model_id=settings.DEEPTHINK_MODEL,
                token_ceiling=TOKEN_CEILING,
            ).pk
            for i, key in enumerate(keys)
        ]

    return await sync_to_async(make)()


class Page:
    """A page open on a session: a WebSocket through the app's ASGI application, as a
    browser's. With `keep`, every message is kept with the wall-clock time it arrived."""

    def __init__(self, communicator: Any, *, keep: bool) -> None:
        self.communicator = communicator
        self.keep = keep
        self.messages: list[tuple[float, str]] = []
        self.received = 0
        self.task: asyncio.Task[None] | None = None

    async def read(self) -> None:
        while True:
            # A long timeout: on a timeout the communicator cancels the consumer itself.
            message = await self.communicator.receive_output(timeout=3600)
            if message["type"] == "websocket.close":
                # A page the server closed would count as one that never saw anything.
                raise RuntimeError(f"the server closed a page ({message.get('code')})")
            self.received += 1
            if self.keep:
                self.messages.append((time.time(), message.get("text", "")))


@contextlib.asynccontextmanager
async def open_pages(
    user: Any, session_ids: list[uuid.UUID], *, per_session: int = 1, keep: bool = False
) -> AsyncIterator[list[Page]]:
    """`per_session` pages open on each session, logged in as `user`, each up to date
    (connected at the session's current revision), reading every message as it comes."""
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.conf import settings
    from django.test import AsyncClient

    from . import app

    client = AsyncClient()
    await client.aforce_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    host = next((h for h in settings.ALLOWED_HOSTS if h and "*" not in h), "127.0.0.1")
    headers = [(b"origin", f"http://{host.lstrip('.')}".encode()), (b"cookie", cookie.encode())]
    revisions = await sync_to_async(
        lambda: dict(
            app.ThinkingSession.objects.filter(pk__in=session_ids).values_list("pk", "revision")
        )
    )()
    pages: list[Page] = []
    try:
        for session_id in session_ids:
            path = app.WS_PATH.format(session_id=session_id, revision=revisions[session_id])
            for _ in range(per_session):
                communicator = WebsocketCommunicator(app.application, path, headers=headers)
                connected, code = await communicator.connect(timeout=30)
                if not connected:
                    raise RuntimeError(f"a page was refused ({code})")
                page = Page(communicator, keep=keep)
                page.task = asyncio.create_task(page.read())
                pages.append(page)
        yield pages
    finally:
        # A page's reader that already stopped stopped on an error: the figures are not whole.
        stopped = [p.task for p in pages if p.task is not None and p.task.done()]
        for page in pages:
            if page.task is not None:
                page.task.cancel()
        await asyncio.gather(*(p.task for p in pages if p.task), return_exceptions=True)
        for page in pages:
            with contextlib.suppress(Exception):
                await page.communicator.disconnect(timeout=5)
        errors = [t.exception() for t in stopped if not t.cancelled() and t.exception()]
        if errors:
            raise RuntimeError(f"{len(errors)} of {len(pages)} pages stopped: {errors[0]}")


# --- the worker ----------------------------------------------------------------------------


@dataclass
class Batch:
    """Sessions started at once on a worker: each one's wall time, and the worker's CPU."""

    walls: dict[uuid.UUID, float]
    seconds: float
    cpu_seconds: float


class Worker:
    """One worker, as `manage.py runworker thinking` runs it: the app's `Supervisor` with its
    heartbeat, its model and web clients built before any session starts (once in a
    worker's life)."""

    def __init__(self, fakes: FakeHost, capacity: int = 1000) -> None:
        from . import app

        self.fakes = fakes
        self.supervisor = app.Supervisor(
            worker_id=f"bench-{secrets.token_hex(4)}", capacity=capacity, sweeping=False
        )
        self.beat: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Worker:
        self.supervisor.open_clients()
        self.beat = asyncio.create_task(self.supervisor.run_forever())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.beat is not None:
            self.beat.cancel()
            await asyncio.gather(self.beat, return_exceptions=True)
        await self.supervisor.aclose()

    async def run(self, session_ids: list[uuid.UUID], *, timeout: float) -> Batch:
        """Start the sessions at once and wait until all have finished; each must complete."""
        supervisor = self.supervisor
        ended: dict[uuid.UUID, tuple[float, Any]] = {}

        def finisher(session_id: uuid.UUID, began: float) -> Any:
            def done(task: asyncio.Task[Any]) -> None:
                status = None
                if not task.cancelled() and task.exception() is None:
                    status = task.result()
                ended[session_id] = (time.monotonic() - began, status)

            return done

        cpu = worker_cpu_seconds(self.fakes)
        began = time.monotonic()
        for session_id in session_ids:
            started = time.monotonic()
            if not await supervisor.start(session_id):
                raise RuntimeError(f"the worker could not claim session {session_id}")
            supervisor.running[session_id].add_done_callback(finisher(session_id, started))
        try:
            await asyncio.wait_for(supervisor.wait_idle(), timeout)
        except TimeoutError:
            tasks = [supervisor.running[s] for s in session_ids if s in supervisor.running]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise RuntimeError(f"sessions still running after {timeout:.0f} s") from None
        seconds = time.monotonic() - began
        cpu = worker_cpu_seconds(self.fakes) - cpu
        failed = [(s, status) for s, (_, status) in ended.items() if status != "completed"]
        if failed or len(ended) != len(session_ids):
            example = failed[0] if failed else ("?", "no result")
            raise RuntimeError(
                f"{len(failed)} of {len(session_ids)} sessions did not complete "
                f"(e.g. {example[0]}: {example[1]})"
            )
        return Batch({s: wall for s, (wall, _) in ended.items()}, seconds, cpu)
