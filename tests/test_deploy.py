"""The team deployment as deploy/ has it, run from those files (tests/production_stack.py):
nginx in front of daphne with DEBUG off and two workers on PostgreSQL and Redis. Also the
systemd units (systemd-analyze verify), the Caddyfile (caddy validate) and the script's
daphne flags."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.anthropic_server import FakeAnthropic
from tests.browser.app_server import daphne_flags, free_port
from tests.helpers import services_available
from tests.production_stack import (
    ADMIN,
    DEPLOY,
    ROOT,
    Stack,
    nginx_binary,
    production_stack,
    start_processes,
)

HASHED_STATIC = re.compile(r'"(/static/[^"]+\.[0-9a-f]{12}\.(?:css|js))"')
YEAR = "public, max-age=31536000, immutable"


def test_the_systemd_units_pass_systemd_analyze_verify(tmp_path: Path):
    """As installed: /srv/deepthink is where the checkout is (the commands must exist)."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    for unit in (DEPLOY / "systemd").iterdir():
        text = unit.read_text().replace("/srv/deepthink", str(ROOT))
        (tmp_path / unit.name).write_text(text)
    units = ["deepthink-web.service", "deepthink-worker@1.service", "deepthink.target"]
    result = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / unit) for unit in units)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # Unknown keys and bad values are only warned about: any output is a failure.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), (
        result.stdout + result.stderr
    )


def test_the_units_run_the_scripts_commands():
    """The test below runs `run-production.sh prepare|web|worker`: so do the units."""
    web = (DEPLOY / "systemd" / "deepthink-web.service").read_text()
    worker = (DEPLOY / "systemd" / "deepthink-worker@.service").read_text()
    script = "/srv/deepthink/deploy/run-production.sh"
    assert f"ExecStartPre={script} prepare\n" in web and f"ExecStart={script} web\n" in web
    assert f"ExecStart={script} worker\n" in worker
    for unit in (web, worker):
        assert "EnvironmentFile=/etc/deepthink/deepthink.env\n" in unit
        assert "KillSignal=SIGTERM\n" in unit and "Restart=" in unit


def test_the_caddyfile_is_valid(tmp_path: Path):
    if shutil.which("caddy") is None:
        pytest.skip("caddy is not installed")
    result = subprocess.run(
        ["caddy", "validate", "--adapter", "caddyfile", "--config", str(DEPLOY / "Caddyfile")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Valid configuration" in result.stdout + result.stderr


def test_the_caddyfile_serves_static_files_with_their_caching(tmp_path: Path):
    """Its static part as written, on a local port over HTTP (Caddy's TLS needs a real
    name): hashed names a year, others an hour, the compressed copy when asked."""
    if shutil.which("caddy") is None:
        pytest.skip("caddy is not installed")
    static = tmp_path / "staticfiles" / "thinking"
    static.mkdir(parents=True)
    (static / "app.0123456789ab.css").write_text("body { color: black; }\n" * 50)
    subprocess.run(["gzip", "-k", str(static / "app.0123456789ab.css")], check=True)
    (static / "app.css").write_text("body { color: black; }\n")
    port = free_port()
    config = (DEPLOY / "Caddyfile").read_text()
    for old, new in (
        ("deepthink.example.org {", f"http://127.0.0.1:{port} {{"),
        ("/srv/deepthink/staticfiles", str(tmp_path / "staticfiles")),
    ):
        assert old in config
        config = config.replace(old, new)
    (tmp_path / "Caddyfile").write_text("{\n\tadmin off\n}\n" + config)
    caddy = subprocess.Popen(
        ["caddy", "run", "--adapter", "caddyfile", "--config", str(tmp_path / "Caddyfile")],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/static/thinking"
        hashed = until(lambda: _get_or_none(f"{url}/app.0123456789ab.css"))
        assert hashed.status_code == 200 and hashed.headers["cache-control"] == YEAR
        assert hashed.headers["content-encoding"] == "gzip"
        plain = httpx.get(f"{url}/app.css")
        assert plain.headers["cache-control"] == "public, max-age=3600"
    finally:
        caddy.terminate()
        caddy.wait(timeout=30)


def _get_or_none(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, headers={"Accept-Encoding": "gzip"})
    except httpx.TransportError:
        return None


def test_the_production_web_process_has_the_makefiles_daphne_flags():
    """`make run` and the tests serve with DAPHNE_FLAGS; production must not differ."""
    script = (DEPLOY / "run-production.sh").read_text()
    [flags] = re.findall(r"local flags=\(([^)]*)\)", script)
    assert flags.split() == daphne_flags()


# --- the stack --------------------------------------------------------------------------


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    ok, reason = services_available()
    if not ok:
        pytest.skip(reason)
    if nginx_binary() is None:
        pytest.skip("needs Debian's nginx (apt-get install nginx; .ci/run installs it)")
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl, for the proxy's certificate")
    claude = FakeAnthropic(delay=0.2).start()
    try:
        with production_stack(tmp_path, claude, DEEPTHINK_LOGIN_ATTEMPTS="2") as running:
            try:
                yield running
            finally:
                print(running.tails())
    finally:
        claude.stop()


def login(client: httpx.Client, stack: Stack, password: str, **headers: str) -> httpx.Response:
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    return client.post(
        "/accounts/login/",
        data={"username": ADMIN, "password": password},
        headers={
            "X-CSRFToken": client.cookies["csrftoken"],
            "Referer": f"{stack.url}/accounts/login/",
            **headers,
        },
    )


def until(predicate: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


@pytest.mark.services
@pytest.mark.timeout(600)
def test_the_deploy_folder_runs_a_team_deployment_behind_nginx(stack: Stack):
    # Prepare (migrate, collect static files, the first admin) twice: the second changes
    # nothing, as each start of the web unit runs it.
    first = stack.run_script("prepare")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "static files copied" in first.stdout
    again = stack.run_script("prepare")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"Admin {ADMIN} exists: left as it is." in again.stdout
    start_processes(stack)

    with stack.client() as browser:
        assert until(lambda: browser.get("/healthz").status_code == 200)

        # Plain HTTP is sent to HTTPS.
        plain = httpx.get(f"http://127.0.0.1:{stack.http_port}/sessions/", timeout=30)
        assert plain.status_code == 301
        assert plain.headers["location"] == "https://127.0.0.1/sessions/"

        # Static files: the page links hashed names, which answer with a year's caching
        # (compressed where the browser takes it); WhiteNoise, asked directly, too.
        page = browser.get("/accounts/login/")
        assert page.status_code == 200
        assets = HASHED_STATIC.findall(page.text)
        assert any(a.endswith(".css") for a in assets) and any(a.endswith(".js") for a in assets)
        for asset in assets:
            answer = browser.get(asset, headers={"Accept-Encoding": "gzip"})
            assert answer.status_code == 200 and answer.content, asset
            assert answer.headers["cache-control"] == YEAR, asset
            if asset.endswith(".css"):  # collectstatic's .gz copy
                assert answer.headers["content-encoding"] == "gzip"
        direct = httpx.get(
            f"http://127.0.0.1:{stack.app_port}{assets[0]}",
            headers={"Host": "127.0.0.1", "X-Forwarded-Proto": "https"},
        )
        assert direct.status_code == 200 and "immutable" in direct.headers["cache-control"]

    # The client's address is the one nginx saw, not what the client wrote in
    # X-Forwarded-For: failed logins from 127.0.0.2 under changing spoofed addresses all
    # count against 127.0.0.2 (two allowed), while 127.0.0.3 logs in.
    with stack.client("127.0.0.2") as guesser, stack.client("127.0.0.3") as colleague:
        for n in (1, 2):
            failed = login(guesser, stack, "wrong", **{"X-Forwarded-For": f"203.0.113.{n}"})
            assert failed.status_code == 200
        refused = login(guesser, stack, stack.password, **{"X-Forwarded-For": "198.51.100.7"})
        assert refused.status_code == 429, "spoofing a new address does not start afresh"
        assert login(colleague, stack, stack.password).status_code == 302

        # A session's live updates arrive over the WebSocket through nginx.
        session_id = start_session(colleague, stack)
        frames = watch(colleague, stack, session_id)
        assert any('id="thought-' in frame for frame in frames[1:]), "thoughts came live"
        assert "status-completed" in frames[-1]
    web_log = stack.log_text("web")
    assert "127.0.0.2" in web_log and "127.0.0.3" in web_log, "daphne's access log"
    assert "203.0.113." not in web_log and "198.51.100.7" not in web_log

    # Healthy while the workers run; 503 naming them once both have stopped (SIGTERM, as
    # systemd stops them: they exit cleanly).
    with stack.client() as browser:
        assert browser.get("/healthz").status_code == 200
        before = len(stack.log_text("web").splitlines())
        assert stack.stop("worker-1") == 0 and stack.stop("worker-2") == 0
        for _ in range(3):  # a load balancer probing
            answer = browser.get("/healthz")
            assert answer.status_code == 503
            assert answer.json()["failing"] == ["worker"]
    new_lines = stack.log_text("web").splitlines()[before:]
    failing = [line for line in new_lines if "Health: worker failing" in line]
    assert len(failing) == 1, new_lines
    for name in ("web", "worker-1", "worker-2"):
        assert "Traceback" not in stack.log_text(name), stack.log_text(name)


def start_session(client: httpx.Client, stack: Stack) -> uuid.UUID:
    response = client.post(
        "/sessions/new/",
        data={"question": "Why is the sky blue?", "minutes": "0.15", "synthesis_minutes": "0.05"},
        headers={"X-CSRFToken": client.cookies["csrftoken"], "Referer": f"{stack.url}/"},
    )
    assert response.status_code == 302, response.text[:500]
    return uuid.UUID(re.search(r"/sessions/([0-9a-f-]{36})/", response.headers["location"])[1])


def watch(client: httpx.Client, stack: Stack, session_id: uuid.UUID) -> list[str]:
    """Frames from the session's live page, until the session completes."""
    websockets = pytest.importorskip("websockets.sync.client")
    frames: list[str] = []
    url = stack.url.replace("https:", "wss:") + f"/ws/sessions/{session_id}/"
    with websockets.connect(
        url,
        ssl=stack.tls(),
        origin=stack.url,
        additional_headers={"Cookie": f"sessionid={client.cookies['sessionid']}"},
        max_size=None,
        proxy=None,
        open_timeout=30,
    ) as socket:
        deadline = time.monotonic() + 120
        while not frames or "status-completed" not in frames[-1]:
            assert time.monotonic() < deadline, f"{len(frames)} frames, no end"
            frames.append(str(socket.recv(timeout=60)))
    return frames
