"""DuckDB-native ingest of canonical JSONL: the fast path of :func:`recovery.store.ingest_file`.

DuckDB parses the file (``read_json`` with every leaf typed ``JSON``, so nothing is cast
leniently), SQL checks every field against the rules of :mod:`recovery.schema`, and the rows go
into the store with set-wise SQL. The Python reader stays the reference: whenever the file is
anything but plainly valid (a bad record, a field of another JSON type than the fast path
handles, an unknown key that must go to ``meta``, a blank line, a duplicate trajectory) this
path declines and the caller reads the file in Python, which stores the same rows or reports
the exact file and line. Tests check that both paths give identical stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.formats import MAX_JSON_DEPTH
from recovery.schema import (
    CANONICAL_TRAJECTORY_KEYS,
    CANONICAL_TURN_KEYS,
    END_REASONS,
    end_reason_sql,
    success_turn_sql,
)

if TYPE_CHECKING:
    import duckdb

READ_COLUMNS = (
    "{"
    + ", ".join(f"{key}: 'JSON'" for key in sorted(CANONICAL_TRAJECTORY_KEYS - {"turns"}))
    + ", turns: 'STRUCT("
    + ", ".join(f"{key} JSON" for key in sorted(CANONICAL_TURN_KEYS))
    + ")[]'}"
)
"""Every leaf typed JSON, so that DuckDB casts nothing leniently; SQL checks the types."""

_ODD_NUMBER = r"NaN|Infinity|[0-9][eE][+]?[0-9]{3}"
"""Text outside strings that may be a JSON number the store cannot hold (conservative: a
three-digit exponent within range also sends the file to the Python reader, which decides)."""

_JSON_STRING = r'"(?:[^"\\]|\\.)*"'
"""A JSON string literal (RE2), removed before looking for numbers."""

_END_REASONS = "(" + ", ".join(f"'{r}'" for r in END_REASONS) + ")"

# JSON types as json_type() names them.
_NUMBER = "('BIGINT', 'UBIGINT', 'DOUBLE')"

_TRAJECTORY_INVALID = f"""
    task_id IS NULL OR json_type(task_id) NOT IN ('VARCHAR', 'BIGINT', 'UBIGINT')
    OR task_id->>'$' = ''
    OR (run IS NOT NULL AND json_type(run) <> 'VARCHAR')
    OR (sample IS NOT NULL AND json_type(sample) <> 'UBIGINT')
    OR (budget IS NOT NULL AND json_type(budget) <> 'UBIGINT')
    OR (success IS NOT NULL AND json_type(success) <> 'BOOLEAN')
    OR (reward IS NOT NULL AND json_type(reward) NOT IN {_NUMBER})
    OR (success IS NULL AND reward IS NULL)
    OR (prompt IS NOT NULL AND json_type(prompt) <> 'VARCHAR')
    OR (end_reason IS NOT NULL AND (json_type(end_reason) <> 'VARCHAR'
                                    OR end_reason->>'$' NOT IN {_END_REASONS}))
    OR (meta IS NOT NULL AND json_type(meta) <> 'OBJECT')
    OR turns IS NULL
"""

_TURN_INVALID = f"""
    u.action IS NULL OR json_type(u.action) <> 'VARCHAR'
    OR (u.observation IS NOT NULL AND json_type(u.observation) <> 'VARCHAR')
    OR (u.reward IS NOT NULL AND json_type(u.reward) NOT IN {_NUMBER})
    OR (u.error IS NOT NULL AND json_type(u.error) NOT IN ('BOOLEAN', 'VARCHAR'))
    OR (u.label IS NOT NULL AND (json_type(u.label) NOT IN {_NUMBER}
                                 OR NOT (u.label::DOUBLE BETWEEN -1 AND 1)))
    OR (u.done IS NOT NULL AND json_type(u.done) <> 'BOOLEAN')
    OR (u.meta IS NOT NULL AND json_type(u.meta) <> 'OBJECT')
"""


@dataclass(slots=True)
class FastIngest:
    """What the fast path stored.

    Attributes:
        traj_ids: Ids of the stored trajectories, in file order.
        n_turns: Turns stored.
    """

    traj_ids: list[str]
    n_turns: int


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def eligible(path: Path, head: bytes) -> bool:
    """Whether the fast path can try this file: plain (not compressed), no BOM."""
    return path.suffix != ".gz" and not head.startswith(b"\xef\xbb\xbf")


class Declined(Exception):
    """The fast path cannot store this file as it is; the caller rolls back and reads it in Python."""


def ingest_canonical(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    *,
    n_lines: int,
    default_run: str,
    run_override: str | None,
    success_threshold: float,
    max_record_bytes: int,
) -> FastIngest:
    """Store a canonical JSONL file with DuckDB alone, or decline.

    Must run inside a transaction of its own: a check that fails midway raises
    :class:`Declined` after rows may have been written, and the caller then rolls back and
    reads the file with the Python reader.

    Args:
        con: The store.
        path: The canonical JSONL file (uncompressed).
        n_lines: Lines in the file; a different record count means blank lines, and then
            line numbers could not be kept, so the path declines.
        default_run: Run label for records without one (the file's stem).
        run_override: Run label replacing the records' own.
        success_threshold: ``success`` is ``reward >= success_threshold`` when absent.
        max_record_bytes: The record size limit; the caller has checked that no line is longer
            (DuckDB treats maximum_object_size as a buffer size, not as a limit).

    Returns:
        What was stored.

    Raises:
        Declined: when the Python reader must handle the file.
    """
    with _declining():
        top_keys = ", ".join(_literal(k) for k in sorted(CANONICAL_TRAJECTORY_KEYS))
        turn_keys = ", ".join(_literal(k) for k in sorted(CANONICAL_TURN_KEYS))
        file = _literal(str(path))
        max_size = int(max_record_bytes)
        # read_json with explicit columns would drop unknown keys silently, so first check that
        # no record has a key the canonical schema does not name (those go to meta in Python).
        # The same pass finds what only the Python reader judges exactly: NaN, infinities and
        # numbers too large for a double (DuckDB would store them; JSON has no such numbers),
        # and records with more opening brackets than the depth limit (their exact depth is
        # measured below, the way the Python reader measures it).
        n_records, n_unknown, n_odd_numbers, bracket_heavy = con.execute(
            f"""
            SELECT count(*),
                   count(*) FILTER (WHERE NOT list_has_all([{top_keys}], json_keys(json))
                                       OR NOT list_has_all([{turn_keys}],
                                                           flatten(json_keys(json, '$.turns[*]')))),
                   count(*) FILTER (WHERE regexp_matches(json, {_literal(_ODD_NUMBER)})
                                       AND regexp_matches(regexp_replace(
                                           json, {_literal(_JSON_STRING)}, '""', 'g'),
                                           {_literal(_ODD_NUMBER)})),
                   list(ordinality) FILTER (
                       WHERE length(json) - length(replace(replace(json, '{{', ''), '[', ''))
                             > {MAX_JSON_DEPTH})
            FROM read_json_objects({file}, format = 'newline_delimited',
                                   maximum_object_size = {max(max_size, 1 << 24)})
                 WITH ORDINALITY
            """
        ).fetchall()[0]
        if n_unknown:
            raise Declined("unknown keys go to meta")
        if n_records != n_lines:
            raise Declined("blank lines: record numbers would not be line numbers")
        if n_odd_numbers:
            raise Declined("NaN, Infinity or an overflowing number: the Python reader says which")
        if bracket_heavy:
            _check_depth(con, file, max_size, bracket_heavy)
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _fast_stage AS
            SELECT ordinality::INTEGER AS line, *
            FROM read_json({file}, format = 'newline_delimited', columns = {READ_COLUMNS},
                           maximum_object_size = {max(max_size, 1 << 24)})
                 WITH ORDINALITY
            """
        )

        run_expr = (
            _literal(run_override)
            if run_override
            else f"coalesce(nullif(run->>'$', ''), {_literal(default_run)})"
        )
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _fast_traj AS
            WITH base AS (
                SELECT line,
                       {run_expr}                                   AS run,
                       task_id->>'$'                                AS task_id,
                       (sample->>'$')::INTEGER                      AS given_sample,
                       (budget->>'$')::INTEGER                      AS budget,
                       coalesce((success->>'$')::BOOLEAN,
                                (reward->>'$')::DOUBLE >= {float(success_threshold)!r}) AS success,
                       (reward->>'$')::DOUBLE                       AS reward,
                       len(turns)::INTEGER                          AS n_turns,
                       list_position(list_transform(turns, lambda x: coalesce(
                           (x.done->>'$')::BOOLEAN, false)), true)  AS first_done,
                       nullif(prompt->>'$', '')                     AS prompt,
                       end_reason->>'$'                             AS given_end_reason,
                       CASE WHEN meta IS NULL OR meta::VARCHAR = '{{}}' THEN NULL
                            ELSE meta END                           AS meta
                FROM _fast_stage
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
            SELECT *,
                   substr(sha1(run || chr(31) || task_id || chr(31) || coalesce(budget::VARCHAR, '')
                               || chr(31) || sample::VARCHAR), 1, 16) AS traj_id
            FROM sampled
            """
        )
        clashes = con.execute(
            """
            SELECT (SELECT count(*) - count(DISTINCT traj_id) FROM _fast_traj)
                 + (SELECT count(*) FROM _fast_traj JOIN trajectories USING (traj_id))
            """
        ).fetchone()[0]
        if clashes:
            raise Declined("duplicate trajectories")

        con.execute(
            f"""
            INSERT INTO trajectories BY NAME
            SELECT traj_id, run, task_id, sample, budget, success, reward, n_turns,
                   {success_turn_sql("success", "n_turns", "nullif(first_done, 0)")}
                                                                      AS success_turn,
                   {end_reason_sql("success", "n_turns", "budget", "given_end_reason")}
                                                                      AS end_reason,
                   'canonical' AS format, prompt, {_literal(str(path))} AS source_file,
                   line AS source_line, meta
            FROM _fast_traj ORDER BY line
            """
        )
        con.execute(
            f"""
            INSERT INTO turns BY NAME
            SELECT traj_id, t, u.action->>'$' AS action, NULL AS action_json,
                   coalesce(u.observation->>'$', '') AS observation, NULL AS observation_json,
                   (u.reward->>'$')::DOUBLE AS reward,
                   CASE WHEN json_type(u.error) = 'BOOLEAN'
                        THEN CASE WHEN (u.error->>'$')::BOOLEAN THEN 'explicit' END
                        ELSE nullif(u.error->>'$', '') END AS explicit_error,
                   (u.label->>'$')::DOUBLE AS label,
                   coalesce((u.done->>'$')::BOOLEAN, false) AS done,
                   CASE WHEN u.meta IS NULL OR u.meta::VARCHAR = '{{}}' THEN NULL
                        ELSE u.meta END AS meta
            FROM (
                SELECT f.traj_id, f.line, generate_subscripts(s.turns, 1) AS t, unnest(s.turns) AS u
                FROM _fast_stage s JOIN _fast_traj f USING (line)
            )
            WHERE CASE WHEN {_TURN_INVALID}
                       THEN error('declined: turn needs the Python reader') ELSE true END
            """
        )
        traj_ids = [
            row[0] for row in con.execute("SELECT traj_id FROM _fast_traj ORDER BY line").fetchall()
        ]
        n_turns = con.execute("SELECT coalesce(sum(n_turns), 0) FROM _fast_traj").fetchone()[0]
        con.execute("DROP TABLE _fast_stage")
        con.execute("DROP TABLE _fast_traj")
        return FastIngest(traj_ids=traj_ids, n_turns=int(n_turns))


def _check_depth(
    con: duckdb.DuckDBPyConnection, file: str, max_size: int, lines: list[int]
) -> None:
    """Decline when one of ``lines`` is nested deeper than the readers' limit."""
    from recovery.formats import too_deep

    texts = con.execute(
        f"""
        SELECT json FROM read_json_objects({file}, format = 'newline_delimited',
                                           maximum_object_size = {max(max_size, 1 << 24)})
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
    into :class:`Declined`."""
    import duckdb

    try:
        yield
    except duckdb.Error as err:
        raise Declined(str(err)) from err
