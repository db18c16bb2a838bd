"""The production stack as deploy/ describes it, started on this machine from those files.

- Settings: deploy/.env.example with its required values filled in (a fresh PostgreSQL
  database, REDIS_URL, a generated SECRET_KEY, the admin's password, the fake Claude
  server) and a few test-only lines appended (ports, a Redis prefix of its own, short
  worker ticks).
- `deploy/run-production.sh prepare`, then `web` and two `worker` processes, exactly as the
  systemd units in deploy/systemd/ run them.
- Debian's nginx with the site deploy/nginx/deepthink.conf, its placeholders replaced: the
  server name becomes 127.0.0.1, ports 443 and 80 become free ports on 127.0.0.1, the
  certificate a self-signed one for 127.0.0.1 (made here with openssl), the upstream
  daphne's port, the static folder this stack's STATIC_ROOT. The site's TLS server is the
  one tested (the port-80 server only redirects). nginx runs as a child process, not a
  daemon, with its prefix, pid file and temporary folders in the stack's folder.

By hand, with DATABASE_URL and REDIS_URL set (the URL and the login are printed)::

    .venv/bin/python -m tests.production_stack
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from fakes.anthropic_server import FakeAnthropic
from tests.browser.app_server import free_port

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
SCRIPT = DEPLOY / "run-production.sh"
ADMIN = "admin"


def nginx_binary() -> str | None:
    """Debian's nginx (in /usr/sbin, which is not on every PATH)."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")


def _replace(text: str, replacements: dict[str, str]) -> str:
    """Each placeholder must be there: a site file that changed shape fails loudly here
    rather than quietly testing something else."""
    for old, new in replacements.items():
        if old not in text:
            raise AssertionError(f"deploy/nginx/deepthink.conf no longer has {old!r}")
        text = text.replace(old, new)
    return text


def settings_from_example(values: dict[str, str], extra: dict[str, str]) -> str:
    """deploy/.env.example with `values` filled in, then `extra`. Every variable its
    "Required" section leaves empty must be among `values`."""
    lines, section, required = [], "", set()
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        if line.startswith("# --- "):
            section = line
        match = re.fullmatch(r"([A-Z][A-Z0-9_]*)=(.*)", line)
        if match:
            name = match[1]
            if "Required" in section and not match[2]:
                required.add(name)
            if name in values:
                line = f"{name}={values[name]}"
        lines.append(line)
    if missing := required - set(values):
        raise AssertionError(f"the test gives no value to required {sorted(missing)}")
    lines += ["", "# --- This test's own ---", *(f"{k}={v}" for k, v in extra.items())]
    return "\n".join(lines) + "\n"


def _on_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def _server(url: str, *statements: str) -> None:
    """Run statements on the server of `url`, from its maintenance database."""
    import psycopg

    with psycopg.connect(_on_database(url, "postgres"), autocommit=True, connect_timeout=10) as c:
        for statement in statements:
            c.execute(statement)  # type: ignore[arg-type]


def _self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def _wait_for_port(port: int, process: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode}:\n{log.read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {timeout} s:\n{log.read_text()}")


@dataclass
class Stack:
    folder: Path
    env_file: Path
    app_port: int
    https_port: int
    http_port: int
    static_root: Path
    certificate: Path
    password: str
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.https_port}"

    def log(self, name: str) -> Path:
        return self.folder / f"{name}.log"

    def log_text(self, name: str) -> str:
        return self.log(name).read_text(errors="replace")

    def _environment(self) -> dict[str, str]:
        """Only what a systemd unit would add to the settings file: nothing of the test's
        own environment (its DATABASE_URL, DEBUG, ...) leaks in."""
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            "LANG": "C.UTF-8",
            "DEEPTHINK_ENV_FILE": str(self.env_file),
            "VENV": sys.prefix,
            "PYTHONUNBUFFERED": "1",
        }

    def run_script(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), command], env=self._environment(), capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip

    def start(self, name: str, command: str) -> subprocess.Popen:
        with self.log(name).open("ab") as out:
            process = subprocess.Popen(
                [str(SCRIPT), command], env=self._environment(), stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.processes[name] = process
        return process

    def start_web(self) -> None:
        _wait_for_port(self.app_port, self.start("web", "web"), self.log("web"))

    def start_workers(self, *names: str) -> None:
        """Started together; back once each takes doorbells."""
        for name in names:
            self.start(name, "worker")
        deadline = time.monotonic() + 120
        for name in names:
            while "listening on thinking" not in self.log_text(name):
                if self.processes[name].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start:\n{self.log_text(name)}")
                time.sleep(0.2)

    def start_nginx(self, binary: str) -> None:
        key = self.certificate.with_name("key.pem")
        site = _replace(
            (DEPLOY / "nginx" / "deepthink.conf").read_text(),
            {
                "listen [::]:80;": "",
                "listen [::]:443 ssl http2;": "",
                "listen 80;": f"listen 127.0.0.1:{self.http_port};",
                "listen 443 ssl http2;": f"listen 127.0.0.1:{self.https_port} ssl http2;",
                "/etc/letsencrypt/live/deepthink.example.org/fullchain.pem": str(self.certificate),
                "/etc/letsencrypt/live/deepthink.example.org/privkey.pem": str(key),
                "server_name deepthink.example.org;": "server_name 127.0.0.1;",
                "server 127.0.0.1:8000;": f"server 127.0.0.1:{self.app_port};",
                "/srv/deepthink/staticfiles/": f"{self.static_root}/",
                "root /var/www/html;": f"root {self.folder};",
            },
        )
        nginx = self.folder / "nginx"
        for temporary in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (nginx / temporary).mkdir(parents=True, exist_ok=True)
        (nginx / "deepthink.conf").write_text(site)
        # Run as root (CI), nginx's workers would be `nobody`, who cannot read this folder.
        user = "user root root;" if os.geteuid() == 0 else ""
        (nginx / "nginx.conf").write_text(
            f"""daemon off;
{user}
worker_processes 1;
pid {nginx}/nginx.pid;
error_log stderr notice;
events {{ worker_connections 256; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log {self.folder}/nginx-access.log;
    client_body_temp_path {nginx}/body;
    proxy_temp_path {nginx}/proxy;
    fastcgi_temp_path {nginx}/fastcgi;
    uwsgi_temp_path {nginx}/uwsgi;
    scgi_temp_path {nginx}/scgi;
    include {nginx}/deepthink.conf;
}}
"""
        )
        with self.log("nginx").open("ab") as out:
            process = subprocess.Popen(
                [binary, "-p", f"{nginx}/", "-c", str(nginx / "nginx.conf"), "-e", "stderr"],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.processes["nginx"] = process
        _wait_for_port(self.https_port, process, self.log("nginx"))

    def stop(self, name: str, timeout: float = 30) -> int:
        """SIGTERM, as systemd stops a unit; the exit status."""
        process = self.processes[name]
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode

    def tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certificate))

    def client(self, source: str = "127.0.0.1") -> httpx.Client:
        """A browser-like client at the address `source` (any of 127.0.0.0/8 is this
        machine), through nginx."""
        transport = httpx.HTTPTransport(verify=self.tls(), local_address=source)
        return httpx.Client(base_url=self.url, transport=transport, timeout=30)

    def tails(self) -> str:
        return "\n".join(
            f"--- the end of {path.name}:\n" + "\n".join(path.read_text().splitlines()[-40:])
            for path in sorted(self.folder.glob("*.log"))
        )


@contextlib.contextmanager
def production_stack(folder: Path, claude: FakeAnthropic, **extra: str) -> Iterator[Stack]:
    """The stack, prepared and started; everything stopped and the database dropped after.
    Needs DATABASE_URL (a server where databases may be created), REDIS_URL, nginx and
    openssl."""
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx is not installed")
    server = os.environ["DATABASE_URL"]
    name = ((urlsplit(server).path.lstrip("/") or "deepthink") + f"_deploy_{os.getpid()}")[:63]
    certificate, _ = _self_signed_certificate(folder)
    stack = Stack(
        folder=folder,
        env_file=folder / "deepthink.env",
        app_port=free_port(),
        https_port=free_port(),
        http_port=free_port(),
        static_root=folder / "staticfiles",
        certificate=certificate,
        password=secrets.token_urlsafe(16),
    )
    required = {
        "SECRET_KEY": f"'{secrets.token_urlsafe(50)}'",  # quoted, as systemd allows
        "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": _on_database(server, name),
        "REDIS_URL": os.environ["REDIS_URL"],
        "ANTHROPIC_API_KEY": "test-key",
        "DEEPTHINK_BASE_URL": stack.url,
        "DJANGO_SUPERUSER_PASSWORD": stack.password,
    }
    own = {
        "ANTHROPIC_BASE_URL": claude.base_url,
        "CHANNELS_PREFIX": f"deploy-{os.getpid()}-{secrets.token_hex(3)}",
        "STATIC_ROOT": str(stack.static_root),
        "DEEPTHINK_PORT": str(stack.app_port),
        "DEEPTHINK_HEARTBEAT_SECONDS": "0.5",
        "DEEPTHINK_SWEEP_SECONDS": "0.5",
        # Two cores shared by several people: hop threads kept few.
        "DEEPTHINK_DB_THREADS": "2",
        "LOG_LEVEL": "INFO",
        **extra,
    }
    stack.env_file.write_text(settings_from_example(required, own))
    _server(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
    try:
        yield stack
    finally:
        for process_name in reversed(list(stack.processes)):
            stack.stop(process_name)
        with contextlib.suppress(Exception):
            _server(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_processes(stack: Stack, workers: int = 2) -> None:
    """The web process, the workers and the proxy, once prepared."""
    stack.start_web()
    stack.start_workers(*(f"worker-{n}" for n in range(1, workers + 1)))
    binary = nginx_binary()
    assert binary is not None
    stack.start_nginx(binary)


def start_everything(stack: Stack, workers: int = 2) -> None:
    """What a deploy runs (README, "Deploy for a team"): prepare, web, workers, proxy."""
    prepared = stack.run_script("prepare")
    if prepared.returncode != 0:
        raise RuntimeError(prepared.stdout + prepared.stderr)
    start_processes(stack, workers)


def main() -> None:
    def stop(*_: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up is not cut short
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    claude = FakeAnthropic(delay=0.5).start()
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            production_stack(Path(tmp), claude) as stack,
        ):
            start_everything(stack)
            print(f"Deep Think on {stack.url}/ (self-signed: {stack.certificate})")
            print(f"  log in as {ADMIN} / {stack.password}; logs in {tmp}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    finally:
        claude.stop()


if __name__ == "__main__":
    main()
