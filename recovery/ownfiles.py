"""The toolkit's own files (manifests, model-folder configs, rule and simulator files) read
strictly: one home for "parse a JSON or TOML file this toolkit wrote or a user configured".

Strict as the rollout readers are (:func:`recovery.formats.jsontext.parse_json`: no NaN, no key
twice, nesting at most :data:`recovery.formats.jsontext.MAX_JSON_DEPTH`), bounded in size, and
every failure one :class:`recovery.errors.InputProblem` line naming the file, never a
``RecursionError`` or ``JSONDecodeError`` traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MAX_OWN_FILE_BYTES = 64 * 1024 * 1024
"""Largest config or manifest file read (a manifest of a million parts is far below it)."""


def _read_text(path: Path, what: str, max_bytes: int) -> str:
    import os
    import stat

    from recovery.display import printable
    from recovery.errors import InputProblem

    try:
        # O_NONBLOCK: a FIFO planted under the name must not hang the open.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise InputProblem(f"cannot read {what} {printable(path)}: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputProblem(f"{what} {printable(path)} is not a regular file")
        if info.st_size > max_bytes:
            raise InputProblem(
                f"{what} {printable(path)} is {info.st_size} bytes; the limit is {max_bytes}"
            )
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputProblem(
            f"{what} {printable(path)} is not UTF-8 text (byte {err.start + 1})"
        ) from None


def parse_own_json(text: str, path: str | Path, what: str = "file") -> Any:
    """``text`` (the contents of ``path``) parsed strictly; one line naming ``path`` if not."""
    from recovery.display import printable
    from recovery.errors import InputProblem
    from recovery.formats.jsontext import parse_json
    from recovery.schema import RecordError

    try:
        return parse_json(text)
    except RecordError as err:
        line = f" line {err.line}" if getattr(err, "line", None) else ""
        raise InputProblem(
            f"{what} {printable(path)}{line}: {getattr(err, 'message', err)}"
        ) from None


def read_own_json(path: str | Path, what: str = "file", *,
                  max_bytes: int = MAX_OWN_FILE_BYTES) -> Any:
    """The JSON document in ``path``, parsed strictly (see the module docstring).

    Raises:
        InputProblem: one line naming ``path``: missing, not a regular file (a FIFO never
            blocks), too large, not UTF-8, malformed, a key twice, NaN, too deep.
    """
    path = Path(path)
    return parse_own_json(_read_text(path, what, max_bytes), path, what)


def toml_depth(value: Any) -> int:
    """Deepest nesting of tables and arrays in a parsed document (iterative: no recursion)."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_own_toml(text: str, path: str | Path, what: str = "file") -> dict[str, Any]:
    """``text`` (the contents of ``path``) parsed as TOML, depth-limited; one line if not."""
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    from recovery.display import printable
    from recovery.errors import InputProblem
    from recovery.formats.jsontext import MAX_JSON_DEPTH

    # tomllib recurses once per level of inline arrays and tables: a deep one is refused
    # before the parser sees it (brackets in strings may only overcount, never hide depth).
    if (text.count("[") + text.count("{") > MAX_JSON_DEPTH
            and _bracket_depth(text) > MAX_JSON_DEPTH) or (
            text.count(".") > MAX_JSON_DEPTH and _key_depth(text) > MAX_JSON_DEPTH):
        raise InputProblem(
            f"{what} {printable(path)}: nested more than {MAX_JSON_DEPTH} levels deep"
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputProblem(f"{what} {printable(path)}: not valid TOML: {err}") from None
    except ValueError:  # int() of an integer of more than 4300 digits, outside the parser
        raise InputProblem(
            f"{what} {printable(path)}: not valid TOML: an integer has too many digits"
        ) from None
    except RecursionError:
        raise InputProblem(
            f"{what} {printable(path)}: nested more than {MAX_JSON_DEPTH} levels deep"
        ) from None
    if toml_depth(data) > MAX_JSON_DEPTH:
        raise InputProblem(
            f"{what} {printable(path)}: nested more than {MAX_JSON_DEPTH} levels deep"
        )
    return data


_QUOTED_PART = r"""(?:"[^"\n]*"|'[^'\n]*')"""
_KEY_PART = rf"(?:[A-Za-z0-9_-]+|{_QUOTED_PART})"
_KEY_PATH = rf"(?:^|(?<=[\[{{,]))[ \t]*({_KEY_PART}(?:[ \t]*\.[ \t]*{_KEY_PART})*)"


def _key_depth(text: str) -> int:
    """Most parts of a dotted key (``a.b.c = 1``, ``[a.b]``, ``{a.b = 1}``) in ``text``.

    tomllib takes time and memory quadratic in a dotted key's length, so a long one is refused
    before parsing. Where a key may start (a line's start, after ``[``, ``{`` or ``,``), the
    dots between key parts are counted; a dotted word inside a string may only overcount.
    """
    import re

    return max((re.sub(_QUOTED_PART, "", m.group(1)).count(".") + 1
                for m in re.finditer(_KEY_PATH, text, re.M)), default=0)


def _bracket_depth(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    return deepest


def read_own_toml(path: str | Path, what: str = "file", *,
                  max_bytes: int = MAX_OWN_FILE_BYTES) -> dict[str, Any]:
    """The TOML document in ``path``, depth- and size-limited (see :func:`read_own_json`)."""
    path = Path(path)
    return parse_own_toml(_read_text(path, what, max_bytes), path, what)
