"""Strict JSON for every reader: no NaN, no infinities, no lone surrogates, no key twice in
one object, bounded depth."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from recovery.schema import RecordError

MAX_JSON_DEPTH = 256
"""Deepest nesting of arrays and objects a record may have (the record itself is level 1).

Every path applies it, DuckDB's fast path included, so that a file is stored or refused the
same way whichever path reads it; Python's own parser would fail near 1,000 levels, and no
rollout format needs more than a few dozen."""

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (0 for a scalar).

    Brackets inside strings do not count.
    """
    depth = deepest = 0
    for bracket in _JSON_BRACKET.findall(_JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def leading_depth(text: str) -> int:
    """The deepest nesting of the JSON value that ``text`` starts with, up to where it ends or
    ``text`` does (the start of a file, cut anywhere: then a lower bound of its depth).

    Brackets inside strings do not count, nor do those of a string that ``text`` cuts short.
    """
    body = _JSON_STRING.sub("", text).split('"', 1)[0]
    depth = deepest = 0
    for bracket in _JSON_BRACKET.finditer(body):
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
        if depth <= 0:
            break
    return deepest


def too_deep(text: str) -> int | None:
    """The depth of ``text`` when it exceeds :data:`MAX_JSON_DEPTH`, else ``None``.

    Cheap for ordinary records: text with at most that many opening brackets cannot be deeper,
    and only longer bracket counts are scanned.
    """
    if text.count("{") + text.count("[") <= MAX_JSON_DEPTH:
        return None
    depth = json_depth(text)
    return depth if depth > MAX_JSON_DEPTH else None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of the range of a double")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict; a key given twice is refused (JSON leaves its meaning
    open, and Python would keep the last value without a word)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key!r} appears twice in one object")
            seen.add(key)
    return value


JSON_DECODER = json.JSONDecoder(
    parse_constant=_no_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
)
"""The strict decoder every reader uses: no NaN, no infinities, no overflowing numbers, no key
twice in one object."""


def parse_json(text: str | bytes, file: str | None = None, line: int | None = None) -> Any:
    """Parse one JSON record strictly, or raise a RecordError that names file and line.

    Strict: ``NaN``, ``Infinity`` and ``-Infinity`` are refused (they are not JSON, and the
    store could not hold them), lone UTF-16 surrogates (``"\\ud800"``) are refused (they are
    not Unicode text), a key given twice in one object is refused (which value was meant is
    unknown), and so is nesting deeper than :data:`MAX_JSON_DEPTH`.

    Raises:
        RecordError: naming what is wrong (column for a syntax error).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise RecordError(
                f"not valid UTF-8 text (byte {err.start + 1})", file=file, line=line
            ) from None
    depth = too_deep(text)
    if depth is not None:
        raise RecordError(
            f"JSON nested {depth} levels deep; the limit is {MAX_JSON_DEPTH}", file=file,
            line=line,
        )
    try:
        value = JSON_DECODER.decode(text)
    except json.JSONDecodeError as err:
        # A line's own number when given; for a whole document, the line of the error.
        raise RecordError(
            f"malformed JSON: {err.msg} (column {err.colno})", file=file,
            line=err.lineno if line is None else line,
        ) from None
    except ValueError as err:
        raise RecordError(f"not valid JSON: {err}", file=file, line=line) from None
    except RecursionError:
        raise RecordError(
            f"JSON nested too deeply (limit {MAX_JSON_DEPTH} levels)", file=file, line=line
        ) from None
    if "\\u" in text and has_lone_surrogate(value):
        raise RecordError(
            "text holds a lone UTF-16 surrogate escape (e.g. \\ud800), which is not "
            "Unicode; fix the writer or drop the record (--skip-bad)",
            file=file, line=line,
        )
    return value


def has_lone_surrogate(value: Any) -> bool:
    """Whether any string (key or value) in ``value`` holds a lone surrogate (iterative)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False

UTF8_BOM = b"\xef\xbb\xbf"


