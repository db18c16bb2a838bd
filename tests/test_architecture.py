"""The app's modules import one another one way: no module imports, directly or through
others, a module that imports it back, and lower layers never import the ones above them.

Every import counts, whether at the top of a module or inside a function (a function-level
import is how a circle hides); imports only for type checkers (`if TYPE_CHECKING:`) do not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("config", "thinking", "research", "accounts", "evaluation")


def app_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = app_modules()


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node)


def _owner(name: str) -> str | None:
    """The app module `name` is, or is inside of (a name imported from it)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imported_by(module: str) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _imports(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            owner = _owner(name)
            # A package's own __init__ is not an import of the package by its modules.
            if owner and owner != module and not module.startswith(f"{owner}."):
                targets.add(owner)
    return targets


GRAPH = {module: imported_by(module) for module in MODULES}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_app_imports_itself_back_through_others():
    found = circles(GRAPH)
    described = [
        " <-> ".join(c) + f"\n    { ({m: sorted(GRAPH[m] & set(c)) for m in c}) }" for c in found
    ]
    assert not found, "import circles:\n" + "\n".join(described)


def test_the_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def _reaches(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in GRAPH[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


# Lower layers: what each may never import (the front ends, people's actions, the loop).
FRONT_ENDS = {
    "thinking.web.views",
    "thinking.web.page_views",
    "thinking.web.api",
    "thinking.web.consumers",
}
LOOP = {"thinking.deliberation.loop", "thinking.deliberation.worker"}


@pytest.mark.parametrize(
    "module",
    [
        "thinking.models",
        "thinking.provider.llm",
        "thinking.provider.streaming",
        "thinking.deliberation.steps",
        "research.web",
    ],
)
def test_lower_layers_do_not_import_the_loop_or_the_front_ends(module: str):
    assert not _reaches(module) & (FRONT_ENDS | LOOP)


EVALUATION = {m for m in MODULES if m == "evaluation" or m.startswith("evaluation.")}


@pytest.mark.parametrize(
    "module", sorted(m for m in MODULES if m.split(".")[0] in ("thinking", "research"))
)
def test_nothing_the_evaluation_measures_imports_it(module: str):
    # The evaluation is a front end: it starts sessions through people's actions and reads
    # the models; what it measures never depends on it.
    assert not _reaches(module) & EVALUATION


def test_the_evaluation_starts_sessions_only_through_peoples_actions():
    reached = set().union(*(GRAPH[m] for m in EVALUATION))
    assert "thinking.people.actions" in reached
    assert not reached & (LOOP | FRONT_ENDS | {"thinking.deliberation.steps"})
