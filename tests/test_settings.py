from __future__ import annotations

import ast
import secrets
import subprocess
from pathlib import Path

import pytest

from config.production import DEVELOPMENT_SECRET_KEY
from tests.helpers import in_fresh_python


def load_settings(show: str = "settings.DEBUG", **env: str) -> subprocess.CompletedProcess[str]:
    code = f"import django; django.setup(); from django.conf import settings; print({show})"
    leave_out = ("DEEPTHINK_", "DATABASE_", "REDIS_URL", "DEBUG", "SECRET_KEY")
    return in_fresh_python(code, leave_out=leave_out, **env)


def run_on_database(code: str, url: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh process whose settings come from the environment, on `url`."""
    return in_fresh_python(code, DATABASE_URL=url)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEEPTHINK_WORKER_CAPACITY": "lots"}, "DEEPTHINK_WORKER_CAPACITY must be a whole number"),
        ({"DEEPTHINK_LEASE_SECONDS": "0.1"}, "DEEPTHINK_LEASE_SECONDS must be at least 1.0"),
        ({"DEBUG": "perhaps"}, "DEBUG must be a boolean"),
        ({"DEEPTHINK_DB_THREADS": "0"}, "DEEPTHINK_DB_THREADS must be at least 1"),
        ({"DEBUG": "0"}, "SECRET_KEY must be set when DEBUG is off"),
        ({"DEEPTHINK_FORMAT": "fancy"}, "DEEPTHINK_FORMAT must be 'standard' or 'enhanced'"),
        ({"DEEPTHINK_PROVIDER": "gemini"}, "DEEPTHINK_PROVIDER must be anthropic or openai"),
        ({"DEEPTHINK_PROVIDER": "openai"}, "DEEPTHINK_PROVIDER=openai needs DEEPTHINK_MODEL"),
        ({"LOG_LEVEL": "chatty"}, "LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL"),
        (
            {"DEEPTHINK_WEB_SEARCH": "bing"},
            "DEEPTHINK_WEB_SEARCH: unknown provider 'bing' (exa, searxng or tavily)",
        ),
        (
            {"DEEPTHINK_WEB_SEARCH": "exa,searxng", "EXA_API_KEY": "k"},
            "DEEPTHINK_WEB_SEARCH names searxng, which needs SEARXNG_URL",
        ),
        (
            {"DEEPTHINK_HEARTBEAT_SECONDS": "40"},
            "DEEPTHINK_HEARTBEAT_SECONDS must be shorter than DEEPTHINK_LEASE_SECONDS",
        ),
    ],
)
def test_a_malformed_setting_stops_start_up_naming_the_variable(env: dict, message: str):
    result = load_settings(**env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and message in result.stderr


def test_no_environment_at_all_gives_the_embedded_defaults():
    result = load_settings()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


def load_production(show: str = "settings.DEBUG", **env: str) -> subprocess.CompletedProcess[str]:
    """Settings as a team deployment gives them (deploy/.env.example), changed by `env`."""
    code = f"import django; django.setup(); from django.conf import settings; print({show})"
    leave_out = ("DEEPTHINK_", "DATABASE_", "REDIS_URL", "DEBUG", "SECRET_KEY", "ALLOWED_HOSTS")
    leave_out += ("SESSION_COOKIE_", "CSRF_COOKIE_", "SECURE_", "STATIC_ROOT")
    production = {
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "deepthink.example.org",
    }
    return in_fresh_python(code, leave_out=leave_out, **{**production, **env})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SECRET_KEY": ""}, "SECRET_KEY must be set when DEBUG is off"),
        ({"SECRET_KEY": DEVELOPMENT_SECRET_KEY}, "SECRET_KEY is the development key"),
        ({"SECRET_KEY": "django-insecure-" + "k" * 60}, "SECRET_KEY is the development key"),
        ({"SECRET_KEY": "hunter2"}, "SECRET_KEY is too short or too plain"),
        ({"SECRET_KEY": "ab" * 40}, "SECRET_KEY is too short or too plain"),
        ({"ALLOWED_HOSTS": ""}, "ALLOWED_HOSTS must name the host names people use"),
        ({"ALLOWED_HOSTS": " , "}, "ALLOWED_HOSTS must name the host names people use"),
        ({"SESSION_COOKIE_SECURE": "0"}, "SESSION_COOKIE_SECURE is off"),
        ({"CSRF_COOKIE_SECURE": "false"}, "CSRF_COOKIE_SECURE is off"),
    ],
)
def test_production_refuses_to_start_on_development_defaults(env: dict, message: str):
    result = load_production(**env)
    assert result.returncode != 0
    assert "ImproperlyConfigured: DEBUG is off, so: " in result.stderr
    assert message in result.stderr


def test_every_missing_setting_is_named_in_one_go():
    """An operator fixes them all at once, not one per start."""
    result = load_production(SECRET_KEY="", ALLOWED_HOSTS="", SESSION_COOKIE_SECURE="0")
    assert result.returncode != 0
    for variable in ("SECRET_KEY", "ALLOWED_HOSTS", "SESSION_COOKIE_SECURE"):
        assert f"{variable} " in result.stderr


def test_a_team_deployment_starts_and_serves_hashed_static_files():
    show = (
        "[settings.DEBUG, settings.ALLOWED_HOSTS, settings.STORAGES['staticfiles']['BACKEND'],"
        " settings.SECRET_KEY_FALLBACKS]"
    )
    result = load_production(show, SECRET_KEY_FALLBACKS="the-key-before, the-one-before-that")
    assert result.returncode == 0, result.stderr
    assert ast.literal_eval(result.stdout) == [
        False,
        ["deepthink.example.org"],
        "whitenoise.storage.CompressedManifestStaticFilesStorage",
        ["the-key-before", "the-one-before-that"],
    ]


def test_make_run_starts_on_the_embedded_defaults_with_debug_on():
    """`make run` sets DEBUG=1 and nothing else: the development key, localhost, cookies
    over plain HTTP and the source folders' static files are fine there."""
    show = (
        "[settings.SECRET_KEY, settings.ALLOWED_HOSTS[0], settings.SESSION_COOKIE_SECURE,"
        " settings.STORAGES['staticfiles']['BACKEND']]"
    )
    result = load_settings(show, DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert ast.literal_eval(result.stdout) == [
        DEVELOPMENT_SECRET_KEY,
        "127.0.0.1",
        False,
        "django.contrib.staticfiles.storage.StaticFilesStorage",
    ]


def test_a_sqlite_database_url_is_the_embedded_database_at_that_path(tmp_path: Path):
    path = tmp_path / "elsewhere.sqlite3"
    code = (
        "import django; django.setup(); from django.db import connection; "
        "from django.conf import settings; connection.ensure_connection(); "
        "print(connection.vendor, settings.DATABASES['default']['NAME'], "
        "settings.DEEPTHINK_DB_THREADS, "
        "connection.cursor().execute('PRAGMA journal_mode').fetchone()[0])"
    )
    result = run_on_database(code, f"sqlite:///{path}")
    assert result.returncode == 0, result.stderr
    # SQLite's own options (one hop thread, WAL), not PostgreSQL's pool.
    assert result.stdout.split() == ["sqlite", str(path), "1", "wal"]


def test_the_embedded_database_keeps_its_connection_across_a_workers_hops(tmp_path: Path):
    # Each hop used to open the file (and run its PRAGMAs) and close it again: ~10 a step.
    code = """
import asyncio, django
django.setup()
from django.db import connection
from django.db.backends.signals import connection_created
from config.hops import db_hop

opened = []
connection_created.connect(lambda **kw: opened.append(1), weak=False)

def hop(n):
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s", [n])
        return cursor.fetchone()[0]

async def main():
    return [await db_hop(hop)(n) for n in range(5)]

print(asyncio.run(main()), len(opened))
"""
    result = run_on_database(code, f"sqlite:///{tmp_path / 'db.sqlite3'}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[0,", "1,", "2,", "3,", "4]", "1"]
