"""Error marking and error spells (DESIGN 4), set-wise in DuckDB.

Marking fills ``turns.error_kind``, ``turns.is_error``, ``turns.recovery_of`` and the
``error_spells`` table for a set of trajectories. Every rule is compiled into one SQL ``CASE``
expression evaluated over the turns in a single pass; no Python runs per turn.

Precedence (the first source that fires names the kind; see ``docs/errors.md``):

1. an explicit mark in the data (``turns.explicit_error``): always wins;
2. ``labelled``: a process label below 0;
3. user rules (``--rules FILE``), in file order;
4. built-in rule sets for the trajectory's format (tau-bench, Inspect), then the generic
   built-in rules (exceptions and tracebacks, rejected actions, unparseable actions);
5. ``repeat``: the same action as the previous turn answered by the same observation;
6. ``prm``: a PRM score in ``step_scores`` below a threshold (only when a model is named).

A user rule of kind ``none`` says "not an error": a turn it matches is left unmarked by the
later sources (3 to 6), which is how a built-in rule that mis-fires on some data is silenced.

Example:
    >>> from recovery.marking import load_rules, mark_store
    >>> counts = mark_store(con, rules=load_rules("my_rules.toml"))
    >>> counts
    {'tool_error': 73}
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

KINDS: tuple[str, ...] = (
    "tool_error",
    "invalid_action",
    "parse_error",
    "repeat",
    "timeout",
    "labelled",
    "prm",
)
"""The built-in error kinds (DESIGN 4); user rules may name others."""

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
    "minisweagent.toml", "balrog.toml", "generic.toml",
)
"""Built-in rule sets, in precedence order: format-specific sets first, generic last."""

_KIND_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_SEGMENT_RE = re.compile(
    r"\.(?P<key>[A-Za-z_][A-Za-z0-9_-]*)"
    r"|\[(?P<index>-?\d+)\]"
    r"|\[(?P<star>\*)\]"
    r"|\[(?P<fkey>[A-Za-z_][A-Za-z0-9_-]*)=(?P<fval>[^\]]*)\]"
)


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
            _parse_field(one)
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
        if value is not None and not math.isfinite(value):
            raise RuleError(f"{label}: '{key}' must be a finite number, got {value}")
    equals = raw.get("equals")
    if equals is not None and not isinstance(equals, (str, int, float, bool)):
        raise RuleError(f"{label}: 'equals' must be a string, number or boolean")
    if isinstance(equals, float) and not math.isfinite(equals):
        raise RuleError(f"{label}: 'equals' must be a finite number, got {equals}")
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
                    "SELECT regexp_matches('', ?)", [_with_flags(pattern, flags)]
                ).fetchall()
            except duckdb.Error as err:
                message = str(err).replace("Invalid Input Error: ", "")
                raise RuleError(f"{label}: bad regular expression {pattern!r}: {message}") from None


def rules_from_toml(data: Mapping[str, Any], source: str) -> RuleSet:
    """A :class:`RuleSet` from a parsed TOML document (see :func:`load_rules`)."""
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
    _check_regexes([
        (r.pattern, r.flags, f"{source}: rule {i}" + (f" ({r.name!r})" if "name" in raw else ""))
        for i, (r, raw) in enumerate(zip(rules, tables, strict=True), start=1)
        if r.pattern is not None
    ])
    return RuleSet(
        rules=rules,
        builtin=data.get("builtin", True),
        repeat=data.get("repeat", True),
        source=source,
    )


def load_rules(path: str | Path) -> RuleSet:
    """Read user rules from a TOML file.

    The file holds ``[[rule]]`` tables (keys as :class:`Rule`) and optionally top-level
    ``builtin = false`` (drop the built-in rule sets) and ``repeat = false``.

    Raises:
        RuleError: for a missing or unreadable file, bad TOML, or a bad rule; the message names
            the file and the rule.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise RuleError(f"{path}: no such rules file") from None
    except IsADirectoryError:
        raise RuleError(f"{path}: is a directory, not a rules file") from None
    except UnicodeDecodeError as err:
        raise RuleError(
            f"{path}: not UTF-8 text (byte {err.start + 1}); a TOML rules file must be UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as err:
        raise RuleError(f"{path}: not valid TOML: {err}") from None
    except OSError as err:
        raise RuleError(f"{path}: cannot read: {err.strerror or err}") from None
    return rules_from_toml(data, str(path))


def builtin_rules() -> list[Rule]:
    """The built-in rules, in precedence order (the files of ``recovery/rules/``)."""
    return list(_builtin_rules())


@functools.cache
def _builtin_rules() -> tuple[Rule, ...]:
    """Read once per process: the packaged files do not change while it runs."""
    from importlib.resources import files

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    rules: list[Rule] = []
    package = files("recovery") / "rules"
    for name in BUILTIN_RULE_FILES:
        data = tomllib.loads((package / name).read_text(encoding="utf-8"))
        rules.extend(rules_from_toml(data, f"recovery/rules/{name}").rules)
    return tuple(rules)


# --------------------------------------------------------------------------------------------
# Compiling rules to SQL


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _with_flags(pattern: str, flags: str) -> str:
    return f"(?{flags}){pattern}" if flags else pattern


@dataclass(frozen=True, slots=True)
class _Segment:
    key: str | None = None
    index: int | None = None
    star: bool = False
    filter_key: str | None = None
    filter_value: str | None = None

    @property
    def fans_out(self) -> bool:
        return self.star or self.filter_key is not None


def _parse_field(path: str) -> tuple[str, list[_Segment]]:
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
            segments.append(_Segment(key=seg.group("key")))
        elif seg.group("index") is not None:
            segments.append(_Segment(index=int(seg.group("index"))))
        elif seg.group("star"):
            segments.append(_Segment(star=True))
        else:
            segments.append(
                _Segment(filter_key=seg.group("fkey"), filter_value=seg.group("fval"))
            )
        pos = seg.end()
    return root, segments


def _json_path(segments: Sequence[_Segment]) -> str:
    parts = ["$"]
    for seg in segments:
        if seg.key is not None:
            parts.append(f'."{seg.key}"')
        else:
            parts.append(f"[{seg.index}]" if seg.index >= 0 else f"[#{seg.index}]")
    return "".join(parts)


def _predicate_sql(rule: Rule, text: str) -> str:
    """The rule's predicates, ANDed, over a VARCHAR expression ``text``."""
    number = f"TRY_CAST({text} AS DOUBLE)"
    terms = []
    if rule.exists is not None:
        terms.append(f"{text} IS {'NOT ' if rule.exists else ''}NULL")
    if rule.equals is not None:
        if isinstance(rule.equals, bool):
            terms.append(f"{text} = {_sql_str('true' if rule.equals else 'false')}")
        elif isinstance(rule.equals, (int, float)):
            terms.append(f"{number} = {float(rule.equals)!r}")
        else:
            terms.append(f"{text} = {_sql_str(rule.equals)}")
    if rule.startswith is not None:
        terms.append(f"starts_with({text}, {_sql_str(rule.startswith)})")
    if rule.contains is not None:
        terms.append(f"contains({text}, {_sql_str(rule.contains)})")
    if rule.lt is not None:
        terms.append(f"{number} < {rule.lt!r}")
    if rule.gt is not None:
        terms.append(f"{number} > {rule.gt!r}")
    if rule.pattern is not None:
        terms.append(f"regexp_matches({text}, {_sql_str(_with_flags(rule.pattern, rule.flags))})")
    return " AND ".join(terms)


def _json_condition(rule: Rule, json_expr: str, segments: list[_Segment], depth: int = 0) -> str:
    """Condition over a JSON expression; ``[*]``/``[k=v]`` become ``list_bool_or`` lambdas."""
    fan = next((i for i, seg in enumerate(segments) if seg.fans_out), None)
    if fan is None:
        text = f"json_extract_string({json_expr}, {_sql_str(_json_path(segments))})"
        return _predicate_sql(rule, text)
    var = f"m{depth}"
    head, seg, tail = segments[:fan], segments[fan], segments[fan + 1:]
    elements = f"json_extract({json_expr}, {_sql_str(_json_path(head) + '[*]')})"
    inner = _json_condition(rule, var, tail, depth + 1)
    if seg.filter_key is not None:
        key_path = _sql_str(_json_path([_Segment(key=seg.filter_key)]))
        values = ", ".join(_sql_str(v) for v in (seg.filter_value or "").split("|"))
        inner = f"json_extract_string({var}, {key_path}) IN ({values}) AND ({inner})"
    return f"coalesce(list_bool_or(list_transform({elements}, lambda {var}: {inner})), false)"


def _fields(rule: Rule) -> tuple[str, ...]:
    return (rule.field,) if isinstance(rule.field, str) else rule.field


def rule_condition(rule: Rule, prefilters: Mapping[str, str] | None = None) -> str:
    """The SQL condition (over a ``turns`` row) under which ``rule`` fires.

    Args:
        rule: The rule.
        prefilters: Text column -> a boolean column that is true wherever any of the rules'
            regular expressions on that column matches (a necessary condition, computed once).
    """
    conditions = [_field_condition(rule, one, prefilters or {}) for one in _fields(rule)]
    return conditions[0] if len(conditions) == 1 else "(" + " OR ".join(conditions) + ")"


def _field_condition(rule: Rule, field_path: str, prefilters: Mapping[str, str]) -> str:
    root, segments = _parse_field(field_path)
    if root in TEXT_FIELDS:
        if rule.pattern is not None and root in prefilters:
            return f"({prefilters[root]} AND {_predicate_sql(rule, root)})"
        return f"({_predicate_sql(rule, root)})"
    if root in NUMBER_FIELDS:
        return f"({_predicate_sql(rule, f'CAST({root} AS VARCHAR)')})"
    # JSON columns are NULL for most formats: test that first, so JSON is parsed only where
    # there is some (DuckDB evaluates a CASE branch's AND terms left to right on the rows left).
    return f"({root} IS NOT NULL AND {_json_condition(rule, root, segments)})"


def _applicable(rules: Iterable[Rule], formats: set[str]) -> list[Rule]:
    return [r for r in rules if not r.formats or formats & set(r.formats)]


@dataclass(frozen=True, slots=True)
class CompiledRules:
    """Rules compiled to SQL over a ``turns`` row.

    Attributes:
        kind_sql: A ``CASE`` naming the kind from explicit marks, labels and content rules:
            NULL = nothing fired; ``'none'`` = a ``none`` rule fired (not an error, and the
            ``repeat`` and ``prm`` rules must not fire either).
        prefilter_columns: Columns to compute below ``kind_sql`` (name -> SQL): one regular
            expression per text column that is the union of every rule's pattern on it, so
            that rows no pattern can match are tested once instead of once per rule.
    """

    kind_sql: str
    prefilter_columns: dict[str, str]


MAX_PREFILTER_PATTERNS = 64
"""Above this many patterns on one text column, no union prefilter is built."""


def compile_rules(
    rules: Sequence[Rule], formats: set[str], *, labels: bool = True
) -> CompiledRules:
    """Compile explicit marks, labels and content rules, in precedence order, to SQL.

    The row-wise ``repeat`` and ``prm`` rules come after (see :func:`mark_store`).

    Args:
        rules: User rules then built-in rules, in precedence order.
        formats: The formats of the trajectories being marked; rules for other formats are
            left out, and a format test is written only when several formats are present.
        labels: Include the ``labelled`` source (process labels below 0).
    """
    applicable = _applicable(rules, formats)
    prefilter_columns: dict[str, str] = {}
    prefilters: dict[str, str] = {}
    for column in TEXT_FIELDS:
        patterns = [
            f"(?{r.flags}:{r.pattern})" if r.flags else f"(?:{r.pattern})"
            for r in applicable
            if r.pattern is not None and column in _fields(r)
        ]
        if 2 <= len(patterns) <= MAX_PREFILTER_PATTERNS:
            name = f"_maybe_{column}"
            union = "|".join(dict.fromkeys(patterns))
            prefilter_columns[name] = f"coalesce(regexp_matches({column}, {_sql_str(union)}), false)"
            prefilters[column] = name
    branches = ["WHEN explicit_error IS NOT NULL THEN explicit_error"]
    if labels:
        branches.append("WHEN label < 0 THEN 'labelled'")
    for rule in applicable:
        condition = rule_condition(rule, prefilters)
        if rule.formats and not formats <= set(rule.formats):
            names = ", ".join(_sql_str(f) for f in rule.formats)
            condition = f"format IN ({names}) AND {condition}"
        branches.append(f"WHEN {condition} THEN {_sql_str(rule.kind)}")
    body = "\n            ".join(branches)
    return CompiledRules(f"CASE\n            {body}\n        END", prefilter_columns)


# --------------------------------------------------------------------------------------------
# Marking


def _scope_clause(con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None) -> str:
    """Store the trajectories to mark in a temporary table; return a SQL predicate on them.

    (A temporary table rather than a registered Arrow table: ``execute`` works even while the
    caller holds an unfinished result on the connection, which ``register`` refuses.)
    """
    if traj_ids is None:
        return "TRUE"
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _mark_scope AS SELECT unnest(?::VARCHAR[]) AS traj_id",
        [list(traj_ids)],
    )
    return "traj_id IN (SELECT traj_id FROM _mark_scope)"


def _formats(con: duckdb.DuckDBPyConnection, scope: str) -> set[str]:
    """The formats of the trajectories in ``scope`` (a SQL predicate)."""
    rows = con.execute(f"SELECT DISTINCT format FROM trajectories WHERE {scope}").fetchall()
    return {row[0] for row in rows}


def _drop_scope(con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None) -> None:
    if traj_ids is not None:
        con.execute("DROP TABLE IF EXISTS _mark_scope")


def _kinds_query(
    con: duckdb.DuckDBPyConnection,
    rules: RuleSet,
    scope: str,
    *,
    labels: bool = True,
    prm_model: str | None = None,
    prm_threshold: float = 0.5,
    keep: Sequence[tuple[str, str]] = (),
) -> str:
    """A query giving ``traj_id, t, kind`` (``NULL`` = no error) for every turn in ``scope``.

    Explicit marks, process labels (``labels``), content rules, then ``repeat`` and ``prm``.
    ``keep`` adds turn columns as ``(expression, alias)`` pairs.
    """
    formats = _formats(con, scope)
    all_rules = list(rules.rules) + (builtin_rules() if rules.builtin else [])
    compiled = compile_rules(all_rules, formats, labels=labels)
    needs_format = any(
        r.formats and not formats <= set(r.formats) for r in _applicable(all_rules, formats)
    )
    sources = "turns"
    if needs_format:
        sources += " JOIN (SELECT traj_id, format FROM trajectories) USING (traj_id)"
    later = []
    if rules.repeat:
        # Same action and same observation as the previous turn, compared by a 64-bit hash
        # of the pair so that the window sorts narrow rows only.
        later.append("WHEN step_hash = lag(step_hash) OVER w THEN 'repeat'")
    prm_column = ""
    if prm_model is not None:
        sources += (
            " LEFT JOIN (SELECT traj_id, t, min(score) AS prm_score FROM step_scores "
            f"WHERE model = {_sql_str(prm_model)} GROUP BY traj_id, t) USING (traj_id, t)"
        )
        prm_column = ", prm_score"
        later.append(f"WHEN prm_score < {float(prm_threshold)!r} THEN 'prm'")
    hash_column = ", hash(action, observation) AS step_hash" if rules.repeat else ""
    prefilter_sql = "".join(
        f", {sql} AS {name}" for name, sql in compiled.prefilter_columns.items()
    )
    final_kind = "nullif(content_kind, 'none')"
    if later:
        final_kind = (
            "CASE WHEN content_kind IS NOT NULL THEN nullif(content_kind, 'none') "
            + " ".join(later)
            + " END"
        )
    kept = "".join(f", {expression} AS {alias}" for expression, alias in keep)
    kept_names = "".join(f", {alias}" for _, alias in keep)
    # One pass over the scoped turns computes the content rules; the window of the repeat
    # rule then sorts narrow rows.
    return f"""
        WITH scoped AS (
            SELECT *{prefilter_sql} FROM {sources} WHERE {scope}
        ),
        content AS (
            SELECT traj_id, t, {compiled.kind_sql} AS content_kind{hash_column}{prm_column}{kept}
            FROM scoped
        )
        SELECT traj_id, t, {final_kind} AS kind{kept_names}
        FROM content
        {"WINDOW w AS (PARTITION BY traj_id ORDER BY t)" if rules.repeat else ""}
        """


def rule_marks(
    con: duckdb.DuckDBPyConnection,
    traj_ids: Sequence[str],
    rules: RuleSet | None = None,
) -> pd.DataFrame:
    """What the rules alone say of each turn, without process labels; writes nothing.

    Marking lets a process label below 0 (``labelled``) win over the content rules. To ask
    what reading the text finds (e.g. to compare a PRM with the rules on data whose labels are
    Monte Carlo values), this evaluates explicit marks, the content rules and ``repeat`` only.

    Args:
        con: The store (a read-only connection will do).
        traj_ids: The trajectories.
        rules: As for :func:`mark_store`.

    Returns:
        Columns ``traj_id, t, kind`` (``None`` where no rule fires), one row per turn.
    """
    scope = _scope_clause(con, list(traj_ids))
    try:
        kinds = _kinds_query(con, rules or RuleSet(), scope, labels=False)
        frame = con.execute(f"SELECT * FROM ({kinds}) ORDER BY traj_id, t").df()
    finally:
        _drop_scope(con, traj_ids)
    frame["kind"] = frame["kind"].astype(object).where(frame["kind"].notna(), None)
    return frame


def mark_store(
    con: duckdb.DuckDBPyConnection,
    rules: RuleSet | None = None,
    traj_ids: Sequence[str] | None = None,
    *,
    prm_model: str | None = None,
    prm_threshold: float = 0.5,
) -> dict[str, int]:
    """Mark error turns and rebuild error spells for some or all trajectories.

    Re-marking is idempotent, and scoped: trajectories outside ``traj_ids`` are not touched.
    Runs inside the caller's transaction when there is one (ingest marks inside its own).

    Args:
        con: The store.
        rules: User rules and switches; ``None`` = the built-in rules and ``repeat`` only.
        traj_ids: Trajectories to (re)mark; ``None`` = the whole store.
        prm_model: Also mark ``prm`` errors: turns whose score from this model in
            ``step_scores`` is below ``prm_threshold``. ``None`` = no ``prm`` marks.
        prm_threshold: The score below which a turn is a ``prm`` error.

    Returns:
        The number of error turns of each kind among the marked trajectories.
    """
    scope = _scope_clause(con, traj_ids)
    try:
        kinds = _kinds_query(
            con, rules or RuleSet(), scope, prm_model=prm_model, prm_threshold=prm_threshold,
            keep=(("error_kind", "old_kind"), ("is_error", "old_is_error"),
                  ("recovery_of", "old_recovery_of")),
        )
        # Only the rows that are or were marked are kept: the spells and the update need
        # nothing else.
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _marks AS
            SELECT * FROM ({kinds})
            WHERE kind IS NOT NULL OR old_kind IS NOT NULL OR old_is_error
                  OR old_recovery_of IS NOT NULL
            """
        )
        _write_spells_and_turns(con, scope)
        return dict(
            con.execute(
                "SELECT kind, count(*) FROM _marks WHERE kind IS NOT NULL "
                "GROUP BY kind ORDER BY count(*) DESC, kind"
            ).fetchall()
        )
    finally:
        con.execute("DROP TABLE IF EXISTS _marks")
        _drop_scope(con, traj_ids)


def rebuild_spells(con: duckdb.DuckDBPyConnection, scope: str = "TRUE") -> None:
    """Recompute ``error_spells`` and ``turns.recovery_of`` from the turns' current marks.

    Use after editing ``turns.error_kind``/``is_error`` by hand. A spell starts at an error
    turn after a non-error turn (or at turn 1) and lasts while turns are errors; it is
    recovered at the next non-error turn (latency = recovered_at - start_t); a spell open at
    the end is unrecovered, and fatal when the episode failed.

    Args:
        con: The store.
        scope: A SQL predicate over ``traj_id`` choosing the trajectories.
    """
    try:
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _marks AS
            SELECT traj_id, t,
                   CASE WHEN is_error THEN coalesce(error_kind, 'explicit') END AS kind,
                   error_kind AS old_kind, is_error AS old_is_error,
                   recovery_of AS old_recovery_of
            FROM turns
            WHERE ({scope}) AND (is_error OR error_kind IS NOT NULL OR recovery_of IS NOT NULL)
            """
        )
        _write_spells_and_turns(con, scope)
    finally:
        con.execute("DROP TABLE IF EXISTS _marks")


def _write_spells_and_turns(con: duckdb.DuckDBPyConnection, scope: str) -> None:
    """Spells from the error rows of ``_marks``, then update the turns that changed.

    Turns ``t`` are 1..n_turns without gaps, so the spells are the runs of consecutive ``t``
    among the error rows alone: the window runs over error rows, not over every turn.
    """
    con.execute(f"DELETE FROM error_spells WHERE {scope}")
    con.execute(
        """
        INSERT INTO error_spells
        WITH errors AS (
            -- Consecutive error turns share t - (their rank among the trajectory's errors).
            SELECT traj_id, t, kind, t - row_number() OVER w AS island
            FROM _marks WHERE kind IS NOT NULL
            WINDOW w AS (PARTITION BY traj_id ORDER BY t)
        ),
        spells AS (
            SELECT traj_id, min(t) AS start_t, max(t) AS end_t, arg_min(kind, t) AS kind
            FROM errors GROUP BY traj_id, island
        )
        SELECT s.traj_id, s.start_t, s.end_t, s.kind,
               s.end_t < tr.n_turns                                         AS recovered,
               CASE WHEN s.end_t < tr.n_turns THEN s.end_t + 1 END          AS recovered_at,
               CASE WHEN s.end_t < tr.n_turns THEN s.end_t + 1 - s.start_t END AS latency,
               coalesce(s.end_t >= tr.n_turns AND NOT tr.success, false)    AS fatal
        FROM spells s JOIN trajectories tr USING (traj_id)
        ORDER BY s.traj_id, s.start_t
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _mark_delta AS
        SELECT coalesce(m.traj_id, r.traj_id) AS traj_id, coalesce(m.t, r.t) AS t,
               m.kind AS kind, r.start_t AS recovery_of
        FROM _marks m
        FULL JOIN (SELECT traj_id, recovered_at AS t, start_t FROM error_spells
                   WHERE recovered AND ({scope})) r
             ON m.traj_id = r.traj_id AND m.t = r.t
        WHERE m.kind IS DISTINCT FROM m.old_kind
           OR (m.kind IS NOT NULL) IS DISTINCT FROM coalesce(m.old_is_error, false)
           OR r.start_t IS DISTINCT FROM m.old_recovery_of
        """
    )
    con.execute(
        """
        UPDATE turns SET error_kind = d.kind, is_error = d.kind IS NOT NULL,
                         recovery_of = d.recovery_of
        FROM _mark_delta d
        WHERE turns.traj_id = d.traj_id AND turns.t = d.t
        """
    )
    con.execute("DROP TABLE IF EXISTS _mark_delta")


def mark_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Error turns per kind in the whole store, most frequent first."""
    return dict(
        con.execute(
            "SELECT error_kind, count(*) FROM turns WHERE is_error "
            "GROUP BY error_kind ORDER BY count(*) DESC, error_kind"
        ).fetchall()
    )


def rule_matches(
    con: duckdb.DuckDBPyConnection,
    rules: Sequence[Rule] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> dict[str, int]:
    """How many turns each rule matches on its own, ignoring precedence (a diagnostic).

    Use it to see what a rule would mark on some data before relying on it, e.g. that no
    generic rule fires on a data set whose errors a format rule already marks.

    Args:
        con: The store.
        rules: The rules to try; ``None`` = the built-in rules.
        traj_ids: Trajectories to look at; ``None`` = the whole store.

    Returns:
        ``"<source>: <rule name>"`` -> the number of turns (of a format the rule applies to)
        that the rule matches, in rule order.
    """
    rules = builtin_rules() if rules is None else list(rules)
    if not rules:
        return {}
    scope = _scope_clause(con, traj_ids)
    try:
        counts = []
        for rule in rules:
            condition = rule_condition(rule)
            if rule.formats:
                names = ", ".join(_sql_str(f) for f in rule.formats)
                condition = f"format IN ({names}) AND {condition}"
            counts.append(f"count(*) FILTER (WHERE {condition})")
        row = con.execute(
            f"SELECT {', '.join(counts)} FROM turns "
            "JOIN (SELECT traj_id, format FROM trajectories) USING (traj_id) "
            f"WHERE {scope}"
        ).fetchall()[0]
    finally:
        _drop_scope(con, traj_ids)
    return {f"{rule.source}: {rule.name}": int(n) for rule, n in zip(rules, row, strict=True)}
