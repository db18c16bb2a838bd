"""The fake Exa server itself: what the real client and the CLI see."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from fakes.exa_server import FakeExa

ROOT = Path(__file__).resolve().parents[2]


def test_contents_answers_each_url_with_a_status():
    with FakeExa() as fake:
        response = httpx.post(
            f"{fake.base_url}/contents",
            json={"urls": ["https://example.org/a-b"], "text": True},
            headers={"x-api-key": fake.api_key},
        )
    body = response.json()
    assert response.status_code == 200
    assert body["results"][0]["text"].startswith("Full text of https://example.org/a-b")
    assert body["statuses"] == [{"id": "https://example.org/a-b", "status": "success"}]


def test_errors_have_exas_shape():
    with FakeExa() as fake:
        fake.fail_next(402)
        response = httpx.post(
            f"{fake.base_url}/search", json={"query": "x"}, headers={"x-api-key": fake.api_key}
        )
    assert response.status_code == 402
    assert response.json()["tag"] == "NO_MORE_CREDITS" and response.json()["requestId"]


def test_it_runs_as_a_module():
    command = [sys.executable, "-m", "fakes.exa_server", "--port", "0", "--quiet"]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("Fake Exa API listening on http://127.0.0.1:")
            base_url = line.rsplit(" ", 1)[-1].strip()
            response = httpx.post(
                f"{base_url}/search", json={"query": "tides"}, headers={"x-api-key": "exa-test-key"}
            )
        finally:
            process.terminate()
    assert response.status_code == 200 and response.json()["results"]
