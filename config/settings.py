"""Deep Think settings: one module, driven by environment variables.

With no environment at all the app runs on embedded defaults: SQLite, the in-memory
channel layer and an in-process thinking worker. DATABASE_URL switches to PostgreSQL,
REDIS_URL to channels-redis (then `manage.py runworker thinking` processes run sessions).
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from config.pool import health_check
from config.production import DEVELOPMENT_SECRET_KEY, refusals

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false, yes/no), not {raw!r}")


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {raw!r}")
    return value


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {raw!r}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DEBUG = env_bool("DEBUG", True)
# With DEBUG off there are no defaults for these: start-up refuses until they are set (below).
SECRET_KEY = env_str("SECRET_KEY") or (DEVELOPMENT_SECRET_KEY if DEBUG else "")
# Earlier keys, still accepted for logins and password-reset links while a new one takes over.
SECRET_KEY_FALLBACKS = env_list("SECRET_KEY_FALLBACKS", [])
_LOCAL_HOSTS = ["127.0.0.1", "localhost", "[::1]", "testserver"]
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", _LOCAL_HOSTS if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# Transport security: on by default whenever DEBUG is off; each can be turned off for a
# deployment that terminates TLS elsewhere and says so (SECURE_PROXY_SSL_HEADER).
SECURE = not DEBUG
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", SECURE)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", SECURE)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", SECURE)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if SECURE else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", SECURE)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Preloading is a promise to browsers that is slow to take back (hstspreload.org), so it is
# the operator's decision, not a default. Until they opt in, `check --deploy` would warn
# (security.W021) on every run and hide new warnings in the noise: silenced on purpose.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
if not DEBUG and (
    _REFUSALS := refusals(
        secret_key=SECRET_KEY,
        allowed_hosts=ALLOWED_HOSTS,
        session_cookie_secure=SESSION_COOKIE_SECURE,
        csrf_cookie_secure=CSRF_COOKIE_SECURE,
    )
):
    raise ImproperlyConfigured("DEBUG is off, so: " + "; ".join(_REFUSALS) + ".")
# A load balancer or monitor may ask /healthz over plain HTTP, straight from the web process.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
# Only our own scripts and styles run: model and web text can never add any. The live
# stream's filter adds one style element, with the request's nonce; style attributes carry
# progress widths. htmx is configured (base.html) to need neither eval nor inline styles.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF, CSP.NONCE],
    "style-src-attr": [CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "daphne",  # first, so runserver is the ASGI one
    "thinking",  # before channels: our runworker adds the session supervisor
    "research",
    "accounts",
    "evaluation",
    "channels",
    "django_htmx",
    "ninja",  # serves the API docs' assets from our own static files, not a CDN
    "accounts.admin_apps.AdminConfig",  # django.contrib.admin, its login throttled
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
]

MIDDLEWARE = [
    # First, so everything after it (throttling, logs) sees the real client address.
    "accounts.clients.TrustedProxyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
            ],
        },
    },
]

# Database: SQLite file under the project unless DATABASE_URL names another database
# (a sqlite:/// URL is the embedded database at that path, with the same options).
DATABASE_URL = env_str("DATABASE_URL")
_DATABASE = dj_database_url.parse(DATABASE_URL, conn_max_age=0) if DATABASE_URL else None
_SQLITE = _DATABASE is None or _DATABASE["ENGINE"] == "django.db.backends.sqlite3"
# Database hops of the thinking worker run on a bounded thread pool of this size, so
# different sessions' hops run side by side (config/hops.py). SQLite takes one writer at a
# time, so there one thread serialises the hops instead of making writers wait on the lock.
DEEPTHINK_DB_THREADS = env_int("DEEPTHINK_DB_THREADS", 1 if _SQLITE else 8, minimum=1)
if _DATABASE is not None and not _SQLITE:
    DATABASES = {"default": _DATABASE}
    # PostgreSQL through psycopg's pool: a hop borrows an open connection and gives it back
    # (Django's close at the end of a hop returns it), instead of connecting each time. The
    # pool pings a connection before lending it (its `check` below), so one broken by a
    # PostgreSQL restart or pg_terminate_backend is replaced, not reused. Sized for the
    # worker's hop threads plus the web side's: sync views run on asgiref's executor (up to
    # CPUs + 4 threads), consumers and the heartbeat on its own thread, so 16 beyond the hop
    # threads (+4 made a burst of parallel requests wait out the pool's timeout).
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    _POOL_MAX = env_int("DATABASE_POOL_MAX_SIZE", DEEPTHINK_DB_THREADS + 16, minimum=1)
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(env_int("DATABASE_POOL_MIN_SIZE", 2, minimum=0), _POOL_MAX),
        "max_size": _POOL_MAX,
        "timeout": env_float("DATABASE_POOL_TIMEOUT", 30.0, minimum=0.1),
        "max_idle": 300.0,
        # One dead connection sweeps the rest, so a hop after a restart does not wait out
        # the pool's back-off behind each of them (config/pool.py).
        "check": health_check("default"),
    }
else:
    SQLITE_PATH = Path(
        (_DATABASE or {}).get("NAME")
        or env_str("SQLITE_PATH")
        or BASE_DIR / "db" / "deepthink.sqlite3"
    )
    SQLITE_PATH.parent.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": SQLITE_PATH,  # type: ignore[typeddict-item]  # Django takes a Path too
            # Opening a file connection (and its PRAGMAs) and closing it cost ~0.5 ms of CPU,
            # and a worker makes ~10 hops a step: each thread keeps its connection instead
            # (a SQLite file connection does not go stale the way a server's can).
            "CONN_MAX_AGE": None,
            "OPTIONS": {
                # The web process and the worker write the same file: WAL lets readers
                # proceed during a write, IMMEDIATE makes writers queue instead of failing.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Channel layer: in-memory (one process) unless REDIS_URL is given.
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                # redis-py 8 reads with a 5 s socket timeout by default, which breaks the
                # layer's blocking pops: idle workers and WebSockets would die every few
                # seconds (channels_redis#422). The server-side pop timeout bounds them.
                "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                "prefix": env_str("CHANNELS_PREFIX", "deepthink"),
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# Cache (login throttling): shared through Redis when there is one, else this process's memory.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env_str("CHANNELS_PREFIX", "deepthink"),
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Password-reset mail: printed to the console while DEBUG is on; otherwise sent over SMTP
# (EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD, EMAIL_USE_TLS).
_SMTP = "django.core.mail.backends.smtp.EmailBackend"
_EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend" if DEBUG else _SMTP
)
MAILERS = {
    "default": {
        "BACKEND": _EMAIL_BACKEND,
        "OPTIONS": {
            "host": env_str("EMAIL_HOST", "localhost"),
            "port": env_int("EMAIL_PORT", 25, minimum=1),
            "username": env_str("EMAIL_HOST_USER"),
            "password": env_str("EMAIL_HOST_PASSWORD"),
            "use_tls": env_bool("EMAIL_USE_TLS", False),
        }
        if _EMAIL_BACKEND == _SMTP
        else {},
    }
}
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Deep Think <deepthink@localhost>")
# Anyone may create an account only where this is on.
DEEPTHINK_SIGNUP = env_bool("DEEPTHINK_SIGNUP", False)

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where `collectstatic` gathers them (deploy/run-production.sh prepare) for the proxy and
# WhiteNoise to serve.
STATIC_ROOT = Path(env_str("STATIC_ROOT") or BASE_DIR / "staticfiles")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # With DEBUG off, collected files are named after a hash of their content (pages link to
    # those names through the manifest) and get a compressed copy beside them, so they are
    # cached for a year: a changed file is a new name. While developing, the source files.
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
# Serve straight from the source folders while developing; collectstatic in production.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

# Logs go to standard error (the journal under systemd), one line per event: one handler,
# on the root logger, which replaces what daphne and runworker set up before Django starts
# (a handler of our own beside theirs printed every line twice). A line logged while a
# worker runs a session names it (config/logs.py).
LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
if LOG_LEVEL not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
    raise ImproperlyConfigured(
        f"LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, not {LOG_LEVEL!r}"
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"session": {"()": "config.logs.SessionFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s%(session)s: %(message)s"}
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["session"]},
        "null": {"class": "logging.NullHandler"},
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "thinking": {"level": LOG_LEVEL},
        "research": {"level": LOG_LEVEL},
        "accounts": {"level": LOG_LEVEL},
        "config": {"level": LOG_LEVEL},
        "daphne": {"level": "INFO"},  # where it listens
        # Django's own defaults give these handlers of their own (the console while DEBUG is
        # on, mail to ADMINS): theirs go through the root's instead. A request that fails
        # is logged by django.request with its traceback.
        "django": {"handlers": [], "level": "INFO"},
        "django.channels": {"level": "WARNING"},
        # A request naming a host not in ALLOWED_HOSTS (scanners try any) is answered 400,
        # which the proxy's access log shows; Django reports each with a whole traceback.
        "django.security.DisallowedHost": {"handlers": ["null"], "propagate": False},
    },
}

# --- Deep Think ---------------------------------------------------------------------------

# The model provider's wire protocol (docs/providers.md): "anthropic", the Messages API
# (Anthropic, or a local Anthropic-compatible server: Ollama, LiteLLM, ...), or "openai",
# Chat Completions (vLLM, LM Studio, llama.cpp, Ollama's /v1, OpenRouter, ...). The SDKs' own
# environment variables are honoured: ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL, or
# OPENAI_API_KEY and OPENAI_BASE_URL.
DEEPTHINK_PROVIDER = env_str("DEEPTHINK_PROVIDER", "anthropic").lower() or "anthropic"
if DEEPTHINK_PROVIDER not in ("anthropic", "openai"):
    raise ImproperlyConfigured(
        f"DEEPTHINK_PROVIDER must be anthropic or openai, not {DEEPTHINK_PROVIDER!r}"
    )
ANTHROPIC_API_KEY = env_str("ANTHROPIC_API_KEY")
ANTHROPIC_BASE_URL = env_str("ANTHROPIC_BASE_URL")
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL")
if DEEPTHINK_PROVIDER == "openai" and not env_str("DEEPTHINK_MODEL"):
    raise ImproperlyConfigured(
        "DEEPTHINK_PROVIDER=openai needs DEEPTHINK_MODEL: the model id the server knows "
        "(for example qwen3:8b on Ollama)."
    )
# Model roles: DEEPTHINK_MODEL thinks (thought cycles, syntheses, the final answer; a session
# may pick another on the start form); DEEPTHINK_FAST_MODEL does the utility work (plan,
# sub-question lists, re-ranking, checks), always without thinking. Empty: the main model.
DEEPTHINK_MODEL = env_str("DEEPTHINK_MODEL", "claude-opus-5-5")
DEEPTHINK_FAST_MODEL = env_str("DEEPTHINK_FAST_MODEL")
# The models a session may pick (comma-separated; DEEPTHINK_MODEL and DEEPTHINK_FAST_MODEL
# are always among them). Unset: those the provider lists, else (Anthropic) the built-in
# table, else (OpenAI-compatible) just the two configured.
DEEPTHINK_MODELS = env_list("DEEPTHINK_MODELS", [])
DEEPTHINK_MAX_TOKENS = env_int("DEEPTHINK_MAX_TOKENS", 4096, minimum=256)
# Thinking: auto | off | adaptive | manual; a budget for manual; effort low..max. Unset means
# "the best this model takes" (adaptive, else manual with a budget that fits, else off),
# resolved per call from the Models API or the built-in table. A value set here is checked
# against what the model accepts before anything runs.
DEEPTHINK_THINKING = env_str("DEEPTHINK_THINKING", "auto").lower() or "auto"
DEEPTHINK_THINKING_BUDGET = env_int("DEEPTHINK_THINKING_BUDGET", 0, minimum=0) or None
DEEPTHINK_EFFORT = env_str("DEEPTHINK_EFFORT", "").lower()
DEEPTHINK_TOKEN_CEILING = env_int("DEEPTHINK_TOKEN_CEILING", 0, minimum=0)  # 0: none
# A default dollar ceiling per session (0: none), from the built-in price table.
DEEPTHINK_MAX_COST_USD = env_float("DEEPTHINK_MAX_COST_USD", 0.0, minimum=0.0)


def _prices(raw: str) -> dict[str, dict[str, float]]:
    from thinking.provider.pricing import parse_prices

    try:
        return parse_prices(raw)
    except ValueError as error:
        raise ImproperlyConfigured(f"DEEPTHINK_PRICES: {error}") from None


# Prices of models the built-in table lacks (or other prices): JSON of US dollars per million
# tokens, merged over the table (thinking/provider/pricing.py has the format).
DEEPTHINK_PRICES = _prices(env_str("DEEPTHINK_PRICES"))
# A team session without its own ceiling reserves at most this share of what is left of the
# team's monthly budget, so one session cannot lock the rest of the team out.
DEEPTHINK_TEAM_SESSION_SHARE = env_float("DEEPTHINK_TEAM_SESSION_SHARE", 0.5, minimum=0.01)
DEEPTHINK_PROMPT_CACHING = env_bool("DEEPTHINK_PROMPT_CACHING", True)
# At most one live "model reasoning" update per session this often (seconds).
DEEPTHINK_LIVE_INTERVAL = env_float("DEEPTHINK_LIVE_INTERVAL", 0.5, minimum=0.0)


def _check_thinking() -> None:
    """Validate what the operator set (and only that) against the model's known limits."""
    from thinking.provider.capabilities import (
        ThinkingSettings,
        builtin_capabilities,
        manual_budget,
        validate,
    )

    capabilities = builtin_capabilities(DEEPTHINK_MODEL)
    # Manual thinking without a budget gets one fitted under max tokens, as requests do.
    budget = DEEPTHINK_THINKING_BUDGET or manual_budget(None, DEEPTHINK_MAX_TOKENS) or None
    problems = validate(
        ThinkingSettings(
            mode=DEEPTHINK_THINKING,
            budget_tokens=budget if DEEPTHINK_THINKING == "manual" else None,
            effort=DEEPTHINK_EFFORT,
            max_tokens=DEEPTHINK_MAX_TOKENS,
        ),
        # A model we know nothing of (a local server's) is not second-guessed.
        capabilities if capabilities.source != "default" else None,
    )
    names = {
        "mode": "DEEPTHINK_THINKING",
        "budget_tokens": "DEEPTHINK_THINKING_BUDGET",
        "effort": "DEEPTHINK_EFFORT",
        "max_tokens": "DEEPTHINK_MAX_TOKENS",
    }
    if problems:
        raise ImproperlyConfigured(
            "; ".join(f"{names[field]}: {message}" for field, message in problems.items())
            + f" (DEEPTHINK_MODEL={DEEPTHINK_MODEL})"
        )


_check_thinking()

# Retries of errors that arrive inside a stream (the SDK retries only before the body starts).
DEEPTHINK_STREAM_RETRIES = env_int("DEEPTHINK_STREAM_RETRIES", 3, minimum=0)
DEEPTHINK_RETRY_BASE_SECONDS = env_float("DEEPTHINK_RETRY_BASE_SECONDS", 1.0, minimum=0)

# How the model is asked to structure each thought cycle (see thinking/provider/tags.py): "standard"
# or "enhanced"; "custom" is chosen per session, with its own tag spec.
DEEPTHINK_FORMAT = env_str("DEEPTHINK_FORMAT", "enhanced").lower()
if DEEPTHINK_FORMAT not in ("standard", "enhanced"):
    raise ImproperlyConfigured(
        f"DEEPTHINK_FORMAT must be 'standard' or 'enhanced', not {DEEPTHINK_FORMAT!r} "
        "(a custom format is chosen per session, with its tag spec)."
    )

# When the model provider stays unavailable after the SDK's retries, a session waits and
# tries again with backoff (first wait, longest wait), and fails after the give-up time.
DEEPTHINK_PROVIDER_BACKOFF_SECONDS = env_float("DEEPTHINK_PROVIDER_BACKOFF_SECONDS", 2.0, minimum=0)
DEEPTHINK_PROVIDER_MAX_BACKOFF_SECONDS = env_float(
    "DEEPTHINK_PROVIDER_MAX_BACKOFF_SECONDS", 60.0, minimum=0
)
DEEPTHINK_PROVIDER_GIVE_UP_SECONDS = env_float(
    "DEEPTHINK_PROVIDER_GIVE_UP_SECONDS", 900.0, minimum=0
)

# Research (research/): the knowledge base and web search through Exa, SearxNG or Tavily
# (research/providers.py). Without any of them web research is off and the pages say so.
# exa-py reads no base-URL variable itself.
EXA_API_KEY = env_str("EXA_API_KEY")
EXA_BASE_URL = env_str("EXA_BASE_URL")  # empty: https://api.exa.ai
SEARXNG_URL = env_str("SEARXNG_URL")  # a SearxNG instance with json in its search.formats
TAVILY_API_KEY = env_str("TAVILY_API_KEY")
TAVILY_BASE_URL = env_str("TAVILY_BASE_URL")  # empty: https://api.tavily.com
# The providers a session searches when it chooses none (comma-separated); empty: exa when
# EXA_API_KEY is set, else searxng when SEARXNG_URL is, else tavily when TAVILY_API_KEY is.
DEEPTHINK_WEB_SEARCH = [name.lower() for name in env_list("DEEPTHINK_WEB_SEARCH", [])]
_WEB_SEARCH_NEEDS = {"exa": "EXA_API_KEY", "searxng": "SEARXNG_URL", "tavily": "TAVILY_API_KEY"}
for _name in DEEPTHINK_WEB_SEARCH:
    if _name not in _WEB_SEARCH_NEEDS:
        raise ImproperlyConfigured(
            f"DEEPTHINK_WEB_SEARCH: unknown provider {_name!r} (exa, searxng or tavily)."
        )
    if not globals()[_WEB_SEARCH_NEEDS[_name]]:
        raise ImproperlyConfigured(
            f"DEEPTHINK_WEB_SEARCH names {_name}, which needs {_WEB_SEARCH_NEEDS[_name]}."
        )
# The most results one web search returns (the seed's maxItemsPerSource).
DEEPTHINK_WEB_MAX_ITEMS_PER_SOURCE = env_int("DEEPTHINK_WEB_MAX_ITEMS_PER_SOURCE", 10, minimum=1)
# Identical searches (same scope, query and options) within this period cost nothing; 0 = off.
DEEPTHINK_SEARCH_CACHE_SECONDS = env_float("DEEPTHINK_SEARCH_CACHE_SECONDS", 86400.0, minimum=0)
# Per search call (web or memory); a timed-out web call is retried once.
DEEPTHINK_RESEARCH_TIMEOUT_SECONDS = env_float(
    "DEEPTHINK_RESEARCH_TIMEOUT_SECONDS", 20.0, minimum=0.1
)
DEEPTHINK_KNOWLEDGE_MAX_UPLOAD_BYTES = env_int(
    "DEEPTHINK_KNOWLEDGE_MAX_UPLOAD_BYTES", 20_000_000, minimum=1
)
# The largest file `import_knowledge` reads; bigger ones are skipped with a message.
DEEPTHINK_KNOWLEDGE_MAX_FILE_BYTES = env_int(
    "DEEPTHINK_KNOWLEDGE_MAX_FILE_BYTES", 50_000_000, minimum=1
)
# Each uploaded or imported file is read in a process of its own (research/read_process.py):
# refused when reading it takes longer than this, or more memory than this (beyond what the
# reader starts with); at most this many files are read at once per server process.
DEEPTHINK_KNOWLEDGE_READ_SECONDS = env_float("DEEPTHINK_KNOWLEDGE_READ_SECONDS", 60.0, minimum=1)
DEEPTHINK_KNOWLEDGE_READ_MEMORY_MB = env_int("DEEPTHINK_KNOWLEDGE_READ_MEMORY_MB", 1024, minimum=64)
DEEPTHINK_KNOWLEDGE_READERS = env_int("DEEPTHINK_KNOWLEDGE_READERS", 2, minimum=1)
# Page text asked of Exa per web result (bounded), besides its highlights.
DEEPTHINK_WEB_TEXT_CHARS = env_int("DEEPTHINK_WEB_TEXT_CHARS", 3000, minimum=0)
# The citation check (thinking/deliberation/citations.py): on/off, claims per checker call, calls at
# once, claims checked per synthesis at most, and the checker's reply budget.
DEEPTHINK_CITATION_CHECK = env_bool("DEEPTHINK_CITATION_CHECK", True)
DEEPTHINK_CHECK_BATCH = env_int("DEEPTHINK_CHECK_BATCH", 8, minimum=1)
DEEPTHINK_CHECK_PARALLEL = env_int("DEEPTHINK_CHECK_PARALLEL", 4, minimum=1)
DEEPTHINK_CHECK_MAX_CLAIMS = env_int("DEEPTHINK_CHECK_MAX_CLAIMS", 60, minimum=1)
DEEPTHINK_CHECK_MAX_TOKENS = env_int("DEEPTHINK_CHECK_MAX_TOKENS", 1500, minimum=100)
# Tools while thinking: web_search, memory_search, progress, and the think scratchpad.
DEEPTHINK_TOOLS = env_bool("DEEPTHINK_TOOLS", True)
DEEPTHINK_THINK_TOOL = env_bool("DEEPTHINK_THINK_TOOL", True)
DEEPTHINK_MAX_TOOL_ROUNDS = env_int("DEEPTHINK_MAX_TOOL_ROUNDS", 5, minimum=1)
# A fresh plan for this many high-priority sub-questions (priority >=
# DEEPTHINK_REPLAN_PRIORITY) when they become the focus.
DEEPTHINK_REPLANS = env_int("DEEPTHINK_REPLANS", 3, minimum=0)
DEEPTHINK_REPLAN_PRIORITY = env_int("DEEPTHINK_REPLAN_PRIORITY", 8, minimum=1)

# The loop: a question batch every N thoughts; syntheses every interval of active time.
DEEPTHINK_QUESTIONS_EVERY = env_int("DEEPTHINK_QUESTIONS_EVERY", 5, minimum=1)
DEEPTHINK_MAX_MINUTES = env_float("DEEPTHINK_MAX_MINUTES", 600.0, minimum=0.05)
DEEPTHINK_MAX_QUESTION_CHARS = env_int("DEEPTHINK_MAX_QUESTION_CHARS", 4000, minimum=100)
# The whole seed (#12): open sub-questions are re-ranked every N cycles and when new sources
# arrive; the final answer's review of the session fits this many prompt tokens (estimated);
# a pause or cancel is noticed during a model call within this many seconds.
DEEPTHINK_RERANK_EVERY = env_int("DEEPTHINK_RERANK_EVERY", 3, minimum=1)
DEEPTHINK_FINAL_PROMPT_TOKENS = env_int("DEEPTHINK_FINAL_PROMPT_TOKENS", 24000, minimum=2000)
DEEPTHINK_INTERRUPT_POLL_SECONDS = env_float("DEEPTHINK_INTERRUPT_POLL_SECONDS", 0.5, minimum=0.05)

# Limits per person: sessions thinking at once, and sessions started per hour.
DEEPTHINK_MAX_CONCURRENT_SESSIONS = env_int("DEEPTHINK_MAX_CONCURRENT_SESSIONS", 3, minimum=1)
DEEPTHINK_SESSIONS_PER_HOUR = env_int("DEEPTHINK_SESSIONS_PER_HOUR", 20, minimum=1)

# Failed logins allowed per address and username in the window (five times that per address).
DEEPTHINK_LOGIN_ATTEMPTS = env_int("DEEPTHINK_LOGIN_ATTEMPTS", 10, minimum=1)
DEEPTHINK_LOGIN_WINDOW_SECONDS = env_int("DEEPTHINK_LOGIN_WINDOW_SECONDS", 900, minimum=1)
# Reverse proxies in front of the app that append to X-Forwarded-For (nginx, Caddy: 1).
# 0 ignores the header: without a trusted proxy anyone could pick the address they are
# throttled and logged under.
DEEPTHINK_TRUSTED_PROXY_COUNT = env_int("DEEPTHINK_TRUSTED_PROXY_COUNT", 0, minimum=0)
# The session page's WebSocket: pages send nothing, so anything large is refused.
DEEPTHINK_WS_MAX_FRAME_BYTES = env_int("DEEPTHINK_WS_MAX_FRAME_BYTES", 4096, minimum=64)
# How often an open page re-checks that its user may still see the session (logout, access).
DEEPTHINK_WS_RECHECK_SECONDS = env_float("DEEPTHINK_WS_RECHECK_SECONDS", 5.0, minimum=0.0)

# Workers. On embedded defaults the web process runs the worker itself.
DEEPTHINK_INPROCESS_WORKER = env_bool("DEEPTHINK_INPROCESS_WORKER", not REDIS_URL)
# What a server's start-up made is frozen out of the garbage collector's full passes,
# which otherwise walk it all while the process waits (config/startup.py). The tests turn
# it off: they load the app partway through a run.
DEEPTHINK_GC_FREEZE = env_bool("DEEPTHINK_GC_FREEZE", True)
DEEPTHINK_WORKER_CAPACITY = env_int("DEEPTHINK_WORKER_CAPACITY", 8, minimum=1)
DEEPTHINK_LEASE_SECONDS = env_float("DEEPTHINK_LEASE_SECONDS", 30.0, minimum=1.0)
DEEPTHINK_HEARTBEAT_SECONDS = env_float("DEEPTHINK_HEARTBEAT_SECONDS", 10.0, minimum=0.1)
DEEPTHINK_SWEEP_SECONDS = env_float("DEEPTHINK_SWEEP_SECONDS", 10.0, minimum=0.1)
# /healthz gives up on the database or the channel layer after this long (config/health.py).
DEEPTHINK_HEALTHZ_TIMEOUT_SECONDS = env_float("DEEPTHINK_HEALTHZ_TIMEOUT_SECONDS", 2.0, minimum=0.1)
if DEEPTHINK_HEARTBEAT_SECONDS >= DEEPTHINK_LEASE_SECONDS:
    raise ImproperlyConfigured(
        "DEEPTHINK_HEARTBEAT_SECONDS must be shorter than DEEPTHINK_LEASE_SECONDS, "
        "or live sessions would look abandoned."
    )

# Hearing when a session ends (#19). Links in mails and webhooks start with the base URL.
DEEPTHINK_BASE_URL = env_str("DEEPTHINK_BASE_URL", "http://127.0.0.1:8000")
# Hosts webhooks may call (empty: any public host). Private, loopback and link-local
# addresses are refused unless the address (or its network, e.g. 10.0.0.0/8) is listed.
DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = env_list("DEEPTHINK_WEBHOOK_ALLOWED_HOSTS", [])
DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS = env_float(
    "DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS", 10.0, minimum=0.1
)
DEEPTHINK_WEBHOOK_MAX_ATTEMPTS = env_int("DEEPTHINK_WEBHOOK_MAX_ATTEMPTS", 6, minimum=1)
DEEPTHINK_WEBHOOK_BACKOFF_SECONDS = env_float("DEEPTHINK_WEBHOOK_BACKOFF_SECONDS", 30.0, minimum=0)

# --- Security round three (issue 73): webhooks, live pages per person -----------------------
# Each person signs their sessions' webhooks with a key of their own (Standard Webhooks; made
# on the account page). 0 turns webhooks off for everyone.
DEEPTHINK_WEBHOOKS = env_bool("DEEPTHINK_WEBHOOKS", True)
# Deliveries one worker process sends at once, each in a task of its own: a slow receiver
# holds up only its own. DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS is each one's total deadline.
DEEPTHINK_WEBHOOK_PARALLEL = env_int("DEEPTHINK_WEBHOOK_PARALLEL", 8, minimum=1)
# Live pages (WebSockets) one person may have open at once, across every web process; one
# more is closed with 4429 (thinking/web/sockets.py).
DEEPTHINK_WS_MAX_PER_USER = env_int("DEEPTHINK_WS_MAX_PER_USER", 20, minimum=1)
