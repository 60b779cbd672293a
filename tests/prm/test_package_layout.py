"""The prm package's layout: folders that show its parts, modules of one idea each."""

from __future__ import annotations

import ast
from pathlib import Path

PRM = Path(__file__).resolve().parents[2] / "prm"
MAX_LINES = 500


def test_no_module_over_the_limit() -> None:
    long = {str(p.relative_to(PRM)): n for p in PRM.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by idea (each new module one idea): {long}"


def test_the_parts_are_folders_whose_init_holds_only_a_docstring() -> None:
    folders = sorted(p.parent.name for p in PRM.glob("*/__init__.py"))
    assert folders == ["data", "evaluation", "kinds", "linear", "neural"]
    for name in ("data", "evaluation", "linear", "neural"):
        body = ast.parse((PRM / name / "__init__.py").read_text()).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), name  # importing is cheap
