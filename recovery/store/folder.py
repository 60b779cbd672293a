"""A store that outgrows one file: a folder of Hive-partitioned zstd Parquet files.

The same tables and columns as the DuckDB store, one Parquet file per (table, run, ingested
file), read through DuckDB views. Layout under the store's folder ``ROOT``::

    _store.json                                         marks the folder as a store
    ingests/sha256=<hex>/gen=<n>/data_0.parquet         one row per ingested file
    trajectories/run=<run>/sha256=<hex>/gen=<n>/data_0.parquet
    turns/run=<run>/sha256=<hex>/gen=<n>/data_0.parquet
    error_spells/run=<run>/sha256=<hex>/gen=<n>/data_0.parquet
    step_scores/model=<model>/data.parquet              one file per PRM model
    _tmp/                                               writes in progress
    .lock                                               held by the one writer at a time

``sha256`` is the ingested file's digest; ``gen`` counts how often its rows were rewritten
(0 at ingest, one more per ``recovery mark``). A write goes under ``_tmp`` first and is then
renamed into place, the ``ingests`` partition last: that rename commits it. The views read only
committed rows (the latest ``gen`` of each ``sha256`` with an ``ingests`` row), so a write killed
midway leaves the store reading exactly as before; the next write removes what it left, and
the generations a re-mark replaced. ``step_scores`` files are replaced whole (a rename).

Everything here is DuckDB reading Parquet: any DuckDB client reads the store with the SQL of
:func:`views_sql`, locally or on object storage (``s3://...`` through DuckDB's ``httpfs``).
Writing needs a local folder (renames are atomic there, not on object storage).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.errors import InputProblem

if TYPE_CHECKING:
    import duckdb

    from recovery.marking import RuleSet
    from recovery.store.ingest import IngestOptions, IngestResult

MARKER = "_store.json"
"""The file that makes a folder a store."""

DATA_TABLES = ("trajectories", "turns", "error_spells")
"""Tables partitioned by run, then by ingested file."""

_VARIABLE = "recovery_folder_store"
"""The DuckDB variable a folder store's connection carries: the folder's path."""

_KEYS = {"ingests": ("sha256", "gen"), "step_scores": ("model",)}
"""Each table's partition keys (the others: run, sha256, gen)."""
_KEY_TYPES = {"run": "VARCHAR", "sha256": "VARCHAR", "gen": "INTEGER", "model": "VARCHAR"}


def _keys(table: str) -> tuple[str, ...]:
    return _KEYS.get(table, ("run", "sha256", "gen"))


_EMPTY = {"run": "", "sha256": "", "gen": "-1"}
"""Partition values of the empty file each table holds, so that a glob never matches
nothing (no committed generation has them)."""


def _hive_types(table: str) -> str:
    return "{" + ", ".join(f"'{k}': {_KEY_TYPES[k]}" for k in _keys(table)) + "}"


_URL_SCHEMES = ("s3://", "s3a://", "gs://", "gcs://", "r2://", "az://", "azure://", "abfss://",
                "http://", "https://", "hf://")


def is_folder_store(path: str | Path | None) -> bool:
    """Whether ``path`` names a folder store rather than a DuckDB file.

    A folder store is: an existing directory; a path written with a trailing ``/`` (a folder
    to create); or an object-storage URL (``s3://bucket/runs``). Anything else is a DuckDB file
    (``runs.duckdb``, or ``runs`` when no such directory exists).
    """
    if path is None:
        return False
    text = str(path)
    if text == ":memory:":
        return False
    return text.startswith(_URL_SCHEMES) or text.endswith(("/", os.sep)) or Path(text).is_dir()


def _is_url(root: str) -> bool:
    return root.startswith(_URL_SCHEMES)


def _sql(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@functools.cache
def _columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """The columns of every table of the DuckDB store, with their types (read once per
    process from the tables' DDL; do not modify the result)."""
    import duckdb

    from recovery.store.ddl import TABLES_DDL

    with duckdb.connect() as con:
        con.execute(TABLES_DDL)
        return {
            table: tuple((row[0], row[1]) for row in con.execute(f"DESCRIBE {table}").fetchall())
            for table in ("ingests", *DATA_TABLES, "step_scores")
        }


def _select(columns: Sequence[tuple[str, str]]) -> str:
    """The columns cast to the store's types (a Parquet file keeps them; this says so)."""
    return ", ".join(f"CAST({_quoted(name)} AS {kind}) AS {_quoted(name)}"
                     for name, kind in columns)


def _glob(root: str, table: str) -> str:
    depth = {"ingests": 2, "step_scores": 1}.get(table, 3)
    return f"{root.rstrip('/')}/{table}/" + "*/" * depth + "*.parquet"


def views_sql(root: str | Path, schema: str = "main") -> str:
    """The views that read a folder store, as SQL any DuckDB client can run.

    ``ingests``, ``trajectories``, ``turns`` and ``error_spells`` keep the rows of the latest
    committed generation of each ingested file; ``step_scores`` reads every model's file.

    Args:
        root: The store's folder or URL.
        schema: The schema the views go in.
    """
    root = str(root)

    def parquet(table: str) -> str:
        return (f"read_parquet({_sql(_glob(root, table))}, hive_partitioning = true, "
                f"hive_types = {_hive_types(table)})")

    out = [
        f"CREATE OR REPLACE VIEW {schema}._generations AS\n"
        f"SELECT sha256, max(gen) AS gen FROM {parquet('ingests')} WHERE gen >= 0 "
        "GROUP BY sha256;"
    ]
    columns = _columns()
    for table in ("ingests", *DATA_TABLES, "step_scores"):
        select = _select(columns[table])
        source = parquet(table)
        committed = (
            "" if table == "step_scores"
            else f" SEMI JOIN {schema}._generations USING (sha256, gen)"
        )
        out.append(
            f"CREATE OR REPLACE VIEW {schema}.{table} AS\nSELECT {select}\n"
            f"FROM {source}{committed};"
        )
    return "\n".join(out)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --------------------------------------------------------------------------------------------
# Opening


def connect_folder(path: str | Path, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection (in memory) whose tables are views over the folder store ``path``.

    Args:
        path: The folder (created with its layout when missing, unless ``read_only``), or an
            object-storage URL (read-only; DuckDB's ``httpfs`` extension reads it).
        read_only: Do not create anything; the folder must be a store.

    Raises:
        InputProblem: when the folder is not a store (or a URL is opened for writing).
    """
    import duckdb

    from recovery.store.ddl import SCHEMA_VERSION, VIEWS_DDL

    root = str(path).rstrip("/") or "/"
    if _is_url(root):
        if not read_only:
            raise InputProblem(
                f"store {path} is on object storage, which this toolkit only reads (a rename "
                "there is not atomic): ingest into a local folder store, then copy the folder"
            )
    else:
        root = str(Path(root).resolve())
        if not read_only:
            create_folder(root)
        elif not (Path(root) / MARKER).is_file():
            raise InputProblem(
                f"{path} is not a store of this toolkit: it has no {MARKER} (create one with "
                f"`recovery ingest FILES --store {str(path).rstrip('/')}/`)"
            )
        version = json.loads((Path(root) / MARKER).read_text(encoding="utf-8")).get(
            "schema_version")
        if version != SCHEMA_VERSION:
            raise InputProblem(
                f"store {path} has schema version {version}; this toolkit reads version "
                f"{SCHEMA_VERSION}: ingest its source files into a new folder store"
            )
    con = duckdb.connect(":memory:")
    con.execute(f"SET VARIABLE {_VARIABLE} = ?", [root])
    try:
        con.execute(views_sql(root))
    except duckdb.Error as err:
        con.close()
        raise InputProblem(f"store {path} cannot be read: {err}") from None
    con.execute(
        "CREATE OR REPLACE VIEW store_info AS SELECT * FROM (VALUES "
        f"('schema_version', '{SCHEMA_VERSION}'), ('layout', 'parquet')) AS info(key, value)"
    )
    con.execute(VIEWS_DDL)
    return con


def folder_root(con: duckdb.DuckDBPyConnection) -> str | None:
    """The folder of a folder store's connection; ``None`` for a DuckDB store."""
    import duckdb

    try:
        (root,) = con.execute(f"SELECT getvariable('{_VARIABLE}')").fetchone()
    except duckdb.Error:
        return None
    return root


def create_folder(root: str | Path) -> None:
    """Make ``root`` a folder store (idempotent): the marker and each table's empty file."""
    import duckdb

    from recovery.store.ddl import SCHEMA_VERSION

    root = Path(root)
    if root.exists() and not root.is_dir():
        raise InputProblem(f"store {root}: a file of that name exists (a folder store is a folder)")
    marker = root / MARKER
    if marker.exists():
        return
    if root.exists() and any(p.name not in (".lock",) for p in root.iterdir()):
        raise InputProblem(
            f"{root} is a folder that is not empty and not a store: give an empty or new "
            "folder for a folder store"
        )
    root.mkdir(parents=True, exist_ok=True)
    tables = _columns()
    with duckdb.connect() as con:
        from recovery.store.ddl import TABLES_DDL

        con.execute(TABLES_DDL)
        for table in ("ingests", *DATA_TABLES, "step_scores"):
            keys = _keys(table)
            folder = root / table
            for key in keys:
                folder = folder / f"{key}={_EMPTY.get(key, '')}"
            folder.mkdir(parents=True, exist_ok=True)
            columns = ", ".join(_quoted(name) for name, _ in tables[table] if name not in keys)
            target = folder / ("data.parquet" if table == "step_scores" else "data_0.parquet")
            con.execute(
                f"COPY (SELECT {columns} FROM {table} WHERE false) TO {_sql(str(target))} "
                "(FORMAT parquet, COMPRESSION zstd)"
            )
    text = json.dumps({"store": "agent-recovery", "layout": "parquet",
                       "schema_version": SCHEMA_VERSION}) + "\n"
    tmp = root / f".{MARKER}.{uuid.uuid4().hex}"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, marker)


# --------------------------------------------------------------------------------------------
# The writer's lock, and what a killed write leaves behind


@contextlib.contextmanager
def writer_lock(root: str | Path) -> Iterator[None]:
    """Hold the folder's write lock (one writer at a time; readers never wait), and first
    remove what earlier writes left: unfinished writes and replaced generations."""
    import fcntl

    root = Path(root)
    with open(root / ".lock", "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            cleanup(root)
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def committed(root: str | Path) -> dict[str, int]:
    """sha256 -> the committed generation, from the ``ingests`` partitions on disk."""
    out: dict[str, int] = {}
    base = Path(root) / "ingests"
    for sha_dir in _children(base):
        sha = _value(sha_dir.name, "sha256")
        if not sha:
            continue
        for gen_dir in _children(sha_dir):
            gen = _int(_value(gen_dir.name, "gen"))
            if gen is not None and gen >= 0 and any(gen_dir.glob("*.parquet")):
                out[sha] = max(gen, out.get(sha, -1))
    return out


def cleanup(root: str | Path) -> None:
    """Remove unfinished writes (``_tmp``), partitions no committed ``ingests`` row names, and
    generations a later one replaced. Run by writers only, under the lock."""
    root = Path(root)
    shutil.rmtree(root / "_tmp", ignore_errors=True)
    keep = committed(root)
    for sha_dir in _children(root / "ingests"):
        sha = _value(sha_dir.name, "sha256")
        if not sha:
            continue
        for gen_dir in _children(sha_dir):
            if _int(_value(gen_dir.name, "gen")) != keep.get(sha):
                shutil.rmtree(gen_dir, ignore_errors=True)
        _remove_if_empty(sha_dir)
    for table in DATA_TABLES:
        for run_dir in _children(root / table):
            for sha_dir in _children(run_dir):
                sha = _value(sha_dir.name, "sha256")
                if not sha:
                    continue  # the empty file's partition
                for gen_dir in _children(sha_dir):
                    if sha not in keep or _int(_value(gen_dir.name, "gen")) != keep[sha]:
                        shutil.rmtree(gen_dir, ignore_errors=True)
                _remove_if_empty(sha_dir)
            _remove_if_empty(run_dir)
    for leftover in (root / "step_scores").glob("*/*.tmp"):
        leftover.unlink(missing_ok=True)


def _children(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir()]
    except FileNotFoundError:
        return []


def _value(name: str, key: str) -> str | None:
    prefix = key + "="
    return name[len(prefix):] if name.startswith(prefix) else None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


# --------------------------------------------------------------------------------------------
# Writing one ingested file's rows


STAGE_MEMORY = "1GB"
"""DuckDB's memory limit for the in-memory store a write is staged in (beyond it, DuckDB
spills to the store's ``_tmp`` folder): what bounds a folder store's memory, whatever the
size of the file."""


def _stage_connection(root: Path, work: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB store for one write, spilling to ``work`` beyond its memory limit."""
    import duckdb

    from recovery.store.ddl import ensure_schema

    spill = work / "spill"
    spill.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(
        ":memory:", config={"temp_directory": str(spill), "memory_limit": STAGE_MEMORY}
    )
    con.execute("SET enable_progress_bar = false")
    ensure_schema(con)
    # The store's own rows, for what a write must check against (a trajectory already there).
    con.execute("CREATE SCHEMA store")
    con.execute(views_sql(str(root), schema="store"))
    return con


def _write_partitions(
    stage: duckdb.DuckDBPyConnection, work: Path, sha: str, gen: int
) -> list[tuple[Path, Path]]:
    """Write the stage's rows as partitions under ``work``; return the (written, final)
    folders to rename, the ``ingests`` one last."""
    renames: list[tuple[Path, Path]] = []
    work.mkdir(parents=True, exist_ok=True)
    tables = _columns()
    for table in (*DATA_TABLES, "ingests"):
        columns = ", ".join(f"x.{_quoted(name)}" for name, _ in tables[table])
        if table == "ingests":
            source = f"SELECT {columns}, {gen} AS gen FROM ingests x"
            keys = "sha256, gen"
        elif table == "trajectories":
            source = f"SELECT {columns}, {_sql(sha)} AS sha256, {gen} AS gen FROM trajectories x"
            keys = "run, sha256, gen"
        else:
            source = (
                f"SELECT {columns}, tr.run, {_sql(sha)} AS sha256, {gen} AS gen "
                f"FROM {table} x JOIN trajectories tr USING (traj_id)"
            )
            keys = "run, sha256, gen"
        target = work / table
        stage.execute(
            f"COPY ({source}) TO {_sql(str(target))} "
            f"(FORMAT parquet, COMPRESSION zstd, PARTITION_BY ({keys}))"
        )
        for leaf in sorted(target.glob("**/gen=*")):
            renames.append((leaf, Path(*leaf.relative_to(work).parts)))
    return renames


def _commit(root: Path, renames: Sequence[tuple[Path, Path]]) -> None:
    """Rename the written partitions into the store, the ``ingests`` one (the commit) last,
    once the others are on disk."""
    *data, marker = renames
    for written, final in data:
        target = root / final
        target.parent.mkdir(parents=True, exist_ok=True)
        _fsync_tree(written)
        os.rename(written, target)
    for folder in {(root / final).parent for _, final in data}:
        _fsync_dir(folder)
    written, final = marker
    (root / final).parent.mkdir(parents=True, exist_ok=True)
    _fsync_tree(written)
    os.rename(written, root / final)
    _fsync_dir((root / final).parent)


def _fsync_tree(folder: Path) -> None:
    for file in folder.rglob("*.parquet"):
        with open(file, "rb") as fh:
            os.fsync(fh.fileno())


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def ingest_into_folder(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    options: IngestOptions,
    *,
    ingest: Callable[..., IngestResult],
) -> IngestResult:
    """Ingest one file into the folder store of ``con``: stage it in an in-memory DuckDB store
    (the same code as a DuckDB store), then write its partitions and commit them.

    Args:
        con: The folder store's connection.
        path: The input.
        options: Ingest options.
        ingest: The DuckDB store's ingest of one file (``ingest_file``'s body), called as
            ``ingest(stage, path, options, seen_in=con)``.

    Raises:
        IngestError: as for a DuckDB store; nothing is written then.
    """
    import duckdb

    from recovery.store.errors import IngestError

    root = Path(folder_root(con))
    with writer_lock(root):
        work = root / "_tmp" / uuid.uuid4().hex
        work.mkdir(parents=True)
        stage = _stage_connection(root, work)
        try:
            result = ingest(stage, path, options, seen_in=con)
            if result.status != "ingested":
                return result
            clash = stage.execute(
                """
                SELECT n.run, n.task_id, n.source_file, n.source_line, o.source_file,
                       o.source_line
                FROM trajectories n JOIN store.trajectories o USING (traj_id)
                ORDER BY n.source_line LIMIT 1
                """
            ).fetchall()
            if clash:
                run, task, file, line, first_file, first_line = clash[0]
                raise IngestError(
                    f"{file}:{line}: trajectory (run={run!r}, task_id={task!r}) with the same "
                    f"sample is already in the store (from {first_file}:{first_line}); give "
                    "samples distinct 'sample' values, or give this file a run label of its "
                    "own (`recovery ingest FILE --run NAME --store S`, then analyse the store);"
                    " nothing from this file was stored"
                )
            try:
                renames = _write_partitions(stage, work / "new", result.sha256, 0)
            except duckdb.Error as err:
                if "File name too long" in str(err):
                    raise IngestError(
                        f"{path}: a run label is too long for a folder name of the store "
                        "(at most 255 bytes, once percent-encoded: 251 ASCII letters and "
                        "digits, fewer otherwise); give the file a shorter one with --run; "
                        "nothing from this file was stored"
                    ) from None
                raise
            _commit(root, renames)
            return result
        finally:
            stage.close()
            shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Re-marking: each ingested file's partitions rewritten as a new generation


def mark_folder(
    con: duckdb.DuckDBPyConnection,
    *,
    rules: RuleSet | None = None,
    runs: Sequence[str] = (),
    prm_model: str | None = None,
    prm_threshold: float = 0.5,
) -> dict[str, int]:
    """:func:`recovery.marking.mark_store` for a folder store: every ingested file holding
    trajectories of ``runs`` (all when empty) gets its partitions rewritten, re-marked, as a
    new generation, committed file by file (a mark stopped midway leaves each file marked the
    old way or the new way, never a mix; running it again finishes it).

    Returns:
        Error turns per kind among the re-marked trajectories.
    """
    from recovery.marking import mark_store

    root = Path(folder_root(con))
    counts: dict[str, int] = {}
    with writer_lock(root):
        for sha, gen in sorted(committed(root).items()):
            work = root / "_tmp" / uuid.uuid4().hex
            work.mkdir(parents=True)
            stage = _stage_connection(root, work)
            try:
                if not _load_file(stage, root, sha, gen, runs, scores=prm_model is not None):
                    continue
                traj_ids = None
                if runs:
                    marks = ", ".join("?" for _ in runs)
                    traj_ids = [row[0] for row in stage.execute(
                        f"SELECT traj_id FROM trajectories WHERE run IN ({marks})", list(runs)
                    ).fetchall()]
                for kind, n in mark_store(
                    stage, rules=rules, traj_ids=traj_ids,
                    prm_model=prm_model, prm_threshold=prm_threshold,
                ).items():
                    counts[kind] = counts.get(kind, 0) + n
                _commit(root, _write_partitions(stage, work / "new", sha, gen + 1))
            finally:
                stage.close()
                shutil.rmtree(work, ignore_errors=True)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _load_file(
    stage: duckdb.DuckDBPyConnection, root: Path, sha: str, gen: int, runs: Sequence[str],
    *, scores: bool,
) -> bool:
    """Copy one ingested file's committed rows from the store into the stage; ``False`` (and
    nothing copied) when ``runs`` are given and the file holds none of them."""
    tables = _columns()
    for table in ("ingests", *DATA_TABLES):
        select = _select(tables[table])
        runs_dir = "" if table == "ingests" else "*/"
        glob = f"{root}/{table}/{runs_dir}sha256={sha}/gen={gen}/*.parquet"
        stage.execute(
            f"INSERT INTO {table} SELECT {select} FROM read_parquet({_sql(glob)}, "
            f"hive_partitioning = true, hive_types = {_hive_types(table)})"
        )
        if table == "trajectories" and runs:
            marks = ", ".join("?" for _ in runs)
            (n,) = stage.execute(
                f"SELECT count(*) FROM trajectories WHERE run IN ({marks})", list(runs)
            ).fetchone()
            if not n:
                return False
    if scores:
        stage.execute(
            "INSERT INTO step_scores SELECT * FROM store.step_scores "
            "WHERE traj_id IN (SELECT traj_id FROM trajectories)"
        )
    return True


# --------------------------------------------------------------------------------------------
# Step scores: one file per model, replaced whole


def replace_folder_step_scores(
    con: duckdb.DuckDBPyConnection, scores: str, model: str
) -> None:
    """Replace ``model``'s scores of the trajectories in ``scores`` (a relation of ``traj_id,
    t, score`` on ``con``) in a folder store: the model's file is rewritten whole, then renamed
    over the old one."""
    root = Path(folder_root(con))
    with writer_lock(root):
        work = root / "_tmp" / uuid.uuid4().hex
        work.mkdir(parents=True)
        try:
            con.execute(
                f"""
                COPY (
                    SELECT traj_id, t, score, model FROM step_scores
                    WHERE model = {_sql(model)}
                      AND traj_id NOT IN (SELECT DISTINCT traj_id FROM {scores})
                    UNION ALL
                    SELECT traj_id::VARCHAR, t::INTEGER, score::DOUBLE, {_sql(model)}
                    FROM {scores}
                ) TO {_sql(str(work / "step_scores"))}
                (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (model))
                """
            )
            written_dirs = list((work / "step_scores").glob("model=*"))
            if not written_dirs:  # no score left for the model: its file goes
                for old in (root / "step_scores").glob("model=*/data.parquet"):
                    model_of = con.execute(
                        f"SELECT DISTINCT model FROM read_parquet({_sql(str(old))}, "
                        "hive_partitioning = true)"
                    ).fetchall()
                    if model_of == [(model,)]:
                        old.unlink()
                return
            (written,) = written_dirs
            target = root / "step_scores" / written.name
            target.mkdir(parents=True, exist_ok=True)
            files = sorted(written.glob("*.parquet"))
            if len(files) == 1:
                _fsync_tree(written)
                os.replace(files[0], target / "data.parquet")
            else:  # DuckDB wrote several files: merge them into one first
                merged = work / "merged.parquet"
                con.execute(
                    f"COPY (SELECT * FROM read_parquet({_sql(str(written / '*.parquet'))})) "
                    f"TO {_sql(str(merged))} (FORMAT parquet, COMPRESSION zstd)"
                )
                os.replace(merged, target / "data.parquet")
            _fsync_dir(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
