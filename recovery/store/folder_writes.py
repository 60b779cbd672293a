"""The writes of a folder store: each stages its rows in an in-memory DuckDB store (the same
code as a DuckDB store), writes them as new Parquet files under ``_tmp`` and commits them by
replacing the manifest (:mod:`recovery.store.folder_journal`). Ingest, re-marking, and the
PRM scores (one file per model, replaced whole)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.config import need
from recovery.errors import InputProblem
from recovery.store.folder_journal import commit, fsync_tree
from recovery.store.folder_layout import writer_lock
from recovery.store.folder_survey import entries, remove_if_empty
from recovery.store.folder_views import (
    literal_path,
    manifest_views_sql,
    parts_source,
    quoted_name,
    refresh_views,
    sql_string,
    table_columns,
)
from recovery.store.ingest import IngestOptions, IngestResult
from recovery.store.manifest import (
    DATA_TABLES,
    Manifest,
    Part,
    data_folder,
    encode,
    fsync_dir,
    scores_path,
)

if TYPE_CHECKING:
    import duckdb

    from recovery.marking import RuleSet


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
    con.execute(manifest_views_sql(str(root), manifest, schema="store"))
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
    tables = table_columns()
    runs = [row[0] for row in stage.execute("SELECT DISTINCT run FROM trajectories").fetchall()]
    run_names = {f"run={encode(run)}": run for run in runs}
    for table in (*DATA_TABLES, "ingests"):
        columns = ", ".join(f"x.{quoted_name(name)}" for name, _ in tables[table])
        if table == "ingests":
            source = f"SELECT {columns}, {gen} AS gen FROM ingests x"
            keys = "sha256, gen"
        elif table == "trajectories":
            source = f"SELECT {columns}, {sql_string(sha)} AS sha256, {gen} AS gen FROM trajectories x"
            keys = "run, sha256, gen"
        else:
            source = (
                f"SELECT {columns}, tr.run, {sql_string(sha)} AS sha256, {gen} AS gen "
                f"FROM {table} x JOIN trajectories tr USING (traj_id)"
            )
            keys = "run, sha256, gen"
        target = work / table
        stage.execute(
            f"COPY ({source}) TO {sql_string(str(target))} "
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


def ingest_into_folder(
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

    from recovery.store.ingest import ingest_into

    with writer_lock(root) as manifest:
        refresh_views(con, root, manifest)  # what other writers committed since it was opened
        work = root / "_tmp" / uuid.uuid4().hex
        work.mkdir(parents=True)
        stage = _stage_connection(root, work, manifest)
        try:
            result = ingest_into(stage, path, options, seen_in=con)
            if result.status != "ingested":
                return result
            check_store_clash(stage)
            try:
                renames, parts = _write_partitions(stage, work / "new", result.sha256, 0)
            except duckdb.Error as err:
                refuse_long_label(path, err)
                raise
            manifest = commit(root, renames, manifest.with_file(result.sha256, 0, parts))
            refresh_views(con, root, manifest)
            return result
        finally:
            stage.close()
            shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Re-marking: each ingested file's partitions rewritten as a new generation


def mark_folder(
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
                if not _load_file(stage, root, _Committed(sha, gen, parts), traj_ids,
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
        refresh_views(con, root, manifest)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass(frozen=True)
class _Committed:
    """One ingested file as the manifest commits it."""

    sha: str = need("The file's sha256.")
    gen: int = need("Its generation.")
    parts: Sequence[Part] = need("Its Parquet files.")


def _load_file(
    stage: duckdb.DuckDBPyConnection, root: Path, file: _Committed,
    traj_ids: Sequence[str] | None, *, scores: bool,
) -> bool:
    """Copy one ingested file's committed rows from the store into the stage (its step
    scores too, with ``scores``); ``False`` (and nothing copied) when ``traj_ids`` are given
    and the file holds none of them."""
    sha, gen, parts = file.sha, file.gen, file.parts
    for table in ("ingests", *DATA_TABLES):
        files = [(part, sha, gen) for part in parts if part.table == table]
        if files:
            stage.execute(f"INSERT INTO {table} {parts_source(str(root), table, files)}")
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


def replace_folder_step_scores(
    con: duckdb.DuckDBPyConnection, root: Path, scores: str, model: str
) -> None:
    """:meth:`FolderStore.replace_step_scores` of the relation ``scores`` (``traj_id, t,
    score`` on ``con``)."""
    if not model:
        raise InputProblem("a PRM model of a folder store needs a name (got an empty one)")
    with writer_lock(root) as manifest:
        refresh_views(con, root, manifest)
        work = root / "_tmp" / uuid.uuid4().hex
        work.mkdir(parents=True)
        try:
            staged = _stage_scores(con, work, scores, model)
            manifest = _commit_scores(root, work, manifest, model, staged)
            refresh_views(con, root, manifest)
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
        ) TO {sql_string(str(work / "step_scores"))}
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
    listed = ", ".join(sql_string(literal_path(str(f))) for f in files)
    con.execute(f"COPY (SELECT * FROM read_parquet([{listed}])) "
                f"TO {sql_string(str(merged))} (FORMAT parquet, COMPRESSION zstd)")
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


# --------------------------------------------------------------------------------------------
# Refusals both engines share


def clash_error(file: str | None, line: int | None, run: str, task: str,
                first_file: str | None, first_line: int | None) -> str:
    """The message of a trajectory already stored from another file (either engine)."""
    return (
        f"{file}:{line}: trajectory (run={run!r}, task_id={task!r}) with the same sample is "
        f"already in the store (from {first_file}:{first_line}); give samples distinct "
        "'sample' values, or give this file a run label of its own (`recovery ingest FILE "
        "--run NAME --store S`, then analyse the store); nothing from this file was stored"
    )


def refuse_long_label(path: Path, err: Exception) -> None:
    """Refuse a run label too long for a partition's folder."""
    from recovery.store.errors import IngestError

    if "File name too long" in str(err):
        raise IngestError(
            f"{path}: a run label is too long for a folder name of the store (at most 255 "
            "bytes, once percent-encoded: 251 ASCII letters and digits, fewer otherwise); give "
            "the file a shorter one with --run; nothing from this file was stored") from None


def check_store_clash(stage: duckdb.DuckDBPyConnection) -> None:
    """Refuse a staged trajectory already committed in the store (from another file)."""
    from recovery.store.errors import IngestError

    clash = stage.execute(
        """
        SELECT n.source_file, n.source_line, n.run, n.task_id, o.source_file, o.source_line
        FROM trajectories n JOIN store.trajectories o USING (traj_id)
        ORDER BY n.source_line LIMIT 1
        """
    ).fetchall()
    if clash:
        raise IngestError(clash_error(*clash[0]))
