"""DuckDB-native ingest of canonical JSONL: the fast path of :func:`recovery.store.ingest_file`.

Three reads by DuckDB's own JSON reader, the first beside the other two:

1. DuckDB's schema detection over every record (:mod:`recovery.store.fast_probe`, on a
   thread of its own from before the file is hashed) tells every key the file uses and, for
   each field, the JSON types its values take;
2. the trajectories' own fields (the turns skipped), numbered by line, give the trajectories;
3. the turns stream from a parallel read, checked value by value, marked
   (:func:`recovery.marking.mark.staged_kinds_sql`), straight into the store.

Reads 2 and 3 use fixed types: a field that may hold several JSON types (``error`` is ``true``
or a kind, ``task_id`` a string or an integer, ``meta`` an object) is read as ``JSON`` and
checked value by value; the others natively (``action`` as VARCHAR, ``reward`` as DOUBLE,
...). A native read casts leniently (a number read as VARCHAR becomes its digits), so the rows
stand only when the detection says that the file's keys are the canonical schema's and every
natively read field holds values of its own JSON type only.

The Python reader stays the reference: whenever the file is anything but plainly valid (a bad
record, a field of another JSON type than the fast path handles, an unknown or repeated key, a
blank line, a duplicate trajectory, a number JSON cannot hold) this path declines, the caller
rolls back and reads the file in Python, which stores the same rows or reports the exact file
and line. Tests check that both paths give identical stores, on fixed and on random files.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.config import need, opt
from recovery.formats import MAX_JSON_DEPTH
from recovery.schema import (
    END_REASONS,
    MAX_STORED_INT,
    derive_success_sql,
    end_reason_sql,
    success_turn_sql,
)
from recovery.store.digest import traj_id_sql
from recovery.store.fast_probe import (
    TOP_FIELDS,
    TURN_FIELDS,
    Declined,
    SchemaProbe,
    buffer_size,
    sql_literal,
)

if TYPE_CHECKING:
    import duckdb

    from recovery.marking import RuleSet

_ODD_NUMBER = r"NaN|Infinity|[0-9][eE][+]?[0-9]{3}"
"""Text outside strings that may be a JSON number the store cannot hold (conservative: a
three-digit exponent within range also sends the file to the Python reader, which decides).
Only looked for in ``meta`` objects: every other number is read as a number and checked."""

_JSON_STRING = r'"(?:[^"\\]|\\.)*"'
"""A JSON string literal (RE2), removed before looking for numbers."""

_END_REASONS = "(" + ", ".join(f"'{r}'" for r in END_REASONS) + ")"

TURN_STRUCT = "STRUCT(" + ", ".join(
    f'"{name}" {read}' for name, (read, _) in sorted(TURN_FIELDS.items())
) + ")"
TOP_COLUMNS = "{" + ", ".join(
    f"{name}: '{read}'" for name, (read, _) in sorted(TOP_FIELDS.items())
) + "}"
"""The fixed types of the read of the trajectories (their turns are read by the other)."""
TURN_COLUMNS = "{" + ", ".join(
    [f"{name}: '{TOP_FIELDS[name][0]}'" for name in ("budget", "run", "sample", "task_id")]
    + [f"turns: '{TURN_STRUCT}[]'"]
) + "}"
"""The fixed types of the read of the turns (with what names their trajectory)."""

_STAGE_TABLES = ("_fast_traj", "_fast_counts")


@dataclass(slots=True)
class FastIngest:
    """What the fast path stored.

    Attributes:
        n_trajectories: Trajectories stored.
        n_turns: Turns stored.
        marked: Whether error marking ran (the turns went in marked, the spells with them).
    """

    n_trajectories: int
    n_turns: int
    marked: bool = False



@dataclass(frozen=True)
class FastOptions:
    """What the fast path is told of a canonical file, and how to store it."""

    n_lines: int = need("Lines in the file; a different record count means blank lines, and "
                        "then line numbers could not be kept, so the path declines.")
    longest_line: int = need("Bytes of the longest line (the caller has checked it against "
                             "the record size limit): DuckDB's read buffers hold one.")
    default_run: str = need("Run label for records without one (the file's stem).")
    success_threshold: float = need("``success`` is ``reward >= success_threshold`` when "
                                    "absent.")
    run_override: str | None = opt(None, "Run label replacing the records' own.")
    mark: bool = opt(False, "Mark errors (explicit marks, labels, rules, repeats) and store "
                            "the spells.")
    rules: RuleSet | None = opt(None, "The rules for marking; None = the built-in rules.")


def ingest_canonical(
    con: duckdb.DuckDBPyConnection, path: Path, probe: SchemaProbe, options: FastOptions,
) -> FastIngest:
    """Store the canonical JSONL file ``path`` (uncompressed) with DuckDB alone, or decline;
    ``probe`` is its schema detection, started by the caller (who closes it) before the file
    was hashed.

    Must run inside a transaction of its own: a check that fails midway raises
    :class:`Declined` after rows may have been written, and the caller then rolls back and
    reads the file with the Python reader.

    Raises:
        Declined: when the Python reader must handle the file.
    """
    try:
        with _declining():
            return _ingest(con, path, probe, options)
    finally:
        for table in _STAGE_TABLES:
            with suppress(Exception):  # after a failed statement the rollback drops them
                con.execute(f"DROP TABLE IF EXISTS {table}")


def _odd_numbers(expr: str) -> str:
    """True when the JSON text ``expr`` may hold NaN, an infinity or an overflowing number."""
    return (
        f"(regexp_matches({expr}, {sql_literal(_ODD_NUMBER)}) AND regexp_matches(regexp_replace("
        f"{expr}, {sql_literal(_JSON_STRING)}, '\"\"', 'g'), {sql_literal(_ODD_NUMBER)}))"
    )


def _maybe_too_deep(expr: str, levels_above: int) -> str:
    """True when the JSON text ``expr``, nested ``levels_above`` levels deep in its record,
    holds more opening brackets than the depth limit leaves room for (a bound of its depth:
    the record may be too deep, and the Python reader's measure decides). A text shorter than
    that cannot, and is not counted."""
    room = MAX_JSON_DEPTH - levels_above
    return (
        f"(strlen({expr}) > {room} AND "
        f"strlen({expr}) - strlen(replace(replace({expr}, '{{', ''), '[', '')) > {room})"
    )


def _repeated_key(expr: str) -> str:
    """True when an object in the JSON value ``expr`` holds a key twice (DuckDB keeps both in
    a JSON value; the Python reader refuses the record and says which key)."""
    twice = "len(k) > len(list_distinct(k))"
    # json_keys lists the keys of the object itself, and with '$..*' those of every value
    # below it (a value that is not an object has none); the values below are looked at only
    # when the text has a second opening brace
    return (
        f"(len(json_keys({expr})) > len(list_distinct(json_keys({expr})))"
        f" OR (strlen({expr}::VARCHAR) - strlen(replace({expr}::VARCHAR, '{{', '')) > 1 AND "
        f"coalesce(list_bool_or(list_transform(json_keys({expr}, '$..*'), lambda k: {twice})), "
        "false)))"
    )


_TRAJECTORY_INVALID = f"""
    task_id IS NULL
    OR json_type(task_id) NOT IN ('VARCHAR', 'BIGINT', 'UBIGINT') OR task_id->>'$' = ''
    OR (sample IS NOT NULL AND NOT sample BETWEEN 0 AND {MAX_STORED_INT})
    OR (budget IS NOT NULL AND NOT budget BETWEEN 0 AND {MAX_STORED_INT})
    OR (reward IS NOT NULL AND NOT isfinite(reward))
    OR (success IS NULL AND reward IS NULL)
    OR (end_reason IS NOT NULL AND end_reason NOT IN {_END_REASONS})
    OR (meta IS NOT NULL AND (NOT starts_with(meta::VARCHAR, '{{')
                              OR {_odd_numbers("meta::VARCHAR")} OR {_repeated_key("meta")}))
"""

_TURN_INVALID = f"""
    u.action IS NULL
    OR (u.reward IS NOT NULL AND NOT isfinite(u.reward))
    OR (u.error IS NOT NULL AND NOT (u.error::VARCHAR IN ('true', 'false')
                                     OR starts_with(u.error::VARCHAR, '"')))
    OR (u.label IS NOT NULL AND NOT u.label BETWEEN -1 AND 1)
    OR (u.meta IS NOT NULL AND (NOT starts_with(u.meta::VARCHAR, '{{')
                                OR {_odd_numbers("u.meta::VARCHAR")}
                                OR {_repeated_key("u.meta")}))
"""


def _ingest(
    con: duckdb.DuckDBPyConnection, path: Path, probe: SchemaProbe, options: FastOptions,
) -> FastIngest:
    """Ingest one canonical JSONL file with DuckDB's JSON reader, in SQL.

    Long because a sequence of SQL statements over the same staging tables (read, check, count,
    insert); they read best in the order they run.
    """
    n_lines, longest_line = options.n_lines, options.longest_line
    default_run = options.default_run
    run_override, success_threshold = options.run_override, options.success_threshold
    mark, rules = options.mark, options.rules
    if probe.duckdb_path is None:
        raise Declined("DuckDB cannot be given the file's name")
    # DuckDB reads this name as the one file (a file called x[12].jsonl is no pattern); the
    # rows name the file as it was given
    file = sql_literal(probe.duckdb_path)
    max_size = buffer_size(longest_line)
    # the run labels are bound parameters of the statements that name a trajectory's run
    run_expr, run_params = (
        ("$run_override", {"run_override": run_override}) if run_override
        else ("coalesce(nullif(run, ''), $default_run)", {"default_run": default_run})
    )
    # The trajectories' own fields, from a read that skips the turns (their own read follows).
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _fast_traj AS
        WITH base AS (
            SELECT ordinality::INTEGER                          AS line,
                   {run_expr}                                   AS run,
                   task_id->>'$'                                AS task_id,
                   sample::INTEGER                              AS given_sample,
                   budget::INTEGER                              AS budget,
                   {derive_success_sql("success", "reward", "$success_threshold")}
                                                                AS success,
                   reward,
                   nullif(prompt, '')                           AS prompt,
                   end_reason                                   AS given_end_reason,
                   CASE WHEN meta IS NULL OR meta::VARCHAR = '{{}}' THEN NULL
                        ELSE meta END                           AS meta,
                   meta IS NOT NULL AND {_maybe_too_deep("meta::VARCHAR", 1)}
                                                                AS maybe_deep
            FROM read_json({file}, format = 'newline_delimited', columns = {TOP_COLUMNS},
                           maximum_object_size = {max_size})
                 WITH ORDINALITY
            WHERE CASE WHEN {_TRAJECTORY_INVALID}
                       THEN error('declined: record needs the Python reader') ELSE true END
        ),
        sampled AS (
            SELECT *,
                   coalesce(given_sample,
                            (row_number() OVER (PARTITION BY run, task_id, budget
                                                ORDER BY line) - 1)::INTEGER) AS sample
            FROM base
        )
        SELECT *, {traj_id_sql("run", "task_id", "budget", "sample")} AS traj_id
        FROM sampled
        """,
        {**run_params, "success_threshold": float(success_threshold)},
    )
    n_records, clashes, implicit, deep_lines = con.execute(
        """
        SELECT count(*), count(*) - count(DISTINCT traj_id)
                         + (SELECT count(*) FROM _fast_traj JOIN trajectories USING (traj_id)),
               count(*) FILTER (WHERE given_sample IS NULL),
               list(line) FILTER (WHERE maybe_deep)
        FROM _fast_traj
        """
    ).fetchone()
    if n_records != n_lines:
        raise Declined("blank lines: record numbers would not be line numbers")
    if clashes:
        raise Declined("duplicate trajectories")
    if deep_lines:
        # a meta with many brackets may be nested deeper than the readers' limit: its depth
        # is measured the way the Python reader measures it
        _check_depth(con, file, max_size, sorted(deep_lines))
    turn_params = None
    if implicit:
        # A sample numbered by position: the turns' trajectory is found by the record's line
        # (the reader numbers the records, on one thread).
        records = f"""(
            SELECT ids[ordinality] AS traj_id, turns
            FROM read_json({file}, format = 'newline_delimited', columns = {TURN_COLUMNS},
                           maximum_object_size = {max_size}) WITH ORDINALITY,
                 (SELECT list(traj_id ORDER BY line) AS ids FROM _fast_traj))"""
    else:
        # Every record names its sample: its trajectory id follows from the record alone, and
        # the turns stream from a parallel read.
        traj_id = traj_id_sql(run_expr, "(task_id->>'$')", "budget::INTEGER", "sample::INTEGER")
        turn_params = run_params
        records = f"""(
            SELECT {traj_id} AS traj_id, turns
            FROM read_json({file}, format = 'newline_delimited', columns = {TURN_COLUMNS},
                           maximum_object_size = {max_size}))"""
    _insert_turns(con, records, turn_params, mark=mark, rules=rules)
    # Turns per trajectory, and the first one done, from the turns just stored.
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _fast_counts AS
        SELECT f.traj_id, coalesce(c.n_turns, 0)::INTEGER AS n_turns, c.first_done, f.success
        FROM _fast_traj f
        LEFT JOIN (SELECT traj_id, max(t) AS n_turns, min(t) FILTER (WHERE done) AS first_done
                   FROM turns WHERE traj_id IN (SELECT traj_id FROM _fast_traj)
                   GROUP BY traj_id) c USING (traj_id)
        """
    )
    con.execute(
        f"""
        INSERT INTO trajectories BY NAME
        SELECT traj_id, run, task_id, sample, budget, success, reward, n_turns,
               {success_turn_sql("success", "n_turns", "first_done")} AS success_turn,
               {end_reason_sql("success", "n_turns", "budget", "given_end_reason")}
                                                                  AS end_reason,
               'canonical' AS format, prompt, $source_file AS source_file,
               line AS source_line, meta
        FROM _fast_traj JOIN _fast_counts USING (traj_id, success) ORDER BY line
        """,
        {"source_file": str(path)},
    )
    (n_turns,) = con.execute("SELECT coalesce(sum(n_turns), 0) FROM _fast_counts").fetchone()
    if mark and n_turns:
        from recovery.store.marks import mark_new_turns

        mark_new_turns(con, "_fast_counts")
    # Only now are the reads' rows known to hold what the file holds: the detection, which
    # ran alongside, says whether a native read cast anything.
    if probe.check(longest_line) and n_turns:
        raise Declined("turns that are not objects")
    return FastIngest(int(n_records), int(n_turns), marked=mark)


def _insert_turns(
    con: duckdb.DuckDBPyConnection, records: str, params: dict[str, object] | None, *,
    mark: bool, rules: RuleSet | None,
) -> None:
    """Unnest the turns of ``records`` (``traj_id, turns``; a query whose named parameters
    are ``params``), check every value, mark them, and store them, in one statement that
    streams from the file."""
    # hash(action, observation) of every turn and of the one before it, from the list itself
    # (no window, no sort): what the repeat rule compares.
    hashes = "list_transform(turns, lambda u: hash(u.action, coalesce(u.observation, '')))"
    # A turn meta with more brackets than the depth limit allows (less the record, turns and
    # turn levels) may be nested too deep: the Python reader measures it.
    deep_meta = f"(u.meta IS NOT NULL AND {_maybe_too_deep('u.meta::VARCHAR', 3)})"
    staged = f"""(
        SELECT traj_id, t,
               u.action                                        AS action,
               NULL::JSON                                      AS action_json,
               coalesce(u.observation, '')                     AS observation,
               NULL::JSON                                      AS observation_json,
               u.reward                                        AS reward,
               CASE WHEN u.error::VARCHAR = 'true' THEN 'explicit'
                    WHEN u.error::VARCHAR = 'false' THEN NULL
                    ELSE nullif(u.error->>'$', '') END         AS explicit_error,
               u.label                                         AS label,
               coalesce(u.done, false)                         AS done,
               CASE WHEN u.meta IS NULL OR u.meta::VARCHAR = '{{}}' THEN NULL
                    ELSE u.meta END                            AS meta,
               step_hash, prev_hash
        FROM (SELECT traj_id, generate_subscripts(turns, 1) AS t, unnest(turns) AS u,
                     unnest(hashes) AS step_hash,
                     unnest(list_prepend(NULL::UBIGINT, hashes)[1:len(hashes)]) AS prev_hash
              FROM (SELECT traj_id, turns, {hashes} AS hashes FROM {records}
                    WHERE CASE WHEN turns IS NULL
                               THEN error('declined: a record without turns') ELSE true END))
        WHERE CASE WHEN {_TURN_INVALID} OR {deep_meta}
                   THEN error('declined: turn needs the Python reader') ELSE true END
    )"""
    columns = ("t", "action", "action_json", "observation", "observation_json", "reward",
               "explicit_error", "label", "done", "meta")
    if mark:
        from recovery.marking.mark import staged_kinds_sql

        source = staged_kinds_sql(
            con, staged, key="traj_id", formats={"canonical"}, rules=rules,
            keep=[(c, c) for c in columns if c != "t"],
        )
        marks = "kind AS error_kind, kind IS NOT NULL AS is_error"
    else:
        source = f"SELECT * FROM {staged}"
        marks = "NULL AS error_kind, false AS is_error"
    con.execute(
        f"INSERT INTO turns BY NAME SELECT traj_id, {', '.join(columns)}, {marks} FROM ({source})",
        params,
    )


def _check_depth(
    con: duckdb.DuckDBPyConnection, file: str, max_size: int, lines: list[int]
) -> None:
    """Decline when one of ``lines`` is nested deeper than the readers' limit."""
    from recovery.formats import too_deep

    texts = con.execute(
        f"""
        SELECT json FROM read_json_objects({file}, format = 'newline_delimited',
                                           maximum_object_size = {max_size})
             WITH ORDINALITY
        WHERE ordinality IN (SELECT unnest(?::BIGINT[]))
        """,
        [lines],
    ).fetchall()
    if any(too_deep(text) is not None for (text,) in texts):
        raise Declined("a record is nested deeper than the limit: the Python reader says where")


@contextmanager
def _declining() -> Iterator[None]:
    """Turn any DuckDB error (a record DuckDB cannot parse, an ``error()`` raised by a check)
    into :class:`Declined`; so too an error whose message is not valid UTF-8 (DuckDB quotes
    the record in it and may cut a multi-byte character, which Python cannot decode)."""
    import duckdb

    try:
        yield
    except (duckdb.Error, UnicodeDecodeError) as err:
        raise Declined(str(err)) from err
