"""The prm package's rules that import-linter cannot state: the heavy libraries (torch,
transformers, peft, scikit-learn, safetensors) are imported inside functions only, and importing
the library modules loads neither click nor torch.

What prm may import from outside (recovery, analyses.passkt; click in agent_recovery_cli/prm only) is an
import-linter contract in pyproject.toml; the no-cycle rule is tests/test_layers.py."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PRM = Path(__file__).resolve().parents[2] / "prm"
HEAVY = ("torch", "transformers", "peft", "sklearn", "safetensors")


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


def prm_modules() -> list[str]:
    """Every module of the prm package, its subfolders' included."""
    return sorted(_module(p) for p in PRM.rglob("*.py"))


def test_every_module_of_the_subfolders_is_covered():
    modules = prm_modules()
    assert {"prm.kinds.base", "prm.data.features", "prm.config"} <= set(modules)
    assert len(modules) == len(list(PRM.rglob("*.py")))


def test_heavy_libraries_are_imported_inside_functions_only():
    for path in PRM.rglob("*.py"):
        for imported, at_top in _imports(path):
            if imported.split(".")[0] in HEAVY:
                assert not at_top, (path, imported)


def test_importing_prm_library_modules_loads_neither_click_nor_torch():
    names = prm_modules()
    code = (f"import sys\nfor m in {names!r}: __import__(m)\n"
            "print(sorted(m for m in ('click', 'torch', 'transformers') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PRM.parent, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
