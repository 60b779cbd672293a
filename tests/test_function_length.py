"""No library function runs past MAX_LINES lines of code unless its docstring says why.

Code lines are the lines from ``def`` to the end of the body that hold code: the docstring,
comment lines and blank lines do not count, so a function documented at length is not long for
it. A long function is split into parts a reader can take in one at a time; where one is
clearer whole (a big SQL text, a table of cases), its docstring has a line starting
``Long because`` that gives the reason.
"""

from __future__ import annotations

import ast
import functools
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("recovery", "analyses", "prm")
MAX_LINES = 80
REASON = "Long because"
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
             tokenize.ENCODING, tokenize.ENDMARKER}

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _code_lines(source: str) -> set[int]:
    """The line numbers that hold a token of code (a string spanning lines holds each of them)."""
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines


@functools.cache  # parsed once per session: the tests only read the trees
def _functions() -> tuple[tuple[str, Function, set[int]], ...]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source, filename=str(path))
            code = _code_lines(source)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
                    found.append((where, node, code))
    return tuple(found)


def _length(node: Function, code: set[int]) -> int:
    """Code lines from ``def`` to the last line of the body, less the docstring's lines."""
    lines = set(range(node.lineno, (node.end_lineno or node.lineno) + 1)) & code
    first = node.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        lines -= set(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return len(lines)


def _has_reason(node: Function) -> bool:
    doc = ast.get_docstring(node) or ""
    return any(line.strip().startswith(REASON) for line in doc.splitlines())


def test_the_packages_have_functions() -> None:
    assert len(_functions()) > 500  # the walk found the code (a moved root would pass vacuously)


def test_no_long_function_without_a_reason() -> None:
    too_long = [f"{where} ({_length(node, code)} lines)" for where, node, code in _functions()
                if _length(node, code) > MAX_LINES and not _has_reason(node)]
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
    # comment lines and blank lines are not code: 79 code lines among 60 of them pass
    ('def f():\n' + "    # why\n\n    x = 1\n" * 30 + "    x = 1\n" * 49, True),
    # a comment after code leaves its line a code line; a string's lines all count
    ('def f():\n' + "    x = 1  # why\n" * 81, False),
    ('def f():\n    x = """\n' + "    # not a comment\n" * 80 + '    """\n', False),
])
def test_the_rule(source: str, expected: bool) -> None:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    assert (_length(node, _code_lines(source)) <= MAX_LINES or _has_reason(node)) is expected
