"""What a store file may hold: the toolkit's tables, views and macros, and nothing that runs.

A DuckDB file carries SQL: a view, a macro, a column's default or generated expression, a
CHECK constraint all run when the toolkit reads or writes. A store comes from elsewhere, so
before any query touches its data the catalog is checked against what the toolkit itself
creates (:data:`recovery.store.ddl_sql.TABLES_DDL` and :data:`recovery.store.ddl_sql.VIEWS_DDL`,
built in a private in-memory database for comparison):

- each table the toolkit reads is a base table (not a view) with exactly the expected
  columns and types, no generated column, no default but the toolkit's, and no constraint
  but NOT NULL (:func:`check_objects`);
- no view and no macro but the toolkit's, by name (:func:`check_objects`) and, for a store
  of the current schema version, by definition too (:func:`check_definitions`).

Each refusal is one :class:`recovery.errors.InputProblem` line naming the store and the
object. Tables of other names are data the toolkit never reads, and are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.errors import InputProblem
from recovery.store.columns import TABLES

if TYPE_CHECKING:
    import duckdb

_MINE = "database_name = current_database() AND NOT internal"

_ONLY = "a store file holds only the toolkit's tables, views and macros"


@dataclass(frozen=True)
class Reference:
    """What the toolkit creates, as DuckDB describes it.

    Attributes:
        defaults: ``(table, column) -> default`` for the columns that have one.
        views: ``view -> its SQL``.
        macros: ``macro -> its definitions`` (sorted, one per overload).
    """

    defaults: tuple[tuple[tuple[str, str], str], ...]
    views: tuple[tuple[str, str], ...]
    macros: tuple[tuple[str, tuple[str, ...]], ...]


@lru_cache(maxsize=1)
def reference() -> Reference:
    """The toolkit's own tables, views and macros, made in a private in-memory database."""
    import duckdb

    from recovery.store.ddl_sql import TABLES_DDL, VIEWS_DDL

    con = duckdb.connect(":memory:")
    try:
        con.execute(TABLES_DDL)
        con.execute(VIEWS_DDL)
        return Reference(
            defaults=tuple(((t, c), d) for t, c, d in con.execute(
                "SELECT table_name, column_name, column_default FROM duckdb_columns() "
                f"WHERE {_MINE} AND column_default IS NOT NULL").fetchall()),
            views=tuple(con.execute(
                f"SELECT view_name, sql FROM duckdb_views() WHERE {_MINE}").fetchall()),
            macros=_macros(con),
        )
    finally:
        con.close()


def _macros(con: duckdb.DuckDBPyConnection) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every stored macro of the database, by ``schema.name``, with its definitions."""
    found: dict[str, list[str]] = {}
    for schema, name, body in con.execute(
        "SELECT schema_name, function_name, "
        "parameters::VARCHAR || ': ' || coalesce(macro_definition, '') "
        f"FROM duckdb_functions() WHERE {_MINE}"
    ).fetchall():
        key = name if schema == "main" else f"{schema}.{name}"
        found.setdefault(key, []).append(body)
    return tuple(sorted((k, tuple(sorted(v))) for k, v in found.items()))


def check_objects(con: duckdb.DuckDBPyConnection, path: str | Path) -> None:
    """Refuse a store whose catalog holds SQL the toolkit did not write: a toolkit table
    that is a view or has other columns, types, defaults or constraints, or a view or macro
    of a name the toolkit does not create. Reads only the catalog.

    Raises:
        InputProblem: one line naming the store and the object.
    """
    ref = reference()
    views = con.execute(
        f"SELECT schema_name, view_name FROM duckdb_views() WHERE {_MINE} ORDER BY ALL"
    ).fetchall()
    for schema, name in views:
        shown = name if schema == "main" else f"{schema}.{name}"
        if schema == "main" and name in TABLES:
            raise InputProblem(f"store {path}: `{name}` is a view, not a table; {_ONLY}")
        if shown not in dict(ref.views):
            raise InputProblem(f"store {path}: it holds a view `{shown}` that this toolkit "
                               f"did not create; {_ONLY}")
    for name, _ in _macros(con):
        if name not in dict(ref.macros):
            raise InputProblem(f"store {path}: it holds a macro `{name}` that this toolkit "
                               f"did not create (it would replace a function); {_ONLY}")
    for table in _present_tables(con):
        _check_columns(con, path, table, dict(ref.defaults))
        _check_constraints(con, path, table)


def _present_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [row[0] for row in con.execute(
        f"SELECT table_name FROM duckdb_tables() WHERE {_MINE} AND schema_name = 'main' "
        "ORDER BY 1").fetchall() if row[0] in TABLES]


def _check_columns(con: duckdb.DuckDBPyConnection, path: str | Path, table: str,
                   defaults: dict[tuple[str, str], str]) -> None:
    """Refuse a toolkit table with a column of another name, type, default or a generated
    one; a missing column too (only ``trajectories.end_reason``, which an upgrade adds, may
    be missing)."""
    expected = {c.name: c.sql_type for c in TABLES[table]}
    rows = con.execute(
        "SELECT column_name, data_type, column_default, coalesce(is_generated, false) "
        f"FROM duckdb_columns() WHERE {_MINE} AND schema_name = 'main' AND table_name = ? "
        "ORDER BY column_index", [table]).fetchall()
    for name, data_type, default, generated in rows:
        what = f"store {path}: table `{table}`"
        if name not in expected:
            raise InputProblem(f"{what} has a column `{name}` this toolkit does not know; "
                               f"{_ONLY}")
        if data_type != expected[name]:
            raise InputProblem(f"{what}: column `{name}` is {data_type}, not "
                               f"{expected[name]}; {_ONLY}")
        if generated or default not in (None, defaults.get((table, name))):
            raise InputProblem(f"{what}: column `{name}` has an expression of its own "
                               f"({default}); {_ONLY}")
    missing = [n for n in expected if n not in {r[0] for r in rows}
               and (table, n) != ("trajectories", "end_reason")]
    if missing:
        raise InputProblem(f"store {path}: table `{table}` has no column "
                           f"{', '.join(missing)}; it is not a store of this toolkit")


def _check_constraints(con: duckdb.DuckDBPyConnection, path: str | Path, table: str) -> None:
    """Refuse a constraint other than NOT NULL (a CHECK runs SQL on every write)."""
    odd = con.execute(
        "SELECT constraint_type, constraint_text FROM duckdb_constraints() "
        "WHERE database_name = current_database() AND schema_name = 'main' AND table_name = ? "
        "AND constraint_type <> 'NOT NULL' ORDER BY ALL", [table]).fetchall()
    if odd:
        kind, text = odd[0]
        raise InputProblem(f"store {path}: table `{table}` has a {kind} constraint ({text}) "
                           f"this toolkit did not create; {_ONLY}")


def check_definitions(con: duckdb.DuckDBPyConnection, path: str | Path) -> None:
    """Refuse a view or macro of a toolkit name whose definition is not the toolkit's (for
    a store of the current schema version; an upgrade replaces the older definitions).

    Raises:
        InputProblem: one line naming the store and the object.
    """
    ref = reference()
    views = dict(ref.views)
    for name, sql in con.execute(
        f"SELECT view_name, sql FROM duckdb_views() WHERE {_MINE} AND schema_name = 'main'"
    ).fetchall():
        if views.get(name) != sql:
            raise InputProblem(f"store {path}: view `{name}` is not the one this toolkit "
                               f"creates (its definition differs); {_ONLY}")
    macros = dict(ref.macros)
    for name, bodies in _macros(con):
        if macros.get(name) != bodies:
            raise InputProblem(f"store {path}: macro `{name}` is not the one this toolkit "
                               f"creates (its definition differs); {_ONLY}")
