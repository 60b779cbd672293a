"""A store that outgrows one file: a folder of Hive-partitioned zstd Parquet files.

The same tables and columns as the DuckDB store, one Parquet file per (table, run, ingested
file), read through DuckDB views. Layout under the store's folder ``ROOT``::

    _store.json                                         the manifest: what is committed
    _journal.json                                       the last write's record
    ingests/sha256=<hex>/gen=<n>/data_0.parquet         one row per ingested file
    trajectories/run=<run>/sha256=<hex>/gen=<n>/data_0.parquet
    turns/run=<run>/sha256=<hex>/gen=<n>/data_0.parquet
    error_spells/run=<run>/sha256=<hex>/gen=<n>/data_0.parquet
    step_scores/model=<model>/data.parquet              one file per PRM model
    _tmp/                                               writes in progress
    .lock                                               held by the one writer at a time

``sha256`` is the ingested file's digest; ``gen`` counts how often its rows were rewritten
(0 at ingest, one more per ``recovery mark``). ``_store.json`` lists every committed Parquet
file with its partition values (run, sha256, gen, model). A write goes under ``_tmp`` first,
is renamed into place (the ``ingests`` partition last), and is committed by replacing
``_store.json`` (one rename). The views read exactly the files the manifest lists, each by its
literal path, so a write killed midway leaves the store reading exactly as before; the next
write removes what it left, and the generations a re-mark replaced, but only the folders the
store's journal names (:mod:`recovery.store.folder_journal`).

Opening a local store first walks its tree without following links and refuses (an
:class:`~recovery.errors.InputProblem` naming the path) a symbolic link anywhere in it, a
file or folder it did not write (an extra file in a committed partition, a stray folder, a
damaged manifest), or a manifest older than the store's last commit: nothing is read,
written or removed then. The manifest and the survey live in :mod:`recovery.store.manifest`
and :mod:`recovery.store.folder_survey`.

Everything here is DuckDB reading Parquet: any DuckDB client reads the store with the SQL of
:func:`views_sql`, locally or on object storage (``s3://...`` through DuckDB's ``httpfs``).
Writing needs a local folder (renames are atomic there, not on object storage).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.display import printable
from recovery.errors import InputProblem
from recovery.store.base import Store, relation_of
from recovery.store.folder_journal import JOURNAL, commit, fsync_tree
from recovery.store.folder_survey import (
    check_half_made,
    cleanup,
    entries,
    is_dir,
    open_tree,
    remove_if_empty,
)
from recovery.store.ingest import IngestOptions, IngestResult
from recovery.store.manifest import (
    DATA_TABLES,
    EMPTY,
    LOCK,
    MARKER,
    TABLES,
    UNFINISHED,
    Manifest,
    Part,
    data_folder,
    empty_path,
    encode,
    fsync_dir,
    keys_of,
    link_refused,
    lstat,
    parse_manifest,
    scores_path,
    write_manifest,
)

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    import duckdb

    from recovery.marking import RuleSet
    from recovery.schema import Trajectory

__all__ = ["DATA_TABLES", "JOURNAL", "LOCK", "MARKER", "TABLES", "FolderStore", "Manifest",
           "Part", "create_folder", "is_folder_store", "open_folder", "parse_manifest",
           "readable_folders", "remove_unused_folder", "views_sql", "writer_lock"]

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


def _is_url(root: str) -> bool:
    return root.startswith(_URL_SCHEMES)


def _sql(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(path: str) -> str:
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


def _columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """The columns of every table of the store, with their types (the column registry)."""
    from recovery.store.columns import TABLES as COLUMNS

    return {table: tuple((c.name, c.sql_type) for c in COLUMNS[table]) for table in TABLES}


# --------------------------------------------------------------------------------------------
# The views


def _source(root: str, table: str, parts: Sequence[tuple[Part, str, int]]) -> str:
    """A ``SELECT`` of ``table``'s columns from exactly the files ``parts`` (each read by its
    literal path), with their partition values from the manifest, not from the paths."""
    keys = keys_of(table)
    base = root.rstrip("/")
    files = ", ".join(_sql(_literal(f"{base}/{part.path}")) for part, _, _ in parts)
    rows = []
    for i, (part, sha, gen) in enumerate(parts):
        values = {"run": part.key, "model": part.key, "sha256": sha, "gen": str(gen)}
        if part.path == empty_path(table):
            values = {**EMPTY}
        rows.append("(" + ", ".join([str(i), *(
            values[key] if key == "gen" else _sql(values[key]) for key in keys)]) + ")")
    select = ", ".join(
        f"CAST({'k' if name in keys else 'f'}.{_quoted(name)} AS {kind}) AS {_quoted(name)}"
        for name, kind in _columns()[table]
    )
    return (
        f"SELECT {select}\nFROM read_parquet([{files}], hive_partitioning = false) AS f\n"
        f"JOIN (VALUES {', '.join(rows)}) AS k(file_index, {', '.join(keys)}) "
        "ON f.file_index = k.file_index"
    )


def _views_sql(root: str, manifest: Manifest, schema: str = "main") -> str:
    out = []
    for table in TABLES:
        empty = (Part(table, empty_path(table)), "", -1)
        out.append(f"CREATE OR REPLACE VIEW {schema}.{table} AS\n"
                   f"{_source(root, table, [empty, *manifest.parts(table)])};")
    return "\n".join(out)


def _read_url_manifest(root: str, con: duckdb.DuckDBPyConnection | None) -> Manifest:
    import duckdb

    where = f"{root.rstrip('/')}/{MARKER}"
    reader = con if con is not None else duckdb.connect()
    try:
        (text,) = reader.execute("SELECT content FROM read_text(?)", [_literal(where)]).fetchone()
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
    if _is_url(root):
        return _views_sql(root, _read_url_manifest(root, con), schema)
    resolved = str(Path(root).resolve())
    _literal(resolved + "/")
    return _views_sql(resolved, open_tree(Path(resolved))[0], schema)


def _refresh(con: duckdb.DuckDBPyConnection, root: Path, manifest: Manifest) -> None:
    """Point ``con``'s views at the files ``manifest`` commits."""
    con.execute(_views_sql(str(root), manifest))


# --------------------------------------------------------------------------------------------
# Opening


def open_folder(path: str | Path, *, read_only: bool = False) -> FolderStore:
    """The folder store ``path``: a DuckDB connection (in memory) whose tables are views over
    its Parquet files.

    The views read the store as it was when it was opened (and after each write made through
    this connection); open it again to see another process's later writes.

    Args:
        path: The folder (created with its layout when missing, unless ``read_only``), or an
            object-storage URL (read-only; DuckDB's ``httpfs`` extension reads it).
        read_only: Do not create anything; the folder must be a store.

    Raises:
        InputProblem: when the folder is not a store, its manifest is damaged, it holds a link
            or a file it did not write, or a URL is opened for writing.
    """
    import duckdb

    from recovery.store.ddl import SCHEMA_VERSION, VIEWS_DDL

    root = str(path).rstrip("/") or "/"
    con = duckdb.connect(":memory:")
    try:
        if _is_url(root):
            if not read_only:
                raise InputProblem(
                    f"store {printable(path)} is on object storage, which this toolkit only "
                    "reads (a rename there is not atomic): ingest into a local folder store, "
                    "then copy the folder"
                )
            manifest = _read_url_manifest(root, con)
        else:
            root = str(Path(root).resolve())
            _literal(root + "/")
            found = lstat(Path(root))
            if found is not None and not is_dir(found):
                raise InputProblem(f"store {printable(path)}: something that is not a folder "
                                   "is there (a folder store is a folder)")
            if not read_only:
                create_folder(root)
            manifest, _ = open_tree(Path(root))
        try:
            con.execute(_views_sql(root, manifest))
        except duckdb.Error as err:
            raise InputProblem(f"store {printable(path)} cannot be read: {err}") from None
    except BaseException:
        con.close()
        raise
    con.execute(
        "CREATE OR REPLACE VIEW store_info AS SELECT * FROM (VALUES "
        f"('schema_version', '{SCHEMA_VERSION}'), ('layout', 'parquet')) AS info(key, value)"
    )
    con.execute(VIEWS_DDL)
    return FolderStore(con, str(path), root=root, read_only=read_only)


class FolderStore(Store):
    """A folder of Parquet files read through views: each write stages its rows in an
    in-memory DuckDB store, writes them as new Parquet files, and commits them by replacing
    the manifest.

    Attributes:
        root: The store's folder (resolved), or its object-storage URL.
    """

    kind = "folder"

    def __init__(self, con: duckdb.DuckDBPyConnection, location: str, *, root: str,
                 read_only: bool = False) -> None:
        super().__init__(con, location, read_only=read_only)
        self.root = root

    def _writable_root(self, what: str) -> Path:
        self._check_writable(what)
        return Path(self.root)

    def ingest_file(self, path: str | Path, options: IngestOptions | None = None) -> IngestResult:
        """See :meth:`recovery.store.Store.ingest_file`: the file is staged in an in-memory
        DuckDB store (the same code as a DuckDB store), then its partitions are written and
        committed."""
        return _ingest_into_folder(self.con, self._writable_root("ingest"), Path(path),
                                   options or IngestOptions())

    def _ingest_trajectories(self, trajectories: Iterable[Trajectory], source: str,
                             options: IngestOptions) -> IngestResult:
        """Refused: a folder store is partitioned by ingested file (write the trajectories as
        canonical JSONL with :func:`recovery.schema.trajectory_to_dict` and ingest the file).

        Raises:
            IngestError: always.
        """
        from recovery.store.errors import IngestError

        raise IngestError(
            f"{source}: trajectories built in Python go into a DuckDB store; a folder store "
            "takes files (write them as canonical JSONL, then ingest the file)"
        )

    def _mark(self, rules: RuleSet | None, traj_ids: Sequence[str] | None,
              prm_model: str | None, prm_threshold: float) -> dict[str, int]:
        """Every ingested file holding some of the trajectories gets its partitions rewritten,
        re-marked, as a new generation, committed file by file (a mark stopped midway leaves
        each file marked the old way or the new way, never a mix; running it again finishes
        it)."""
        return _mark_folder(self.con, Path(self.root), rules=rules, traj_ids=traj_ids,
                            prm_model=prm_model, prm_threshold=prm_threshold)

    def replace_step_scores(self, scores: Any, model: str) -> None:
        """See :meth:`recovery.store.Store.replace_step_scores`: the model's file is
        rewritten whole, then renamed over the old one (a new model's file is committed in
        ``_store.json``)."""
        root = self._writable_root("write step scores")
        name, done = relation_of(self.con, scores)
        try:
            _replace_folder_step_scores(self.con, root, name, model)
        finally:
            done()

    def remove_if_unused(self) -> bool:
        """See :meth:`recovery.store.Store.remove_if_unused`: the folder goes only when,
        under its writer's lock (not waited for), it still holds nothing but its empty
        layout."""
        self.close()
        return remove_unused_folder(self.root)


def _check_new_folder(root: Path) -> None:
    """Refuse to make a store in ``root`` unless it is missing, empty (but for a lock), or
    this toolkit's half-made store (:data:`UNFINISHED` there, and only its layout)."""
    found = lstat(root)
    if found is None:
        return
    if not is_dir(found):
        raise InputProblem(f"store {printable(root)}: something that is not a folder is there "
                           "(a folder store is a folder)")
    if lstat(root / UNFINISHED) is not None:
        check_half_made(root)
    elif any(e.name != LOCK for e in entries(root)):
        raise InputProblem(
            f"{printable(root)} is a folder that is not empty and not a store: give an empty "
            "or new folder for a folder store"
        )


def create_folder(root: str | Path) -> None:
    """Make ``root`` a folder store (idempotent): the manifest and each table's empty file,
    made under the writer's lock; a store whose making (or removal) was stopped midway is
    made whole."""
    root = Path(root)
    if lstat(root / MARKER) is not None:
        return
    _check_new_folder(root)
    with _locked(root):
        if lstat(root / MARKER) is None:
            _make_layout(root)


def _mark_unfinished(root: Path) -> None:
    """Leave :data:`UNFINISHED` in ``root`` (durably) while its layout is made or removed."""
    fd = os.open(root / UNFINISHED, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    os.close(fd)
    fsync_dir(root)


def _make_layout(root: Path) -> None:
    """Write a new store's empty files and manifest (the lock held, no manifest there),
    :data:`UNFINISHED` marking the folder until the manifest is in place."""
    import duckdb

    from recovery.store.ddl import TABLES_DDL

    _check_new_folder(root)
    _mark_unfinished(root)
    tables = _columns()
    with duckdb.connect() as con:
        con.execute(TABLES_DDL)
        for table in TABLES:
            keys = keys_of(table)
            target = root / empty_path(table)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)  # one a stopped making left: written again
            columns = ", ".join(_quoted(name) for name, _ in tables[table] if name not in keys)
            con.execute(
                f"COPY (SELECT {columns} FROM {table} WHERE false) TO {_sql(str(target))} "
                "(FORMAT parquet, COMPRESSION zstd)"
            )
    write_manifest(root, Manifest())
    (root / UNFINISHED).unlink()
    fsync_dir(root)


# --------------------------------------------------------------------------------------------
# The writer's lock, and what a killed write leaves behind


def _read_only(root: Path, err: OSError) -> InputProblem:
    return InputProblem(
        f"store {printable(root)} is read-only (its lock file {LOCK} cannot be opened for "
        f"writing: {err.strerror}); commands that only read it (analyze, sql) work, writing "
        "needs write access to the folder"
    )


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold the store's lock file (created when missing, never through a link)."""
    import fcntl

    lock = root / LOCK
    for _ in range(10):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # the folder is missing: made (again)
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise InputProblem(f"store {printable(root)} cannot be created: "
                                   f"{err.strerror}") from None
            continue
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise link_refused(root, lock) from None
            if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise _read_only(root, err) from None
            raise InputProblem(f"store {printable(root)}: {LOCK} cannot be opened: "
                               f"{err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held, now = os.fstat(fd), lstat(lock)
            if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                continue  # the store was removed (or made again) while this waited
            yield
            return
        finally:
            os.close(fd)
    raise InputProblem(f"store {printable(root)}: its lock file kept being replaced while "
                       "this command waited for it; run it again")


@contextlib.contextmanager
def writer_lock(root: str | Path) -> Iterator[Manifest]:
    """Hold the folder's write lock (one writer at a time; readers never wait), check the
    store's tree and journal, first remove what the store's own earlier writes left (the
    folders of a write stopped before its commit, replaced generations: those its journal
    names), and give the committed manifest.

    A store removed meanwhile (by a failed ingest that had made it) is made again.

    Raises:
        InputProblem: when the store is read-only, damaged, or holds a link (nothing is
            removed then).
    """
    root = Path(root)
    with _locked(root):
        if lstat(root / MARKER) is None:
            _make_layout(root)
        manifest, survey = open_tree(root)
        cleanup(root, manifest, survey)
        yield manifest


def remove_unused_folder(root: str | Path) -> bool:
    """Remove the folder store ``root`` if it holds nothing but what :func:`create_folder`
    made: no committed file, no scores, no write of another process in progress (checked and
    removed under the writer's lock, without waiting for it).

    Returns:
        Whether it was removed (otherwise it is left exactly as it was).
    """
    import fcntl

    root = Path(root).resolve()
    lock = root / LOCK
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # another writer holds it
        held, now = os.fstat(fd), lstat(lock)
        if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            return False
        try:
            manifest, survey = open_tree(root)
        except InputProblem:
            return False
        if (manifest.files or manifest.step_scores or survey.leftovers or survey.pending
                or survey.journal is not None or entries(root / "_tmp")):
            return False
        return _remove_layout(root)
    finally:
        os.close(fd)


def _remove_layout(root: Path) -> bool:
    """Remove the store ``root`` holding nothing but its layout (its lock held), marked
    :data:`UNFINISHED` from before its manifest goes until it is gone."""
    try:
        _mark_unfinished(root)
        (root / MARKER).unlink()
        fsync_dir(root)
        for table in TABLES:
            file = root / empty_path(table)
            file.unlink()
            for folder in file.relative_to(root).parents[:-1]:
                remove_if_empty(root / folder)
        remove_if_empty(root / "_tmp")
        (root / UNFINISHED).unlink()
        (root / LOCK).unlink()
        root.rmdir()
    except OSError:
        return not root.exists()
    return True


# --------------------------------------------------------------------------------------------
# Writing one ingested file's rows


STAGE_MEMORY = "1GB"
"""DuckDB's memory limit for the in-memory store a write is staged in (beyond it, DuckDB
spills to the store's ``_tmp`` folder): what bounds a folder store's memory, whatever the
size of the file."""


def _stage_connection(root: Path, work: Path, manifest: Manifest) -> duckdb.DuckDBPyConnection:
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
    con.execute(_views_sql(str(root), manifest, schema="store"))
    return con


def _written(folder: Path, names: dict[str, str]) -> list[tuple[Path, str]]:
    """The partition folders DuckDB wrote under ``folder`` (``key=<encoded>``), each with the
    value it holds, from ``names`` (folder name -> value)."""
    out = []
    for entry in entries(folder):
        if entry.name not in names:  # DuckDB encoded a value differently: a bug to report
            raise RuntimeError(f"unexpected partition {entry.path} written by DuckDB")
        out.append((Path(entry.path), names[entry.name]))
    return out


def _write_partitions(
    stage: duckdb.DuckDBPyConnection, work: Path, sha: str, gen: int
) -> tuple[list[tuple[Path, str]], list[Part]]:
    """Write the stage's rows as partitions under ``work``; return the (written folder,
    final relative folder) pairs to rename, the ``ingests`` one last, and the files."""
    renames: list[tuple[Path, str]] = []
    parts: list[Part] = []
    work.mkdir(parents=True, exist_ok=True)
    tables = _columns()
    runs = [row[0] for row in stage.execute("SELECT DISTINCT run FROM trajectories").fetchall()]
    run_names = {f"run={encode(run)}": run for run in runs}
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
        leaves = (
            [(target / f"sha256={sha}" / f"gen={gen}", "")] if table == "ingests"
            else [(folder / f"sha256={sha}" / f"gen={gen}", run)
                  for folder, run in _written(target, run_names)]
        )
        for leaf, run in leaves:
            if not leaf.is_dir():
                continue
            final = data_folder(table, sha, gen, run)
            renames.append((leaf, final))
            parts.extend(Part(table, f"{final}/{e.name}", run) for e in entries(leaf))
    return renames, parts


def _ingest_into_folder(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    path: Path,
    options: IngestOptions,
) -> IngestResult:
    """Ingest one file into the folder store ``root``: stage it in an in-memory DuckDB store
    (the same code as a DuckDB store), then write its partitions and commit them.

    Args:
        con: The folder store's connection (its views are brought up to date).
        root: The store's folder.
        path: The input.
        options: Ingest options.

    Raises:
        IngestError: as for a DuckDB store; nothing is written then.
        InputProblem: when the store is read-only, damaged or holds a link.
    """
    import duckdb

    from recovery.store.errors import IngestError
    from recovery.store.ingest import ingest_into

    with writer_lock(root) as manifest:
        _refresh(con, root, manifest)  # what other writers committed since it was opened
        work = root / "_tmp" / uuid.uuid4().hex
        work.mkdir(parents=True)
        stage = _stage_connection(root, work, manifest)
        try:
            result = ingest_into(stage, path, options, seen_in=con)
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
                renames, parts = _write_partitions(stage, work / "new", result.sha256, 0)
            except duckdb.Error as err:
                if "File name too long" in str(err):
                    raise IngestError(
                        f"{path}: a run label is too long for a folder name of the store "
                        "(at most 255 bytes, once percent-encoded: 251 ASCII letters and "
                        "digits, fewer otherwise); give the file a shorter one with --run; "
                        "nothing from this file was stored"
                    ) from None
                raise
            manifest = commit(root, renames, manifest.with_file(result.sha256, 0, parts))
            _refresh(con, root, manifest)
            return result
        finally:
            stage.close()
            shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Re-marking: each ingested file's partitions rewritten as a new generation


def _mark_folder(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    *,
    rules: RuleSet | None,
    traj_ids: Sequence[str] | None,
    prm_model: str | None,
    prm_threshold: float,
) -> dict[str, int]:
    """:meth:`FolderStore.mark`: each ingested file's rows are staged, marked by the DuckDB
    store's code (:func:`recovery.store.marks.write_marks`), and written as a new generation.

    Returns:
        Error turns per kind among the re-marked trajectories.
    """
    from recovery.store.ingest import in_transaction
    from recovery.store.marks import write_marks

    counts: dict[str, int] = {}
    with writer_lock(root) as manifest:
        for sha, (gen, parts) in sorted(manifest.files.items()):
            work = root / "_tmp" / uuid.uuid4().hex
            work.mkdir(parents=True)
            stage = _stage_connection(root, work, manifest)
            try:
                if not _load_file(stage, root, sha, gen, parts, traj_ids,
                                  scores=prm_model is not None):
                    continue
                for kind, n in in_transaction(stage, lambda stage=stage: write_marks(
                    stage, rules, traj_ids, prm_model=prm_model, prm_threshold=prm_threshold,
                )).items():
                    counts[kind] = counts.get(kind, 0) + n
                renames, new_parts = _write_partitions(stage, work / "new", sha, gen + 1)
                replaced = sorted({part.path.rpartition("/")[0] for part in parts})
                manifest = commit(root, renames, manifest.with_file(sha, gen + 1, new_parts),
                                  replaced)
            finally:
                stage.close()
                shutil.rmtree(work, ignore_errors=True)
        _refresh(con, root, manifest)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _load_file(
    stage: duckdb.DuckDBPyConnection, root: Path, sha: str, gen: int, parts: Sequence[Part],
    traj_ids: Sequence[str] | None, *, scores: bool,
) -> bool:
    """Copy one ingested file's committed rows from the store into the stage; ``False`` (and
    nothing copied) when ``traj_ids`` are given and the file holds none of them."""
    for table in ("ingests", *DATA_TABLES):
        files = [(part, sha, gen) for part in parts if part.table == table]
        if files:
            stage.execute(f"INSERT INTO {table} {_source(str(root), table, files)}")
        if table == "trajectories" and traj_ids is not None:
            (n,) = stage.execute(
                "SELECT count(*) FROM trajectories WHERE list_contains(?, traj_id)",
                [list(traj_ids)],
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


def _replace_folder_step_scores(
    con: duckdb.DuckDBPyConnection, root: Path, scores: str, model: str
) -> None:
    """:meth:`FolderStore.replace_step_scores` of the relation ``scores`` (``traj_id, t,
    score`` on ``con``)."""
    if not model:
        raise InputProblem("a PRM model of a folder store needs a name (got an empty one)")
    with writer_lock(root) as manifest:
        _refresh(con, root, manifest)
        work = root / "_tmp" / uuid.uuid4().hex
        work.mkdir(parents=True)
        try:
            staged = _stage_scores(con, work, scores, model)
            manifest = _commit_scores(root, work, manifest, model, staged)
            _refresh(con, root, manifest)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _stage_scores(con: duckdb.DuckDBPyConnection, work: Path, scores: str,
                  model: str) -> Path | None:
    """The model's scores once ``scores`` replace its trajectories', written as one Parquet
    file under ``work``; ``None`` when no score is left for the model."""
    con.execute(
        f"""
        COPY (
            SELECT traj_id, t, score, model FROM step_scores
            WHERE model = $model
              AND traj_id NOT IN (SELECT DISTINCT traj_id FROM {scores})
            UNION ALL
            SELECT traj_id::VARCHAR, t::INTEGER, score::DOUBLE, $model::VARCHAR
            FROM {scores}
        ) TO {_sql(str(work / "step_scores"))}
        (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (model))
        """,
        {"model": model},
    )
    written_dirs = _written(work / "step_scores", {f"model={encode(model)}": model})
    if not written_dirs:
        return None
    ((written, _),) = written_dirs
    files = sorted(Path(e.path) for e in entries(written))
    if len(files) == 1:
        return files[0]
    merged = work / "merged.parquet"  # DuckDB wrote several files: merged into one
    listed = ", ".join(_sql(_literal(str(f))) for f in files)
    con.execute(f"COPY (SELECT * FROM read_parquet([{listed}])) "
                f"TO {_sql(str(merged))} (FORMAT parquet, COMPRESSION zstd)")
    return merged


def _commit_scores(root: Path, work: Path, manifest: Manifest, model: str,
                   staged: Path | None) -> Manifest:
    """Put ``staged`` in place as the model's scores file (``None``: the model's file goes):
    a committed file is replaced by one rename; a new model's folder, or a removed one, is a
    commit of the manifest."""
    target = root / scores_path(model)
    folder = scores_path(model).rpartition("/")[0]
    if staged is None:
        if model not in manifest.step_scores:
            return manifest
        manifest = commit(root, [], manifest.with_scores(model, None), [folder])
        target.unlink(missing_ok=True)
        remove_if_empty(target.parent)
        return manifest
    if model in manifest.step_scores:
        fsync_tree(staged.parent)
        os.replace(staged, target)
        fsync_dir(target.parent)
        return manifest
    new = work / "scores"
    new.mkdir()
    os.replace(staged, new / "data.parquet")
    return commit(root, [(new, folder)], manifest.with_scores(model, scores_path(model)))


def readable_folders(root: str | Path) -> list[str]:
    """The folders a sandboxed connection to the folder store ``root`` must be allowed to read
    (DuckDB's ``allowed_directories``): the folder, and the same path as the views write it
    (DuckDB checks both the pattern and the file it matches)."""
    folder = str(Path(root).resolve()).rstrip("/") + "/"
    return list(dict.fromkeys([folder, _literal(folder)]))
