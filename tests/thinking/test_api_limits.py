"""API edges found in security round two (issue 21)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from accounts.tokens import create_token

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("debug", [False, True])
def test_a_body_over_the_upload_limit_gets_a_json_413(alice: Any, settings: Any, debug: bool):
    settings.DEBUG = debug
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    client = Client(
        headers={"Authorization": f"Bearer {create_token(alice, 's')[1]}"},
        raise_request_exception=False,
    )
    response = client.post(
        "/api/sessions", {"question": "x" * 5000, "minutes": 1}, content_type="application/json"
    )
    assert response.status_code == 413
    assert response["Content-Type"].startswith("application/json")
    assert "larger than 1000 bytes" in response.json()["detail"]
