"""No library function takes more than MAX_PARAMS parameters.

A function with more settings than that takes an options dataclass (the one the command line
builds, where there is one), whose fields carry the help text: the arguments are documented once
there, and a call names what it sets. ``self``/``cls`` and ``*args``/``**kwargs`` do not count.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("recovery", "analyses", "prm")
MAX_PARAMS = 6


@functools.cache  # parsed once per session: the tests only read the trees
def _functions() -> tuple[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef], ...]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.append((f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", node))
    return tuple(found)


def _n_params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Positional and keyword-only parameters, less a leading ``self`` or ``cls``."""
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names)


def test_the_packages_have_functions() -> None:
    assert len(_functions()) > 500  # the walk found the code (a moved root would pass vacuously)


def test_no_long_signature() -> None:
    too_many = [f"{where} ({_n_params(node)} parameters)" for where, node in _functions()
                if _n_params(node) > MAX_PARAMS]
    assert not too_many, (
        f"over {MAX_PARAMS} parameters (give the function an options dataclass whose fields "
        "carry the help text):\n" + "\n".join(too_many))


@pytest.mark.parametrize("source, expected", [
    ("def f(a, b, c, d, e, f):\n    pass\n", 6),
    ("def f(a, b, c, d, e, f, g):\n    pass\n", 7),
    ("def f(self, a, b, c, d, e, f):\n    pass\n", 6),
    ("def f(cls, a, b, c, d, e, f):\n    pass\n", 6),
    ("def f(a, /, b, *, c, d, e, f, g):\n    pass\n", 7),
    ("def f(a, b, *args, c, **kwargs):\n    pass\n", 3),
    ("def f(a, self):\n    pass\n", 2),  # only a leading self is left out
])
def test_the_count(source: str, expected: int) -> None:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    assert _n_params(node) == expected
