"""The prm package's own layers: no import cycle between its modules (lazy imports and
type-checking imports included), only recovery and analyses.passkt from outside, click only
in prm/cli, torch and transformers only inside functions."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

PRM = Path(__file__).resolve().parents[2] / "prm"


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module imported, whether at module level) for every import of a file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, id(node) in top))
    return out


def _module(path: Path) -> str:
    parts = path.relative_to(PRM.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycle_inside_prm():
    graph = nx.DiGraph()
    modules = {_module(p): p for p in PRM.rglob("*.py")}
    for name, path in modules.items():
        graph.add_node(name)
        for imported, _ in _imports(path):
            target = next((m for m in sorted(modules, key=len, reverse=True)
                           if imported == m or imported.startswith(m + ".")), None)
            if target and target != name and not target.startswith("prm.cli"):
                graph.add_edge(name, target)
    assert list(nx.simple_cycles(graph)) == []


def test_prm_reaches_outside_only_through_recovery_and_passkt():
    for path in PRM.rglob("*.py"):
        in_cli = "cli" in path.relative_to(PRM).parts
        for imported, at_top in _imports(path):
            root = imported.split(".")[0]
            if root == "analyses":
                assert imported == "analyses.passkt", (path, imported)
            if root == "click":
                assert in_cli, (path, imported)
            if root in ("torch", "transformers", "peft", "sklearn", "safetensors"):
                assert not at_top, (path, imported)


def test_importing_prm_library_modules_loads_neither_click_nor_torch():
    names = sorted(_module(p) for p in PRM.glob("*.py"))
    code = (f"import sys\nfor m in {names!r}: __import__(m)\n"
            "print(sorted(m for m in ('click', 'torch', 'transformers') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PRM.parent, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
