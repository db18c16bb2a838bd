"""The app uses its libraries through their public APIs only: no Django query compiler, no
private attribute of a library, no rewriting another package's module globals. A library
release may change any of those without notice (one SDK release already broke CI that way).

Read from the source of config/, thinking/, research/ and accounts/ (not imported): fast, and
each finding names the file and line to fix.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = ("config", "thinking", "research", "accounts")
COMPILER_NAMES = {"InsertQuery", "UpdateQuery", "DeleteQuery", "SQLCompiler", "get_compiler"}
# Underscored names that are public by contract: Django's model API (`Model._meta`, the
# managers), named tuples' methods, `os._exit`.
PUBLIC_UNDERSCORED = {
    "_meta",
    "_default_manager",
    "_base_manager",
    "_fields",
    "_make",
    "_replace",
    "_asdict",
    "_exit",
}


def app_sources() -> Iterator[tuple[str, str]]:
    for package in APP:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()


def imported_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names a module binds by importing, as (another package's, the app's own). The
    standard library counts as another package."""
    foreign, own = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = (alias.asname or alias.name).split(".")[0]
                (own if alias.name.split(".")[0] in APP else foreign).add(bound)
        elif isinstance(node, ast.ImportFrom):
            ours = node.level > 0 or (node.module or "").split(".")[0] in APP
            (own if ours else foreign).update(alias.asname or alias.name for alias in node.names)
    return foreign, own


def root_name(node: ast.expr, *, through_calls: bool) -> str | None:
    """`a` for `a.b.c` and `a.b[c]`; for `a.b().c` too when `through_calls` (what a call
    on a foreign name returns is foreign too, but an assignment to it is not to `a`)."""
    while isinstance(node, ast.Attribute | ast.Subscript) or (
        through_calls and isinstance(node, ast.Call)
    ):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def compiler_uses(source: str) -> list[str]:
    """Imports from Django's `django.db.models.sql` and uses of its compiler's names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "django.db.models.sql"
        ):
            found.append(f"{node.lineno}: from {node.module} import ...")
        name = getattr(node, "attr", None) or getattr(node, "id", None)
        if name in COMPILER_NAMES:
            found.append(f"{node.lineno}: {name}")
    return found


def private_uses(source: str) -> list[str]:
    """Underscored attributes of anything but `self`, `cls` and what the app's own imports
    bound (a library's module, class or object: a stream the SDK returned, a channel layer;
    another app module's private function is a matter of the app's layout, not of a
    library's API), imports from another package's underscored modules, and `._client.`
    anywhere (the usual way into an SDK's internals)."""
    tree = ast.parse(source)
    _, own = imported_names(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in PUBLIC_UNDERSCORED
            and root_name(node, through_calls=True) not in {"self", "cls", *own}
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            private = [part for part in parts if part.startswith("_") and part[:2] != "__"]
            if parts[0] not in APP and private:
                found.append(f"{node.lineno}: from {node.module} import ...")
    for number, line in enumerate(source.splitlines(), 1):
        if re.search(r"\._client\.", line):
            found.append(f"{number}: {line.strip()}")
    return found


def foreign_assignments(source: str) -> list[str]:
    """Assignments (and setattr/delattr) to attributes or items of what another package's
    import bound: its module globals, or its classes' attributes."""
    tree = ast.parse(source)
    foreign, _ = imported_names(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and isinstance(node.args[0], ast.Name | ast.Attribute)
            and root_name(node.args[0], through_calls=False) in foreign
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        for target in targets:
            if isinstance(target, ast.Attribute | ast.Subscript) and (
                root_name(target, through_calls=False) in foreign
            ):
                found.append(f"{node.lineno}: {ast.unparse(target)} = ...")
    return found


def in_app(check) -> list[str]:
    return [f"{name}:{hit}" for name, source in app_sources() for hit in check(source)]


def test_the_app_uses_no_django_query_compiler():
    assert in_app(compiler_uses) == []


def test_the_app_uses_no_private_attribute_of_another_package():
    assert in_app(private_uses) == []


def test_the_app_assigns_nothing_to_another_packages_modules():
    assert in_app(foreign_assignments) == []


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("from django.db.models.sql import InsertQuery\n", True),
        ("def f(q, c):\n    return q.query.get_compiler(connection=c)\n", True),
        ("from django.db import models\nmodels.Q(pk=1)\n", False),
    ],
)
def test_the_compiler_check_catches_imports_and_calls(source: str, caught: bool):
    assert bool(compiler_uses(source)) is caught


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("import anthropic\nanthropic.AsyncStream._iter_events\n", True),
        ("from channels_redis.core import RedisChannelLayer as L\nL()._group_key('g')\n", True),
        ("def f(layer, group):\n    return layer._group_key(group)\n", True),
        ("def f(stream):\n    return stream._client._make_status_error\n", True),
        ("from anthropic._streaming import SSEDecoder\n", True),
        ("class A:\n    def f(self):\n        return self._client.close()\n", True),
        ("import anthropic\nanthropic.AsyncStream.raw_events\n", False),
        ("import os\nos._exit(0)\n", False),
        ("from django.db import models\nmodels.Model._meta\n", False),
        ("class A:\n    def f(self):\n        return self._own\n", False),
        ("from . import loop\nloop._enter_next\n", False),
    ],
)
def test_the_private_check_catches_another_packages_private_names(source: str, caught: bool):
    assert bool(private_uses(source)) is caught


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("from httpx_aiohttp import transport\ntransport.AIOHTTP_EXC_MAP[1] = 2\n", True),
        ("import httpx\nhttpx.Timeout = None\n", True),
        ("import httpx\nsetattr(httpx, 'Timeout', None)\n", True),
        ("from exa_py import AsyncExa\nAsyncExa.client = None\n", True),
        ("from thinking import loop\nloop.LIMIT = 1\n", False),
        ("import httpx\nclient = httpx.AsyncClient()\nclient.timeout = 5\n", False),
    ],
)
def test_the_assignment_check_catches_another_packages_globals(source: str, caught: bool):
    assert bool(foreign_assignments(source)) is caught
