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
written or removed then.

The rooms: the manifest (:mod:`recovery.store.manifest`), the journal and the commit
(:mod:`recovery.store.folder_journal`), the survey and the refusals
(:mod:`recovery.store.folder_survey`), the views (:mod:`recovery.store.folder_views`), the
layout and the writer's lock (:mod:`recovery.store.folder_layout`), and the writes
(:mod:`recovery.store.folder_writes`); this module opens a store.

Everything here is DuckDB reading Parquet: any DuckDB client reads the store with the SQL of
:func:`views_sql`, locally or on object storage (``s3://...`` through DuckDB's ``httpfs``).
Writing needs a local folder (renames are atomic there, not on object storage).
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from recovery.display import printable
from recovery.errors import InputProblem
from recovery.store.base import Store, relation_of
from recovery.store.folder_journal import JOURNAL
from recovery.store.folder_layout import create_folder, remove_unused_folder, writer_lock
from recovery.store.folder_survey import is_dir, open_tree
from recovery.store.folder_views import (
    is_folder_store,
    is_url,
    literal_path,
    manifest_views_sql,
    read_url_manifest,
    readable_folders,
    views_sql,
)
from recovery.store.folder_writes import (
    STAGE_MEMORY,
    ingest_into_folder,
    mark_folder,
    replace_folder_step_scores,
)
from recovery.store.ingest import IngestOptions, IngestResult
from recovery.store.manifest import (
    DATA_TABLES,
    LOCK,
    MARKER,
    TABLES,
    Manifest,
    Part,
    lstat,
    parse_manifest,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    import duckdb

    from recovery.marking import RuleSet

__all__ = ["DATA_TABLES", "JOURNAL", "LOCK", "MARKER", "STAGE_MEMORY", "TABLES", "FolderStore",
           "Manifest", "Part", "create_folder", "is_folder_store", "open_folder",
           "parse_manifest", "readable_folders", "remove_unused_folder", "views_sql",
           "writer_lock"]


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
        if is_url(root):
            if not read_only:
                raise InputProblem(
                    f"store {printable(path)} is on object storage, which this toolkit only "
                    "reads (a rename there is not atomic): ingest into a local folder store, "
                    "then copy the folder"
                )
            manifest = read_url_manifest(root, con)
        else:
            root = str(Path(root).resolve())
            literal_path(root + "/")
            found = lstat(Path(root))
            if found is not None and not is_dir(found):
                raise InputProblem(f"store {printable(path)}: something that is not a folder "
                                   "is there (a folder store is a folder)")
            if not read_only:
                create_folder(root)
            manifest, _ = open_tree(Path(root))
        try:
            con.execute(manifest_views_sql(root, manifest))
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

    refused = MappingProxyType({
        "ingest_trajectories": (
            "a folder store takes files (it is partitioned by ingested file): write the "
            "trajectories as canonical JSONL with recovery.schema.trajectory_to_dict, then "
            "ingest the file"),
        "rebuild_spells": (
            "a folder store's turns are read-only views, so its marks are never edited by hand "
            "and its spells already follow them (mark() rewrites both)"),
    })

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
        return ingest_into_folder(self.con, self._writable_root("ingest"), Path(path),
                                   options or IngestOptions())

    def _mark(self, rules: RuleSet | None, traj_ids: Sequence[str] | None,
              prm_model: str | None, prm_threshold: float) -> dict[str, int]:
        """Every ingested file holding some of the trajectories gets its partitions rewritten,
        re-marked, as a new generation, committed file by file (a mark stopped midway leaves
        each file marked the old way or the new way, never a mix; running it again finishes
        it)."""
        return mark_folder(self.con, Path(self.root), rules=rules, traj_ids=traj_ids,
                            prm_model=prm_model, prm_threshold=prm_threshold)

    def replace_step_scores(self, scores: Any, model: str) -> None:
        """See :meth:`recovery.store.Store.replace_step_scores`: the model's file is
        rewritten whole, then renamed over the old one (a new model's file is committed in
        ``_store.json``)."""
        root = self._writable_root("write step scores")
        name, done = relation_of(self.con, scores)
        try:
            replace_folder_step_scores(self.con, root, name, model)
        finally:
            done()

    def remove_if_unused(self) -> bool:
        """See :meth:`recovery.store.Store.remove_if_unused`: the folder goes only when,
        under its writer's lock (not waited for), it still holds nothing but its empty
        layout."""
        self.close()
        return remove_unused_folder(self.root)
