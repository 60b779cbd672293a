"""Marking: which turns are errors, of which kind, in one set-wise pass over the store.

Marking says, for each turn of a set of trajectories, whether it is an error and of which
kind (:func:`marks_query`); the store writes what it says (``turns.error_kind``,
``turns.is_error``, ``turns.recovery_of`` and the ``error_spells`` table:
:meth:`recovery.store.Store.mark`). Every rule is compiled into one SQL ``CASE`` expression
evaluated over the turns in a single pass; no Python runs per turn.

Precedence (the first source that fires names the kind; see ``docs/errors.md``):

1. an explicit mark in the data (``turns.explicit_error``): always wins;
2. ``labelled``: a process label below 0;
3. user rules (``--rules FILE``), in file order;
4. built-in rule sets for the trajectory's format, then the generic built-in rules
   (exceptions and tracebacks, rejected actions, unparseable actions);
5. ``repeat``: the same action as the previous turn answered by the same observation;
6. ``prm``: a PRM score in ``step_scores`` below a threshold (only when a model is named).

A user rule of kind ``none`` says "not an error": a turn it matches is left unmarked by the
later sources (3 to 6), which is how a built-in rule that mis-fires on some data is silenced.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from recovery.config import opt
from recovery.marking.compile import applicable, compile_rules, rule_condition
from recovery.marking.rules import Rule, RuleSet, builtin_rules
from recovery.scope import traj_scope

if TYPE_CHECKING:
    import duckdb
    import pandas as pd


def _formats(con: duckdb.DuckDBPyConnection, scope: str) -> set[str]:
    """The formats of the trajectories in ``scope`` (a SQL predicate)."""
    rows = con.execute(f"SELECT DISTINCT format FROM trajectories WHERE {scope}").fetchall()
    return {row[0] for row in rows}


@dataclass(frozen=True)
class _KindsOptions:
    """What :func:`_kinds_query` reads and returns besides the kinds."""

    labels: bool = opt(True, "Process labels below 0 mark ``labelled`` errors.")
    prm_model: str | None = opt(None, "Mark ``prm`` errors from this model's scores.")
    keep: Sequence[tuple[str, str]] = opt((), "Turn columns to pass through, as "
                                              "``(expression, alias)`` pairs.")
    source: str = opt("turns", "The relation of turns: the ``turns`` table, or turns staged "
                               "before they are stored, identified by ``key``.")
    key: str = opt("traj_id", "The column naming a trajectory in ``source``.")
    formats: Collection[str] | None = opt(
        None, "The formats of the source's trajectories; None = read from the store.")
    hashes_given: bool = opt(
        False, "The ``repeat`` rule reads the source's ``step_hash`` and ``prev_hash`` "
               "columns (else it compares a turn's hash with the one before by ``lag``).")


def _kinds_query(
    con: duckdb.DuckDBPyConnection, rules: RuleSet, scope: str,
    options: _KindsOptions = _KindsOptions(),
) -> str:
    """A query giving ``<key>, t, kind`` (``NULL`` = no error) for every turn in ``scope``:
    explicit marks, process labels, content rules, then ``repeat`` and ``prm``.

    Long because it assembles one SQL text from pieces (marks, labels, each content rule,
    repeat, prm) that only make sense in the order the query takes them.
    """
    labels, prm_model, keep = options.labels, options.prm_model, options.keep
    source, key, formats = options.source, options.key, options.formats
    hashes_given = options.hashes_given
    formats = _formats(con, scope) if formats is None else set(formats)
    all_rules = list(rules.rules) + (builtin_rules() if rules.builtin else [])
    compiled = compile_rules(all_rules, formats, labels=labels)
    needs_format = any(
        r.formats and not formats <= set(r.formats) for r in applicable(all_rules, formats)
    )
    sources = source
    if needs_format:
        sources += f" JOIN (SELECT {key}, format FROM trajectories) USING ({key})"
    later = []
    if rules.repeat and hashes_given:
        later.append("WHEN step_hash = prev_hash THEN 'repeat'")
    elif rules.repeat:
        # Same action and same observation as the previous turn, compared by a 64-bit hash
        # of the pair so that the window sorts narrow rows only.
        later.append("WHEN step_hash = lag(step_hash) OVER w THEN 'repeat'")
    prm_column = ""
    if prm_model is not None:
        # the model and the threshold are the query's named parameters (see marks_query)
        sources += (
            " LEFT JOIN (SELECT traj_id, t, score AS prm_score FROM step_score_means "
            "WHERE model = $prm_model) USING (traj_id, t)"
        )
        prm_column = ", prm_score"
        later.append("WHEN prm_score < $prm_threshold THEN 'prm'")
    hash_column = ""
    if rules.repeat:
        hash_column = (", step_hash, prev_hash" if hashes_given
                       else ", hash(action, observation) AS step_hash")
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
    window = (
        "WINDOW w AS (PARTITION BY traj_id ORDER BY t)"
        if rules.repeat and not hashes_given else ""
    )
    # One pass over the scoped turns computes the content rules; the window of the repeat
    # rule then sorts narrow rows.
    return f"""
        WITH scoped AS (
            SELECT *{prefilter_sql} FROM {sources} WHERE {scope}
        ),
        content AS (
            SELECT {key}, t, {compiled.kind_sql} AS content_kind{hash_column}{prm_column}{kept}
            FROM scoped
        )
        SELECT {key}, t, {final_kind} AS kind{kept_names}
        FROM content
        {window}
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
        rules: As for :func:`marks_query`.

    Returns:
        Columns ``traj_id, t, kind`` (``None`` where no rule fires), one row per turn.
    """
    with traj_scope(con, list(traj_ids)) as scope:
        kinds = _kinds_query(con, rules or RuleSet(), scope, _KindsOptions(labels=False))
        frame = con.execute(f"SELECT * FROM ({kinds}) ORDER BY traj_id, t").df()
    frame["kind"] = frame["kind"].astype(object).where(frame["kind"].notna(), None)
    return frame


MARK_COLUMNS = ("traj_id", "t", "kind", "old_kind", "old_is_error", "old_recovery_of")
"""The columns of :func:`marks_query`: the new kind (``NULL`` = no error) and the turn's
current marks."""


def marks_query(
    con: duckdb.DuckDBPyConnection,
    rules: RuleSet,
    scope: str,
    *,
    prm_model: str | None = None,
    prm_threshold: float = 0.5,
) -> tuple[str, dict[str, object]]:
    """What marking says of the stored turns of some trajectories, as a query to write from.

    Args:
        con: The store's connection (read for the trajectories' formats).
        rules: User rules and switches.
        scope: A SQL predicate over ``traj_id`` choosing the trajectories
            (:func:`recovery.scope.traj_scope`).
        prm_model: Also mark ``prm`` errors: turns whose score from this model in
            ``step_scores`` is below ``prm_threshold``. ``None`` = no ``prm`` marks.
        prm_threshold: The score below which a turn is a ``prm`` error.

    Returns:
        The query and its named parameters: :data:`MARK_COLUMNS`, one row per turn that is,
        or was, marked (the others need no write).
    """
    kinds = _kinds_query(con, rules, scope, _KindsOptions(
        prm_model=prm_model,
        keep=(("error_kind", "old_kind"), ("is_error", "old_is_error"),
              ("recovery_of", "old_recovery_of")),
    ))
    query = (f"SELECT * FROM ({kinds}) WHERE kind IS NOT NULL OR old_kind IS NOT NULL "
             "OR old_is_error OR old_recovery_of IS NOT NULL")
    params: dict[str, object] = {}
    if prm_model is not None:
        params = {"prm_model": prm_model, "prm_threshold": float(prm_threshold)}
    return query, params


def staged_kinds_sql(
    con: duckdb.DuckDBPyConnection,
    source: str,
    *,
    key: str,
    formats: Collection[str],
    rules: RuleSet | None = None,
    keep: Sequence[tuple[str, str]] = (),
) -> str:
    """A query marking turns that are not stored yet, so that they go in marked.

    The same rules and precedence as :func:`marks_query` on a store holding only these turns,
    without ``prm`` marks (a new turn has no PRM score): explicit marks, labels, content
    rules, then ``repeat``. The store writes the result, then the spells
    (:func:`recovery.store.marks.mark_new_turns`).

    Args:
        con: The connection.
        source: The staged turns (a relation or a parenthesised query): ``<key>``, ``t``,
            every column of the ``turns`` table that rules read (``action``, ``observation``,
            ``reward``, ``label``, ``explicit_error``, ``action_json``, ``observation_json``,
            ``meta``), and ``step_hash``/``prev_hash``: ``hash(action, observation)`` of the
            turn and of the turn before it in its trajectory (NULL for the first).
        key: The column naming a staged trajectory.
        formats: The formats of the staged trajectories.
        rules: As for :func:`marks_query`.
        keep: Source columns to pass through, as ``(expression, alias)`` pairs.

    Returns:
        SQL giving ``<key>, t, kind`` and the ``keep`` columns, one row per staged turn.
    """
    return _kinds_query(con, rules or RuleSet(), "TRUE", _KindsOptions(
        source=source, key=key, formats=formats, hashes_given=True, keep=keep))


def mark_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Error turns per kind in the whole store, most frequent first."""
    return dict(
        con.execute(
            "SELECT error_kind, count(*) FROM turns WHERE is_error "
            "GROUP BY error_kind ORDER BY count(*) DESC, error_kind"
        ).fetchall()
    )


@dataclass(frozen=True, slots=True)
class MarkSummary:
    """What the marks of some trajectories amount to (what ``recovery mark`` prints)."""

    n_trajectories: int
    n_turns: int
    n_spells: int
    n_recovered: int
    n_fatal: int


def mark_summary(
    con: duckdb.DuckDBPyConnection, traj_ids: Sequence[str] | None = None
) -> MarkSummary:
    """Trajectories, turns and error spells (recovered, fatal) of ``traj_ids`` (all: None)."""
    with traj_scope(con, traj_ids) as scope:
        n_traj, n_turns = con.execute(
            f"SELECT count(*), coalesce(sum(n_turns), 0) FROM trajectories WHERE {scope}"
        ).fetchone()
        n_spells, n_recovered, n_fatal = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE recovered), count(*) FILTER (WHERE fatal) "
            f"FROM error_spells WHERE {scope}"
        ).fetchone()
    return MarkSummary(int(n_traj), int(n_turns), int(n_spells), int(n_recovered), int(n_fatal))


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
    with traj_scope(con, traj_ids) as scope:
        counts = []
        formats: dict[str, list[str]] = {}
        for i, rule in enumerate(rules):
            condition = rule_condition(rule)
            if rule.formats:
                formats[f"formats_{i}"] = list(rule.formats)
                condition = f"list_contains($formats_{i}, format) AND {condition}"
            counts.append(f"count(*) FILTER (WHERE {condition})")
        row = con.execute(
            f"SELECT {', '.join(counts)} FROM turns "
            "JOIN (SELECT traj_id, format FROM trajectories) USING (traj_id) "
            f"WHERE {scope}",
            formats or None,
        ).fetchall()[0]
    return {f"{rule.source}: {rule.name}": int(n) for rule, n in zip(rules, row, strict=True)}
