"""Error rules: the model, TOML rule files, and the built-in rule sets.

A rule names a kind, a field and a predicate (a regular expression, a prefix, a comparison...);
:mod:`recovery.marking.compile` turns rules into SQL. Rule files are TOML (``[[rule]]`` tables,
see ``docs/errors.md``); a bad rule is a :class:`RuleError` naming the file and the rule.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recovery.errors import UsageProblem

KINDS: tuple[str, ...] = (
    "tool_error",
    "invalid_action",
    "parse_error",
    "repeat",
    "timeout",
    "labelled",
    "prm",
)
"""The built-in error kinds; user rules may name others."""

NOT_AN_ERROR = "none"
"""A rule of this kind marks a turn as *not* an error: later rules do not fire on it."""

TEXT_FIELDS = ("action", "observation")
NUMBER_FIELDS = ("reward", "label")
JSON_FIELDS = ("action_json", "observation_json", "meta")
RULE_KEYS = frozenset(
    {
        "name", "kind", "field", "pattern", "flags", "equals", "startswith", "contains",
        "lt", "gt", "exists", "formats", "description",
    }
)
PREDICATE_KEYS = ("pattern", "equals", "startswith", "contains", "lt", "gt", "exists")
BUILTIN_RULE_FILES = (
    "taubench.toml", "inspect.toml", "verl.toml", "atif.toml", "sweagent.toml",
    "minisweagent.toml", "generic.toml",
)
"""Built-in rule sets, in precedence order: format-specific sets first, generic last."""

_KIND_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
MAX_RULES_FILE_BYTES = 16 * 1024 * 1024
"""Largest rules file read (the built-in sets are a few kilobytes)."""
MAX_FIELD_INDEX = 2**31
"""A field path's ``[i]`` lies in ``[-MAX_FIELD_INDEX, MAX_FIELD_INDEX)``: DuckDB's JSON paths
refuse an index past 2^64 at bind time, and no real list is longer than 2^31."""

class RuleError(UsageProblem):
    """A rule that cannot be used; the message names the file and the rule.

    A :class:`recovery.errors.UsageProblem`, so every command that reads a ``--rules`` file
    reports it as a usage error (exit status 2) without a traceback.
    """


@dataclass(frozen=True, slots=True)
class Rule:
    """One error rule: a turn whose ``field`` satisfies every given predicate has ``kind``.

    Attributes:
        kind: The error kind it marks (``tool_error``... or a user kind; ``none`` = not an
            error).
        field: ``action`` or ``observation`` (text), ``reward`` or ``label`` (numbers), or a
            path into ``action_json``, ``observation_json`` or ``meta``; or several of these
            (the rule fires when any of them satisfies the predicates). Paths: ``.key``, ``[0]``,
            ``[*]`` (any element) and ``[key=value]`` (any element whose ``key`` equals
            ``value``; ``[key=a|b]`` for either), e.g. ``observation_json[role=tool].content``.
        pattern: A regular expression (RE2 syntax, as DuckDB's ``regexp_matches``) searched
            anywhere in the value.
        flags: Letters among ``i`` (ignore case), ``m`` (``^``/``$`` at line ends) and ``s``
            (``.`` matches a newline).
        equals: The value equals this string, number or boolean.
        startswith: The value starts with this string.
        contains: The value contains this string.
        lt: The value is a number below this.
        gt: The value is a number above this.
        exists: ``True``: the field is present and not null; ``False``: it is absent or null.
        formats: Only trajectories of these formats (``trajectories.format``); empty = all.
        name: A name for messages and docs.
        source: Where the rule came from (a file), for messages.
    """

    kind: str
    field: str | tuple[str, ...]
    pattern: str | None = None
    flags: str = ""
    equals: str | float | bool | None = None
    startswith: str | None = None
    contains: str | None = None
    lt: float | None = None
    gt: float | None = None
    exists: bool | None = None
    formats: tuple[str, ...] = ()
    name: str = ""
    source: str = "<python>"

    def where(self) -> str:
        """``file: rule 'name'``, for messages."""
        return f"{self.source}: rule {self.name!r}"


@dataclass(slots=True)
class RuleSet:
    """The rules that marking applies beyond explicit marks and labels.

    Attributes:
        rules: User rules, applied in order before the built-in rules.
        builtin: Also apply the built-in rule sets (``recovery/rules/*.toml``).
        repeat: Apply the ``repeat`` rule.
        source: The file the rules came from, if any.
    """

    rules: list[Rule] = field(default_factory=list)
    builtin: bool = True
    repeat: bool = True
    source: str | None = None


# --------------------------------------------------------------------------------------------
# Reading and validating rules


def rule_from_dict(
    raw: Mapping[str, Any], *, source: str = "<python>", index: int = 1, check_regex: bool = True
) -> Rule:
    """Validate one rule table (as in a ``[[rule]]`` of a TOML file).

    Long because it checks every field of a rule table in turn, each with its own message; a
    flat list of checks reads best in one place.

    Args:
        raw: The table: ``kind``, ``field`` and at least one predicate (``pattern``,
            ``equals``, ``startswith``, ``contains``, ``lt``, ``gt``, ``exists``); optional
            ``name``, ``flags``, ``formats``, ``description``.
        source: The file it came from, for messages.
        index: 1-based position of the rule in its file, for messages.
        check_regex: Compile ``pattern`` now (with DuckDB's engine); :func:`rules_from_toml`
            checks a whole file's patterns at once instead.

    Raises:
        RuleError: naming the file and the rule when a key, the kind, the field, the regular
            expression or a predicate is wrong.
    """
    name = raw.get("name") if isinstance(raw, Mapping) else None
    label = f"{source}: rule {index}" + (f" ({name!r})" if name else "")
    if not isinstance(raw, Mapping):
        raise RuleError(f"{label}: expected a table, got {type(raw).__name__}")
    unknown = sorted(set(raw) - RULE_KEYS)
    if unknown:
        raise RuleError(
            f"{label}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(RULE_KEYS))})"
        )
    kind = raw.get("kind")
    if not isinstance(kind, str) or not _KIND_RE.match(kind):
        raise RuleError(f"{label}: 'kind' must be a name such as 'tool_error', got {kind!r}")
    field_path = raw.get("field")
    if isinstance(field_path, list) and field_path and all(isinstance(f, str) for f in field_path):
        field_path = tuple(field_path)
    elif not isinstance(field_path, str):
        raise RuleError(f"{label}: 'field' is missing, or not a string or a list of strings")
    for one in (field_path,) if isinstance(field_path, str) else field_path:
        try:
            parse_field(one)
        except ValueError as err:
            raise RuleError(f"{label}: {err}") from None
    if not any(raw.get(key) is not None for key in PREDICATE_KEYS):
        raise RuleError(f"{label}: give at least one of {', '.join(PREDICATE_KEYS)}")
    for key in ("pattern", "startswith", "contains"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise RuleError(f"{label}: '{key}' must be a string")
    for key in ("lt", "gt"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise RuleError(f"{label}: '{key}' must be a number")
        if value is not None and not _is_double(value):
            raise RuleError(f"{label}: '{key}' must be a finite number, got {_shown(value)}")
    equals = raw.get("equals")
    if equals is not None and not isinstance(equals, (str, int, float, bool)):
        raise RuleError(f"{label}: 'equals' must be a string, number or boolean")
    if (isinstance(equals, (int, float)) and not isinstance(equals, bool)
            and not _is_double(equals)):
        raise RuleError(f"{label}: 'equals' must be a finite number, got {_shown(equals)}")
    exists = raw.get("exists")
    if exists is not None and not isinstance(exists, bool):
        raise RuleError(f"{label}: 'exists' must be true or false")
    flags = raw.get("flags", "")
    if not isinstance(flags, str) or set(flags) - set("ims"):
        raise RuleError(f"{label}: 'flags' must be letters among i, m, s; got {flags!r}")
    if flags and raw.get("pattern") is None:
        raise RuleError(f"{label}: 'flags' apply to 'pattern', which is missing")
    formats = raw.get("formats", ())
    if isinstance(formats, str):
        formats = (formats,)
    if not isinstance(formats, (list, tuple)) or not all(isinstance(f, str) for f in formats):
        raise RuleError(f"{label}: 'formats' must be a list of format names")
    pattern = raw.get("pattern")
    if pattern is not None and check_regex:
        _check_regexes([(pattern, flags, label)])
    return Rule(
        kind=kind,
        field=field_path,
        pattern=pattern,
        flags=flags,
        equals=equals,
        startswith=raw.get("startswith"),
        contains=raw.get("contains"),
        lt=None if raw.get("lt") is None else float(raw["lt"]),
        gt=None if raw.get("gt") is None else float(raw["gt"]),
        exists=exists,
        formats=tuple(formats),
        name=name or f"rule {index}",
        source=source,
    )


def _is_double(value: float) -> bool:
    """Whether ``value`` is a finite number a DOUBLE holds (TOML integers are unbounded)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _shown(value: float) -> str:
    """``value`` for a message: an integer too large for a double by its digit count."""
    if isinstance(value, int) and len(str(abs(value))) > 20:
        return f"an integer of {len(str(abs(value)))} digits"
    return str(value)


def _check_regexes(patterns: Sequence[tuple[str, str, str]]) -> None:
    """Compile ``(pattern, flags, label)`` with DuckDB's own engine (RE2), so that a bad
    pattern is reported at load time, naming its rule."""
    if not patterns:
        return
    import duckdb

    with duckdb.connect() as check:
        for pattern, flags, label in patterns:
            try:
                check.execute(
                    "SELECT regexp_matches('', ?)", [with_flags(pattern, flags)]
                ).fetchall()
            except duckdb.Error as err:
                message = str(err).replace("Invalid Input Error: ", "")
                raise RuleError(f"{label}: bad regular expression {pattern!r}: {message}") from None


def rules_from_toml(
    data: Mapping[str, Any], source: str, *, check_regex: bool = True
) -> RuleSet:
    """A :class:`RuleSet` from a parsed TOML document (see :func:`load_rules`).

    ``check_regex=False`` leaves compiling the patterns to the caller (the built-in sets
    check all their patterns with one DuckDB connection).
    """
    known = {"rule", "builtin", "repeat"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise RuleError(
            f"{source}: unknown top-level key(s) {', '.join(unknown)} "
            "(expected [[rule]] tables and optional 'builtin', 'repeat')"
        )
    tables = data.get("rule", [])
    if not isinstance(tables, list):
        raise RuleError(f"{source}: 'rule' must be an array of tables ([[rule]])")
    for key in ("builtin", "repeat"):
        if key in data and not isinstance(data[key], bool):
            raise RuleError(f"{source}: '{key}' must be true or false")
    rules = [
        rule_from_dict(raw, source=source, index=i, check_regex=False)
        for i, raw in enumerate(tables, start=1)
    ]
    if check_regex:
        _check_regexes(_patterns(rules, tables, source))
    return RuleSet(
        rules=rules,
        builtin=data.get("builtin", True),
        repeat=data.get("repeat", True),
        source=source,
    )


def _patterns(
    rules: Sequence[Rule], tables: Sequence[Any], source: str
) -> list[tuple[str, str, str]]:
    """``(pattern, flags, label)`` of the rules that have a pattern, labelled for messages."""
    return [
        (r.pattern, r.flags, f"{source}: rule {i}" + (f" ({r.name!r})" if "name" in raw else ""))
        for i, (r, raw) in enumerate(zip(rules, tables, strict=True), start=1)
        if r.pattern is not None
    ]


def load_rules(path: str | Path) -> RuleSet:
    """Read user rules from a TOML file.

    The file holds ``[[rule]]`` tables (keys as :class:`Rule`) and optionally top-level
    ``builtin = false`` (drop the built-in rule sets) and ``repeat = false``.

    Raises:
        RuleError: for a missing or unreadable file, bad TOML, or a bad rule; the message names
            the file and the rule.
    """
    from recovery.errors import InputProblem
    from recovery.ownfiles import read_own_toml

    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise RuleError(f"{path}: no such rules file")
    if path.is_dir():
        raise RuleError(f"{path}: is a directory, not a rules file")
    try:
        # strict and bounded: too deep, too large, not UTF-8, not TOML, a FIFO
        data = read_own_toml(path, "rules file", max_bytes=MAX_RULES_FILE_BYTES)
    except InputProblem as err:  # a file named by --rules: a usage problem (exit 2)
        raise RuleError(str(err)) from None
    return rules_from_toml(data, str(path))


def builtin_rules() -> list[Rule]:
    """The built-in rules, in precedence order (the files of ``recovery/rules/``)."""
    return list(_builtin_rules())


@functools.cache
def _builtin_rules() -> tuple[Rule, ...]:
    """Read once per process: the packaged files do not change while it runs."""
    from importlib.resources import files

    from recovery.ownfiles import parse_own_toml

    rules: list[Rule] = []
    patterns: list[tuple[str, str, str]] = []
    package = files("recovery") / "rules"
    for name in BUILTIN_RULE_FILES:
        source = f"recovery/rules/{name}"
        data = parse_own_toml((package / name).read_text(encoding="utf-8"), source, "rules file")
        found = rules_from_toml(data, source, check_regex=False).rules
        patterns += _patterns(found, data.get("rule", []), source)
        rules.extend(found)
    _check_regexes(patterns)  # one DuckDB connection for every built-in pattern
    return tuple(rules)


# --------------------------------------------------------------------------------------------
# Field paths

_SEGMENT_RE = re.compile(
    r"\.(?P<key>[A-Za-z_][A-Za-z0-9_-]*)"
    r"|\[(?P<index>-?\d+)\]"
    r"|\[(?P<star>\*)\]"
    r"|\[(?P<fkey>[A-Za-z_][A-Za-z0-9_-]*)=(?P<fval>[^\]]*)\]"
)


def with_flags(pattern: str, flags: str) -> str:
    return f"(?{flags}){pattern}" if flags else pattern


@dataclass(frozen=True, slots=True)
class Segment:
    key: str | None = None
    index: int | None = None
    star: bool = False
    filter_key: str | None = None
    filter_value: str | None = None

    @property
    def fans_out(self) -> bool:
        return self.star or self.filter_key is not None


def _field_index(path: str, digits: str) -> int:
    """The ``[i]`` of a field path, within [-2^31, 2^31) (:data:`MAX_FIELD_INDEX`)."""
    # the length test first: int() of thousands of digits is slow, or refused outright
    index = int(digits) if len(digits) <= 20 else None
    if index is None or not -MAX_FIELD_INDEX <= index < MAX_FIELD_INDEX:
        shown = digits if len(digits) <= 20 else f"of {len(digits.lstrip('-'))} digits"
        raise ValueError(
            f"field {path[:80]!r}: index {shown} is out of range (it must lie in [-2^31, 2^31), "
            f"i.e. {-MAX_FIELD_INDEX} to {MAX_FIELD_INDEX - 1})"
        )
    return index


def parse_field(path: str) -> tuple[str, list[Segment]]:
    """Split ``observation_json[role=tool].content`` into its root and segments."""
    match = re.match(r"^[A-Za-z_]+", path)
    root = match.group(0) if match else ""
    roots = TEXT_FIELDS + NUMBER_FIELDS + JSON_FIELDS
    if root not in roots:
        raise ValueError(
            f"unknown field {path!r}: it must start with one of {', '.join(roots)}"
        )
    rest = path[len(root):]
    if rest and root not in JSON_FIELDS:
        raise ValueError(f"field {path!r}: only {', '.join(JSON_FIELDS)} take a path")
    segments = []
    pos = 0
    while pos < len(rest):
        seg = _SEGMENT_RE.match(rest, pos)
        if not seg:
            raise ValueError(
                f"field {path!r}: cannot read the path at {rest[pos:]!r} "
                "(use .key, [0], [*] or [key=value])"
            )
        if seg.group("key") is not None:
            segments.append(Segment(key=seg.group("key")))
        elif seg.group("index") is not None:
            segments.append(Segment(index=_field_index(path, seg.group("index"))))
        elif seg.group("star"):
            segments.append(Segment(star=True))
        else:
            segments.append(
                Segment(filter_key=seg.group("fkey"), filter_value=seg.group("fval"))
            )
        pos = seg.end()
    return root, segments


