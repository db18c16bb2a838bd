"""What a deployment with DEBUG off must not start with (config/settings.py raises on it).

Each refusal names the variable to set and why, so an operator fixes all of them in one go
rather than one per start. The development defaults (a key in the source, localhost only,
cookies over plain HTTP) exist only for `make run`.
"""

from __future__ import annotations

# The key `make run` signs with: published in this repository, so worthless as a secret.
DEVELOPMENT_SECRET_KEY = "django-insecure-local-development-key-only-used-while-DEBUG-is-on"  # noqa: S105

# Django's own bar for a key (security.W009): at least this long, with this many characters.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE = 5

HOW_TO_MAKE_A_KEY = "python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"


def refusals(
    *,
    secret_key: str,
    allowed_hosts: list[str],
    session_cookie_secure: bool,
    csrf_cookie_secure: bool,
) -> list[str]:
    """Why these settings must not serve with DEBUG off: one sentence per problem, each
    starting with the variable's name; empty when there is none."""
    problems = []
    if not secret_key:
        problems.append(f"SECRET_KEY must be set when DEBUG is off (make one: {HOW_TO_MAKE_A_KEY})")
    elif secret_key == DEVELOPMENT_SECRET_KEY or secret_key.startswith("django-insecure"):
        problems.append(
            "SECRET_KEY is the development key, which anyone can read in the source: "
            f"set a secret one ({HOW_TO_MAKE_A_KEY})"
        )
    elif len(secret_key) < SECRET_KEY_MIN_LENGTH or len(set(secret_key)) < SECRET_KEY_MIN_UNIQUE:
        problems.append(
            f"SECRET_KEY is too short or too plain to sign logins (at least "
            f"{SECRET_KEY_MIN_LENGTH} characters, {SECRET_KEY_MIN_UNIQUE} different ones): "
            f"{HOW_TO_MAKE_A_KEY}"
        )
    if not allowed_hosts:
        problems.append(
            "ALLOWED_HOSTS must name the host names people use, comma-separated "
            "(e.g. deepthink.example.org): with none, every request is refused"
        )
    for name, secure in (
        ("SESSION_COOKIE_SECURE", session_cookie_secure),
        ("CSRF_COOKIE_SECURE", csrf_cookie_secure),
    ):
        if not secure:
            problems.append(
                f"{name} is off, so the cookie would also travel over plain HTTP, where "
                "anyone on the network can read it: serve over HTTPS (deploy/ has an nginx "
                f"site and a Caddyfile that do) and leave {name} unset"
            )
    return problems
