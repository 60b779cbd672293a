"""No import cycle between the modules of the four packages, taken together.

The other layer rules are import-linter contracts (pyproject's ``[tool.importlinter]``, run by
``make test``): the command line on top, then prm, analyses, recovery; click only in the
command line. The cycle check stays here because
import-linter's ``acyclic_siblings`` contract compares the children of one package at a time:
it sees no cycle that runs across the root packages, and it forbids cycles between
whole packages where this test forbids them between modules.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("agent_recovery_cli", "recovery", "analyses", "prm")
LIBRARY = ("recovery", "analyses", "prm")


def library_modules() -> list[str]:
    """Every module of the library's three packages (the command line is not one of them)."""
    out = []
    for package in LIBRARY:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_no_import_cycle_between_modules() -> None:
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (dev extra)")
    # type-checking imports count: a cycle through a type hint is still a cycle
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(start: str) -> None:
        # Tarjan's strongly connected components, iteratively (no recursion limit to hit).
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph.modules:
                    continue
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert cycles == []
