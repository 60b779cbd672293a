"""Error marking and error spells, set-wise in DuckDB.

- :mod:`recovery.marking.rules`: the rule model, TOML rule files, the built-in rule sets;
- :mod:`recovery.marking.compile`: rules to one SQL ``CASE`` expression;
- :mod:`recovery.marking.mark`: what marking says of the store's turns (:func:`marks_query`;
  the store writes it: :meth:`recovery.store.Store.mark`);
- :mod:`recovery.marking.spells`: the one definition of an error spell.

Example:
    >>> from recovery.marking import load_rules
    >>> counts = store.mark(rules=load_rules("my_rules.toml"))
    >>> counts
    {'tool_error': 73}
"""

from __future__ import annotations

from recovery.marking.compile import CompiledRules, compile_rules, rule_condition
from recovery.marking.mark import MARK_COLUMNS, mark_counts, marks_query, rule_marks, rule_matches
from recovery.marking.rules import (
    BUILTIN_RULE_FILES,
    KINDS,
    NOT_AN_ERROR,
    Rule,
    RuleError,
    RuleSet,
    builtin_rules,
    load_rules,
    rule_from_dict,
    rules_from_toml,
)
from recovery.marking.spells import (
    SPELL_COLUMNS,
    error_spells_sql,
    spells_of_frames,
)

__all__ = [
    "BUILTIN_RULE_FILES",
    "KINDS",
    "MARK_COLUMNS",
    "NOT_AN_ERROR",
    "SPELL_COLUMNS",
    "CompiledRules",
    "Rule",
    "RuleError",
    "RuleSet",
    "builtin_rules",
    "compile_rules",
    "error_spells_sql",
    "load_rules",
    "mark_counts",
    "marks_query",
    "rule_condition",
    "rule_from_dict",
    "rule_marks",
    "rule_matches",
    "rules_from_toml",
    "spells_of_frames",
]
