from __future__ import annotations

from typing import Any

import pytest

from accounts.models import Team


@pytest.fixture
def carol(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("carol", password="carol-pass-123")


@pytest.fixture
def lab(alice: Any) -> Team:
    """Alice's team."""
    from accounts import teams

    return teams.create_team(alice, "Lab")
