"""Files are read in a process of their own: a slow one holds up no page of the server, and
the parsers' warnings reach no terminal (they are the file's notes)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.app_server import PASSWORD, ROOT, USERNAME, AppServer, serve
from tests.research.pdfs import bomb_pdf, make_pdf, repaired_pdf, slow_pdf

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def logged_in(url: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=60)
    token = CSRF.search(client.get("/accounts/login/").text)
    assert token, "the login page has a form"
    response = client.post(
        "/accounts/login/",
        data={"username": USERNAME, "password": PASSWORD, "csrfmiddlewaretoken": token[1]},
    )
    assert response.status_code == 302, response.text
    return client


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    """daphne as `make run` serves, on a throwaway SQLite file (with a login)."""
    with serve(tmp_path_factory.mktemp("app"), DEEPTHINK_KNOWLEDGE_READ_SECONDS="6") as server:
        yield server


def test_pages_answer_at_once_while_an_upload_is_being_read(app: AppServer):
    uploader, reader = logged_in(app.url), logged_in(app.url)
    token = CSRF.search(uploader.get("/knowledge/").text)
    assert token
    answer: list[httpx.Response] = []
    slow = slow_pdf(1_000_000)  # 6 KB that pypdf reads for a minute

    def upload() -> None:
        answer.append(
            uploader.post(
                "/knowledge/upload/",
                data={"csrfmiddlewaretoken": token[1]},
                files={"file": ("slow.pdf", slow, "application/pdf")},
            )
        )

    anonymous = httpx.Client(base_url=app.url)
    pages = [
        (anonymous, "/accounts/login/"),
        (reader, "/knowledge/"),
        (reader, "/"),
        (reader, "/knowledge/?q=reef"),
    ]
    for client, url in pages:  # each page once first: its templates compiled, as in use
        assert client.get(url).status_code == 200, url

    uploading = threading.Thread(target=upload)
    uploading.start()
    time.sleep(1.0)  # the file has reached the server, and its reader has started
    waits = []
    for client, url in pages:
        asked = time.monotonic()
        response = client.get(url)
        waits.append(time.monotonic() - asked)
        assert response.status_code == 200, (url, response.status_code)
    still_reading = uploading.is_alive()
    uploading.join(60)
    print(f"page waits during the upload: {[round(w, 3) for w in waits]} s")

    assert still_reading, "the pages were asked for while the file was being read"
    assert max(waits) < 1, waits  # they took minutes while a regex held the interpreter
    [response] = answer
    # Refused, not a 500. (Which of the reader's limits stops it can vary with the machine's
    # load; tests/research/test_hostile_documents.py checks each limit's own wording.)
    assert response.status_code == 422


def test_the_import_command_says_what_it_did_and_prints_no_parser_noise(
    app: AppServer, tmp_path: Path
):
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")
    }
    env["SQLITE_PATH"] = str(app.log.parent / "browser.sqlite3")  # the served app's database
    folder = tmp_path / "documents"
    folder.mkdir()
    (folder / "notes.md").write_text("# Field notes\n\nThe reef was pale in March.\n")
    (folder / "repaired.pdf").write_bytes(repaired_pdf())
    (folder / "bomb.pdf").write_bytes(bomb_pdf())
    (folder / "cut.pdf").write_bytes(make_pdf(["Some text."])[:300])

    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "import_knowledge", str(folder),
         "--owner", USERNAME],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == "  new        notes.md"
    assert out[1] == "  new        repaired.pdf"
    assert out[2].startswith("               note: The reader warned: ")
    assert out[-1].endswith("2 new, 0 updated, 0 unchanged, 2 skipped, 0 already imported.")
    # Each refused file once, with its reason: no traceback, no warning of a parser.
    assert result.stderr.splitlines() == [
        "  skipped    bomb.pdf (too large when decompressed)",
        "  skipped    cut.pdf (damaged or unreadable PDF)",
    ]
