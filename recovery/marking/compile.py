"""Compiling rules to SQL: one ``CASE`` expression evaluated over the turns in one pass."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from recovery.marking.rules import (
    NUMBER_FIELDS,
    TEXT_FIELDS,
    Rule,
    Segment,
    parse_field,
    with_flags,
)


def sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _json_path(segments: Sequence[Segment]) -> str:
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
            terms.append(f"{text} = {sql_str('true' if rule.equals else 'false')}")
        elif isinstance(rule.equals, (int, float)):
            terms.append(f"{number} = {float(rule.equals)!r}")
        else:
            terms.append(f"{text} = {sql_str(rule.equals)}")
    if rule.startswith is not None:
        terms.append(f"starts_with({text}, {sql_str(rule.startswith)})")
    if rule.contains is not None:
        terms.append(f"contains({text}, {sql_str(rule.contains)})")
    if rule.lt is not None:
        terms.append(f"{number} < {rule.lt!r}")
    if rule.gt is not None:
        terms.append(f"{number} > {rule.gt!r}")
    if rule.pattern is not None:
        terms.append(f"regexp_matches({text}, {sql_str(with_flags(rule.pattern, rule.flags))})")
    return " AND ".join(terms)


def _json_condition(rule: Rule, json_expr: str, segments: list[Segment], depth: int = 0) -> str:
    """Condition over a JSON expression; ``[*]``/``[k=v]`` become ``list_bool_or`` lambdas."""
    fan = next((i for i, seg in enumerate(segments) if seg.fans_out), None)
    if fan is None:
        text = f"json_extract_string({json_expr}, {sql_str(_json_path(segments))})"
        return _predicate_sql(rule, text)
    var = f"m{depth}"
    head, seg, tail = segments[:fan], segments[fan], segments[fan + 1:]
    elements = f"json_extract({json_expr}, {sql_str(_json_path(head) + '[*]')})"
    inner = _json_condition(rule, var, tail, depth + 1)
    if seg.filter_key is not None:
        key_path = sql_str(_json_path([Segment(key=seg.filter_key)]))
        values = ", ".join(sql_str(v) for v in (seg.filter_value or "").split("|"))
        inner = f"json_extract_string({var}, {key_path}) IN ({values}) AND ({inner})"
    return f"coalesce(list_bool_or(list_transform({elements}, lambda {var}: {inner})), false)"


def rule_fields(rule: Rule) -> tuple[str, ...]:
    return (rule.field,) if isinstance(rule.field, str) else rule.field


def rule_condition(rule: Rule, prefilters: Mapping[str, str] | None = None) -> str:
    """The SQL condition (over a ``turns`` row) under which ``rule`` fires.

    Args:
        rule: The rule.
        prefilters: Text column -> a boolean column that is true wherever any of the rules'
            regular expressions on that column matches (a necessary condition, computed once).
    """
    conditions = [_field_condition(rule, one, prefilters or {}) for one in rule_fields(rule)]
    return conditions[0] if len(conditions) == 1 else "(" + " OR ".join(conditions) + ")"


def _field_condition(rule: Rule, field_path: str, prefilters: Mapping[str, str]) -> str:
    root, segments = parse_field(field_path)
    if root in TEXT_FIELDS:
        if rule.pattern is not None and root in prefilters:
            return f"({prefilters[root]} AND {_predicate_sql(rule, root)})"
        return f"({_predicate_sql(rule, root)})"
    if root in NUMBER_FIELDS:
        return f"({_predicate_sql(rule, f'CAST({root} AS VARCHAR)')})"
    # JSON columns are NULL for most formats: test that first, so JSON is parsed only where
    # there is some (DuckDB evaluates a CASE branch's AND terms left to right on the rows left).
    return f"({root} IS NOT NULL AND {_json_condition(rule, root, segments)})"


def applicable(rules: Iterable[Rule], formats: set[str]) -> list[Rule]:
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

    The row-wise ``repeat`` and ``prm`` rules come after (see :func:`recovery.marking.mark.marks_query`).

    Args:
        rules: User rules then built-in rules, in precedence order.
        formats: The formats of the trajectories being marked; rules for other formats are
            left out, and a format test is written only when several formats are present.
        labels: Include the ``labelled`` source (process labels below 0).
    """
    chosen = applicable(rules, formats)
    prefilter_columns: dict[str, str] = {}
    prefilters: dict[str, str] = {}
    for column in TEXT_FIELDS:
        patterns = [
            f"(?{r.flags}:{r.pattern})" if r.flags else f"(?:{r.pattern})"
            for r in chosen
            if r.pattern is not None and column in rule_fields(r)
        ]
        if 2 <= len(patterns) <= MAX_PREFILTER_PATTERNS:
            name = f"_maybe_{column}"
            union = "|".join(dict.fromkeys(patterns))
            prefilter_columns[name] = f"coalesce(regexp_matches({column}, {sql_str(union)}), false)"
            prefilters[column] = name
    branches = ["WHEN explicit_error IS NOT NULL THEN explicit_error"]
    if labels:
        branches.append("WHEN label < 0 THEN 'labelled'")
    for rule in chosen:
        condition = rule_condition(rule, prefilters)
        if rule.formats and not formats <= set(rule.formats):
            names = ", ".join(sql_str(f) for f in rule.formats)
            condition = f"format IN ({names}) AND {condition}"
        branches.append(f"WHEN {condition} THEN {sql_str(rule.kind)}")
    body = "\n            ".join(branches)
    return CompiledRules(f"CASE\n            {body}\n        END", prefilter_columns)


