"""Reading a folder store: which paths name one, and the SQL views over exactly the Parquet
files its manifest commits (each read by its literal path), for this toolkit or any DuckDB
client (:func:`views_sql`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.display import printable
from recovery.errors import InputProblem
from recovery.store.folder_survey import open_tree
from recovery.store.manifest import (
    EMPTY,
    MARKER,
    TABLES,
    Manifest,
    Part,
    empty_path,
    keys_of,
    parse_manifest,
)

if TYPE_CHECKING:
    import duckdb

_GLOB = "*?["
"""The characters DuckDB expands in a path it reads."""

_URL_SCHEMES = ("s3://", "s3a://", "gs://", "gcs://", "r2://", "az://", "azure://", "abfss://",
                "http://", "https://", "hf://")


def is_folder_store(path: str | Path | None) -> bool:
    """Whether ``path`` names a folder store rather than a DuckDB file.

    A folder store is: an existing directory; a path written with a trailing ``/`` (a folder
    to create); or an object-storage URL (``s3://bucket/runs``). Anything else is a DuckDB file
    (``runs.duckdb``, or ``runs`` when no such directory exists).

    Raises:
        InputProblem: when ``path`` is neither a file nor a folder (a FIFO, a socket, a
            device): opening it as a store could block forever.
    """
    if path is None:
        return False
    text = str(path)
    if text == ":memory:":
        return False
    if text.startswith(_URL_SCHEMES):
        return True
    _refuse_special(text)
    return text.endswith(("/", os.sep)) or Path(text).is_dir()


def _refuse_special(text: str) -> None:
    """Refuse a store path that names something neither a file nor a folder (through
    links: a link to a FIFO blocks as the FIFO does)."""
    import stat

    try:
        found = os.stat(text.rstrip("/" + os.sep) or text)
    except (OSError, ValueError):
        return  # missing (to be made), or unreadable: the open says why
    if not (stat.S_ISREG(found.st_mode) or stat.S_ISDIR(found.st_mode)):
        raise InputProblem(
            f"store {printable(text)} is neither a file nor a folder (a FIFO, socket or "
            "device): give a DuckDB file or a folder"
        )


def is_url(root: str) -> bool:
    return root.startswith(_URL_SCHEMES)


def sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def quoted_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def literal_path(path: str) -> str:
    """``path`` written so that DuckDB reads that one file: it expands ``*``, ``?`` and
    ``[`` in a path it reads (``[*]`` matches only a ``*``).

    Raises:
        InputProblem: for a path holding both a backslash and one of those characters (DuckDB
            cannot match a backslash in a pattern).
    """
    if not any(c in path for c in _GLOB):
        return path
    if "\\" in path:
        raise InputProblem(
            f"store {printable(path)}: a path holding a backslash and one of * ? [ cannot be "
            "read exactly by DuckDB; give the store a folder name without them"
        )
    return "".join(f"[{c}]" if c in _GLOB else c for c in path)


def table_columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """The columns of every table of the store, with their types (the column registry)."""
    from recovery.store.columns import TABLES as COLUMNS

    return {table: tuple((c.name, c.sql_type) for c in COLUMNS[table]) for table in TABLES}


# --------------------------------------------------------------------------------------------
# The views


def parts_source(root: str, table: str, parts: Sequence[tuple[Part, str, int]]) -> str:
    """A ``SELECT`` of ``table``'s columns from exactly the files ``parts`` (each read by its
    literal path), with their partition values from the manifest, not from the paths."""
    keys = keys_of(table)
    base = root.rstrip("/")
    files = ", ".join(sql_string(literal_path(f"{base}/{part.path}")) for part, _, _ in parts)
    rows = []
    for i, (part, sha, gen) in enumerate(parts):
        values = {"run": part.key, "model": part.key, "sha256": sha, "gen": str(gen)}
        if part.path == empty_path(table):
            values = {**EMPTY}
        rows.append("(" + ", ".join([str(i), *(
            values[key] if key == "gen" else sql_string(values[key]) for key in keys)]) + ")")
    select = ", ".join(
        f"CAST({'k' if name in keys else 'f'}.{quoted_name(name)} AS {kind}) AS {quoted_name(name)}"
        for name, kind in table_columns()[table]
    )
    return (
        f"SELECT {select}\nFROM read_parquet([{files}], hive_partitioning = false) AS f\n"
        f"JOIN (VALUES {', '.join(rows)}) AS k(file_index, {', '.join(keys)}) "
        "ON f.file_index = k.file_index"
    )


def manifest_views_sql(root: str, manifest: Manifest, schema: str = "main") -> str:
    out = []
    for table in TABLES:
        empty = (Part(table, empty_path(table)), "", -1)
        out.append(f"CREATE OR REPLACE VIEW {schema}.{table} AS\n"
                   f"{parts_source(root, table, [empty, *manifest.parts(table)])};")
    return "\n".join(out)


def read_url_manifest(root: str, con: duckdb.DuckDBPyConnection | None) -> Manifest:
    import duckdb

    where = f"{root.rstrip('/')}/{MARKER}"
    reader = con if con is not None else duckdb.connect()
    try:
        (text,) = reader.execute("SELECT content FROM read_text(?)", [literal_path(where)]).fetchone()
    except duckdb.Error as err:
        raise InputProblem(f"store {printable(root)} cannot be read: {err}") from None
    return parse_manifest(text, where)


def views_sql(root: str | Path, schema: str = "main", *,
              con: duckdb.DuckDBPyConnection | None = None) -> str:
    """The views that read a folder store, as SQL any DuckDB client can run.

    Each table's view reads exactly the Parquet files the store's ``_store.json`` commits
    (the latest generation of each ingested file, each model's scores), by their literal
    paths; the SQL is of the store as it is now (build it again to see later writes).

    Args:
        root: The store's folder or URL.
        schema: The schema the views go in.
        con: For a URL: the connection (with its ``httpfs`` secrets) to read the manifest
            through; by default a new one.

    Raises:
        InputProblem: when the folder is not a store, or holds a link or a file it did not
            write.
    """
    root = str(root)
    if is_url(root):
        return manifest_views_sql(root, read_url_manifest(root, con), schema)
    resolved = str(Path(root).resolve())
    literal_path(resolved + "/")
    return manifest_views_sql(resolved, open_tree(Path(resolved))[0], schema)


def refresh_views(con: duckdb.DuckDBPyConnection, root: Path, manifest: Manifest) -> None:
    """Point ``con``'s views at the files ``manifest`` commits."""
    con.execute(manifest_views_sql(str(root), manifest))



def readable_folders(root: str | Path) -> list[str]:
    """The folders a sandboxed connection to the folder store ``root`` must be allowed to read
    (DuckDB's ``allowed_directories``): the folder, and the same path as the views write it
    (DuckDB checks both the pattern and the file it matches)."""
    folder = str(Path(root).resolve()).rstrip("/") + "/"
    return list(dict.fromkeys([folder, literal_path(folder)]))
