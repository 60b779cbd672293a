"""No library function runs past MAX_LINES lines of code unless its docstring says why.

Code lines are the lines from ``def`` to the end of the body less the docstring's: a function
documented at length is not long for it. A long function is split into parts a reader can take in one at a time; where one is
clearer whole (a big SQL text, a table of cases), its docstring has a line starting
``Long because`` that gives the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("recovery", "analyses", "prm")
MAX_LINES = 80
REASON = "Long because"


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                    found.append((where, node))
    return found


def _length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the last line of the body, less the docstring's lines."""
    lines = (node.end_lineno or node.lineno) - node.lineno + 1
    first = node.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        lines -= (first.end_lineno or first.lineno) - first.lineno + 1
    return lines


def _has_reason(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    doc = ast.get_docstring(node) or ""
    return any(line.strip().startswith(REASON) for line in doc.splitlines())


def test_the_packages_have_functions() -> None:
    assert len(_functions()) > 500  # the walk found the code (a moved root would pass vacuously)


def test_no_long_function_without_a_reason() -> None:
    too_long = [f"{where} ({_length(node)} lines)" for where, node in _functions()
                if _length(node) > MAX_LINES and not _has_reason(node)]
    assert not too_long, (
        f"over {MAX_LINES} lines with no {REASON!r} line in the docstring "
        "(split the function, or say why it is clearer whole):\n" + "\n".join(too_long))


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    pass\n", True),
    ("def f():\n" + "    x = 1\n" * 90, False),
    ('def f():\n    """Sum.\n\n    Long because one SQL text.\n    """\n' + "    x = 1\n" * 90,
     True),
    # a long docstring is not long code: 90 docstring lines and 10 code lines pass
    ('def f():\n    """Sum.\n' + "    an argument\n" * 90 + '    """\n' + "    x = 1\n" * 10,
     True),
    # ...but the code lines still count: 81 of them fail whatever the docstring
    ('def f():\n    """Sum."""\n' + "    x = 1\n" * 81, False),
    ('def f():\n' + "    x = 1\n" * 79, True),
])
def test_the_rule(source: str, expected: bool) -> None:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    assert (_length(node) <= MAX_LINES or _has_reason(node)) is expected
