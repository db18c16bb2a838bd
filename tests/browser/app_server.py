"""The app served by daphne on 127.0.0.1, as a person's browser would reach it.

A throwaway SQLite file, migrated and with one login, and the fake Claude and Exa servers
(running in the test process, so a test can swap the fake model's responder). Usable from
the browser tests' fixtures and, for a look by hand, as a script::

    .venv/bin/python -m tests.browser.app_server     # prints the URL and the login
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fakes.anthropic_server import FakeAnthropic
from fakes.exa_server import FakeExa

ROOT = Path(__file__).resolve().parents[2]
USERNAME = "alice"
PASSWORD = "alice-pass-123"


@dataclass
class AppServer:
    url: str
    claude: FakeAnthropic
    exa: FakeExa
    log: Path
    daphne: Daphne | None = None  # the process, for tests that signal or restart it


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited with {process.returncode}:\n{log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise RuntimeError(f"daphne did not listen on {port} within {timeout} s:\n{log.read_text()}")


def daphne_flags() -> list[str]:
    """The flags `make run` gives daphne: the tests serve under the same configuration."""
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line.startswith("DAPHNE_FLAGS :="):
            return line.partition(":=")[2].split()
    raise RuntimeError("Makefile has no DAPHNE_FLAGS line")


def _env(workdir: Path, claude: FakeAnthropic, exa: FakeExa, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    # Embedded defaults: SQLite and the in-memory layer, so the web process runs sessions.
    for name in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)
    env.update(
        SQLITE_PATH=str(workdir / "browser.sqlite3"),
        ANTHROPIC_BASE_URL=claude.base_url,
        ANTHROPIC_API_KEY="test-key",
        EXA_API_KEY=exa.api_key,
        EXA_BASE_URL=exa.base_url,
        DEBUG="1",
        DEEPTHINK_SWEEP_SECONDS="0.5",
        DEEPTHINK_INPROCESS_WORKER="1",
        # One login starts every test's session; the per-person limits are tested elsewhere.
        DEEPTHINK_MAX_CONCURRENT_SESSIONS="50",
        DEEPTHINK_SESSIONS_PER_HOUR="500",
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class Daphne:
    """One daphne process serving the app as `make run` does; startable again (a restart)."""

    def __init__(self, env: dict[str, str], log: Path, port: int | None = None) -> None:
        self.env, self.log = env, log
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    def start(self) -> Daphne:
        bin_dir = Path(sys.executable).parent
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(bin_dir / "daphne"), *daphne_flags(), "-b", "127.0.0.1",
                 "-p", str(self.port), "config.asgi:application"],
                env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _wait_for_port(self.port, self.process, self.log)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def prepare(workdir: Path, env: dict[str, str]) -> None:
    """Migrate a fresh database and create the login."""
    python = str(Path(sys.executable).parent / "python")
    manage = [python, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput"], env=env, cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    subprocess.run(
        [*manage, "createsuperuser", "--noinput", "--username", USERNAME,
         "--email", "alice@example.org"],
        env=env, cwd=ROOT, check=True, capture_output=True,
    )  # fmt: skip


@contextlib.contextmanager
def serve(workdir: Path, *, model_delay: float = 0.2, **extra_env: str) -> Iterator[AppServer]:
    """Migrate a fresh database, create the login, start the fakes and daphne; stop them all."""
    claude = FakeAnthropic(delay=model_delay).start()
    exa = FakeExa(delay=0.05).start()
    server: Daphne | None = None
    log = workdir / "daphne.log"
    try:
        env = _env(workdir, claude, exa, **extra_env)
        prepare(workdir, env)
        server = Daphne(env, log).start()
        url = f"http://127.0.0.1:{server.port}"
        yield AppServer(url=url, claude=claude, exa=exa, log=log, daphne=server)
    finally:
        if server is not None:
            server.stop()
        exa.stop()
        claude.stop()


def main() -> None:
    # Stop cleanly (daphne too) on `kill PID` as on Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp), model_delay=0.5) as app:
        print(f"Deep Think on {app.url}/  (log in as {USERNAME} / {PASSWORD})", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)


if __name__ == "__main__":
    main()
