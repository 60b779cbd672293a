"""The layers hold: no click outside the command-line packages, no import cycle between modules.

`make test` also runs `lint-imports` (the contracts of pyproject's ``[tool.importlinter]``:
recovery at the bottom, analyses never importing prm, prm using only analyses.passkt).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("recovery", "analyses", "prm")


def library_modules() -> list[str]:
    """Every module of the three packages outside their ``cli`` packages."""
    out = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            if "cli" in parts:
                continue
            out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def test_library_modules_do_not_import_click() -> None:
    modules = library_modules()
    assert len(modules) > 60
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'click' or "
        "m.startswith('click.'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


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
