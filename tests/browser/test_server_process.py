"""The web process as `make run` starts it (daphne, its flags from the Makefile, embedded
defaults, the in-process worker), driven from outside like a server: frame limits in both
directions, SIGTERM, and a restart after kill -9 that nobody visits."""

from __future__ import annotations

import asyncio
import re
import signal
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.browser.app_server import PASSWORD, USERNAME, AppServer, serve

websockets = pytest.importorskip("websockets")

pytestmark = pytest.mark.timeout(180)

LEASE = 10  # seconds; daphne alone takes ~5 s to exit on this (loaded) machine


def logged_in(app: AppServer) -> requests.Session:
    http = requests.Session()
    login = f"{app.url}/accounts/login/"
    http.get(login)
    response = http.post(
        login,
        data={"username": USERNAME, "password": PASSWORD},
        headers={"X-CSRFToken": http.cookies["csrftoken"], "Referer": login},
    )
    assert response.ok and "sessionid" in http.cookies
    return http


def start_session(app: AppServer, http: requests.Session, *, minutes: float) -> uuid.UUID:
    response = http.post(
        f"{app.url}/sessions/new/",
        data={"question": "Why is the sky blue?", "minutes": minutes, "synthesis_minutes": 0.05},
        headers={"X-CSRFToken": http.cookies["csrftoken"], "Referer": f"{app.url}/"},
        allow_redirects=False,
    )
    assert response.status_code == 302, response.text[:500]
    return uuid.UUID(re.search(r"/sessions/([0-9a-f-]{36})/", response.headers["Location"])[1])


class Database:
    """The server's SQLite file, read (and in one test written) as the server stores it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def query(self, sql: str, *args: Any) -> list[tuple]:
        with sqlite3.connect(self.path, timeout=10) as db:
            return db.execute(sql, args).fetchall()

    def session(self, session_id: uuid.UUID) -> dict[str, Any]:
        row = self.query(
            "SELECT status, worker_id, (SELECT count(*) FROM thinking_thought t"
            " WHERE t.session_id = s.id) FROM thinking_thinkingsession s WHERE id = ?",
            session_id.hex,
        )[0]
        return {"status": row[0], "worker": row[1], "thoughts": row[2]}


def wait_for(predicate: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


@pytest.fixture
def app(tmp_path: Path) -> Iterator[AppServer]:
    # A short lease, so a dead process's sessions are free to take within seconds.
    with serve(
        tmp_path,
        model_delay=0.3,
        DEEPTHINK_LEASE_SECONDS=str(LEASE),
        DEEPTHINK_HEARTBEAT_SECONDS="1",
    ) as server:
        yield server
        print(f"--- the end of {server.log}:", *server.log.read_text().splitlines()[-30:], sep="\n")


def socket_url(app: AppServer, session_id: uuid.UUID, query: str = "") -> str:
    return app.url.replace("http:", "ws:") + f"/ws/sessions/{session_id}/{query}"


def connect(app: AppServer, http: requests.Session, session_id: uuid.UUID, query: str = "") -> Any:
    return websockets.connect(
        socket_url(app, session_id, query),
        origin=app.url,
        additional_headers={"Cookie": f"sessionid={http.cookies['sessionid']}"},
        max_size=None,
    )


def test_client_frames_are_capped_but_not_what_the_server_sends(app: AppServer):
    http = logged_in(app)
    session_id = start_session(app, http, minutes=0.05)
    db = Database(Path(app.log.parent / "browser.sqlite3"))
    wait_for(lambda: db.session(session_id)["status"] == "completed")
    # One very long row (a long answer would do the same): it goes in one message, bigger
    # than the 64 KiB cap the old `make run` put on every message, in both directions.
    huge = "A long paragraph of careful reasoning. " * 4000
    db.query(
        "INSERT INTO thinking_thought (session_id, sequence, cycle, text, type, parts,"
        " reasoning, confidence, time_offset_seconds, created_at, truncated)"
        " VALUES (?, 9999, 9999, ?, 'insight', '{}', '', 0.5, 1, '2026-01-01 00:00:00', 0)",
        session_id.hex,
        huge,
    )

    async def scenario() -> None:
        async with connect(app, http, session_id, "?rev=0&t=9998&s=999999&q=999999&y=999") as ws:
            received = ""
            while "thought-9999" not in received:
                received = await asyncio.wait_for(ws.recv(), 10)
            assert len(received.encode()) > 150_000
        # A client frame over the consumer's limit: closed with a 4xxx code, not a traceback.
        async with connect(app, http, session_id, "?rev=0") as ws:
            await ws.send("x" * 8000)
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
            assert closed.value.rcvd.code == 4413
        # An unknown path is refused at the handshake.
        with pytest.raises(websockets.InvalidStatus):
            async with websockets.connect(app.url.replace("http:", "ws:") + "/ws/nope/"):
                pass

    asyncio.run(scenario())
    assert "Traceback" not in app.log.read_text()


def test_sigterm_hands_sessions_over_and_the_process_exits(app: AppServer, tmp_path: Path):
    http = logged_in(app)
    session_id = start_session(app, http, minutes=5)
    db = Database(tmp_path / "browser.sqlite3")
    wait_for(lambda: db.session(session_id)["thoughts"] >= 2)
    assert db.session(session_id)["worker"], "the web process runs it"
    assert app.daphne is not None and app.daphne.process is not None
    process = app.daphne.process
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=LEASE)  # within the lease
    assert time.monotonic() - started < LEASE
    log = app.log.read_text()
    assert "handing sessions over" in log and "stopping the server" in log
    row = db.session(session_id)
    assert row["status"] == "thinking" and row["worker"] == "", "released for another process"


def test_an_interrupted_session_resumes_after_a_restart_with_nobody_visiting(
    app: AppServer, tmp_path: Path
):
    http = logged_in(app)
    session_id = start_session(app, http, minutes=0.4)
    db = Database(tmp_path / "browser.sqlite3")
    wait_for(lambda: db.session(session_id)["thoughts"] >= 2)
    assert app.daphne is not None and app.daphne.process is not None
    app.daphne.process.kill()  # kill -9: no handover, the lease just stops being renewed
    app.daphne.process.wait()
    before = db.session(session_id)
    assert before["status"] == "thinking" and before["worker"]

    app.daphne.start()  # and then nobody opens a page or calls the API
    resumed = wait_for(lambda: db.session(session_id)["worker"] not in ("", before["worker"]))
    assert resumed
    wait_for(lambda: db.session(session_id)["status"] == "completed", timeout=90)
    assert db.session(session_id)["thoughts"] > before["thoughts"]
    log = app.log.read_text()
    assert f"/sessions/{session_id}/" not in log.split("Listening on", 2)[-1], "no visit"
