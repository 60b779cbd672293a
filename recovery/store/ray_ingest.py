"""``recovery ingest --engine ray``: input files parsed in Ray tasks, one commit at the end.

Each task stages one file exactly as a folder store's own ingest does
(:mod:`recovery.store.folder_writes`: an in-memory DuckDB store, the same readers, checks and
marking), checks it against the store's committed trajectories, and writes its Parquet
partitions under the store's ``_tmp``; it commits nothing. The driver holds the store's
writer's lock from before the first task to the end, settles the files in input order (a file
whose sha256 is committed or came earlier in the same call is skipped; a trajectory another
file of the call already holds fails the file, as the local engine would have it), renames
the partitions of every file it keeps into place and commits ONE manifest. A file that fails
(a bad record, a clash) is reported and left out, as locally; a task that fails otherwise (a
dead worker, a lost node) stops the whole ingest, and nothing is committed. What tasks wrote
is removed in every case (and, were the driver killed, by the store's next write, which
empties ``_tmp``).

Paths are read by the workers: the store and the inputs must be on a folder every node sees
(relative inputs are read from the driver's working folder, which must exist on the node).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.store.ingest import IngestOptions, IngestResult
from recovery.store.manifest import Manifest, Part

if TYPE_CHECKING:

    from recovery.store.command import IngestConfig, IngestOutcome
    from recovery.store.folder import FolderStore

Row = tuple[str, str, str, "str | None", "int | None"]
"""A staged trajectory: traj_id, run, task_id, source_file, source_line."""


@dataclass
class StagedFile:
    """What a task made of one input: its result, and, when ingested, the partitions it wrote
    (not committed) and its trajectories' keys.

    Attributes:
        result: As the local engine reports it (``skipped`` empty: see ``bad_records``).
        work: The task's folder under the store's ``_tmp``.
        renames: (written folder, folder relative to the store) pairs, ``ingests`` last.
        parts: The Parquet files, as the manifest lists them.
        rows: The trajectories' keys (for clashes between the files of one call).
        bad_records: The records skipped with ``skip_bad``: (message, file, line).
    """

    result: IngestResult
    work: str
    renames: list[tuple[str, str]] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    bad_records: list[tuple[str, str | None, int | None]] = field(default_factory=list)

    def restored(self) -> IngestResult:
        """The result with its skipped records (a record error does not cross processes)."""
        from recovery.schema import RecordError

        self.result.skipped = [RecordError(m, file=f, line=n) for m, f, n in self.bad_records]
        return self.result


# --------------------------------------------------------------------------------------------
# The task


@contextlib.contextmanager
def _working_folder(cwd: str | None, path: str) -> Iterator[None]:
    """Run in ``cwd`` (the driver's working folder, for the relative input ``path``), then go
    back."""
    if cwd is None:
        yield
        return
    from recovery.store.errors import IngestError

    if not Path(cwd).is_dir():
        raise IngestError(f"{path}: the driver's working folder {cwd} is not on this node; "
                          "give the inputs as absolute paths on a folder every node sees")
    before = os.getcwd()
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(before)


def stage_file(root: str, manifest: Manifest, path: str, options: IngestOptions, work: str,
               cwd: str | None) -> StagedFile:
    """(A Ray task.) Stage one input of the folder store ``root`` as of ``manifest`` and write
    its partitions under ``work``; commit nothing. A bad input is a failed result, as in
    :meth:`recovery.store.Store.ingest_files`; anything else raises."""
    import duckdb

    from recovery.formats import UnknownFormatError
    from recovery.store.errors import IngestError

    try:
        with _working_folder(cwd, path):
            return _stage(Path(root), manifest, Path(path), options, Path(work))
    except (IngestError, UnknownFormatError) as err:
        error = str(err)
    except duckdb.Error as err:  # the transaction was rolled back
        error = f"{path}: the store refused the file: {err}; nothing from it was stored"
    return StagedFile(IngestResult(file=path, format="", status="failed", error=error), work)


def _stage(root: Path, manifest: Manifest, path: Path, options: IngestOptions,
           work: Path) -> StagedFile:
    """:func:`recovery.store.folder_writes.ingest_into_folder` up to its commit."""
    import duckdb

    from recovery.store.folder_views import manifest_views_sql
    from recovery.store.folder_writes import (
        _stage_connection,
        _write_partitions,
        check_store_clash,
        refuse_long_label,
    )
    from recovery.store.ingest import ingest_into

    work.mkdir(parents=True)
    stage = _stage_connection(root, work, manifest)
    seen = duckdb.connect()  # the store's committed ingests: a sha256 there is skipped
    try:
        seen.execute(manifest_views_sql(str(root), manifest))
        result = ingest_into(stage, path, options, seen_in=seen)
        if result.status != "ingested":
            return StagedFile(result, str(work))
        check_store_clash(stage)
        try:
            renames, parts = _write_partitions(stage, work / "new", result.sha256, 0)
        except duckdb.Error as err:
            refuse_long_label(path, err)
            raise
        rows = stage.execute("SELECT traj_id, run, task_id, source_file, source_line "
                             "FROM trajectories ORDER BY source_line, traj_id").fetchall()
        bad = [(e.message, e.file, e.line) for e in result.skipped]
        result.skipped = []
        return StagedFile(result, str(work), [(str(w), f) for w, f in renames], parts,
                          [tuple(r) for r in rows], bad)
    finally:
        seen.close()
        stage.close()


# --------------------------------------------------------------------------------------------
# The driver


def _settle(staged: Sequence[StagedFile]) -> tuple[list[IngestResult], list[StagedFile]]:
    """Each input's result in order, and the staged files to commit: a file whose sha256 an
    earlier input of the call has is skipped, one holding a trajectory an earlier kept input
    holds fails (as when the local engine ingests them one after the other)."""
    from recovery.store.folder_writes import clash_error

    results: list[IngestResult] = []
    kept: list[StagedFile] = []
    shas: set[str] = set()
    first: dict[str, Row] = {}
    for one in staged:
        result = one.restored()
        if result.status == "ingested" and result.sha256 in shas:
            result = IngestResult(file=result.file, format=result.format, status="skipped",
                                  sha256=result.sha256)
        elif result.status == "ingested":
            clash = next((row for row in one.rows if row[0] in first), None)
            if clash is not None:
                earlier = first[clash[0]]
                result = IngestResult(file=result.file, format="", status="failed", error=(
                    clash_error(clash[3], clash[4], clash[1], clash[2], earlier[3], earlier[4])))
            else:
                kept.append(one)
                shas.add(result.sha256 or "")
                first.update((row[0], row) for row in one.rows)
        results.append(result)
    return results, kept


def _commit_kept(root: Path, manifest: Manifest, kept: Sequence[StagedFile]) -> Manifest:
    """Rename every kept file's partitions into place (every ``ingests`` one last) and commit
    them in one manifest."""
    from recovery.store.folder_journal import commit

    if not kept:
        return manifest
    renames = [(Path(w), f) for one in kept for w, f in one.renames]
    renames.sort(key=lambda pair: pair[1].startswith("ingests/"))
    for one in kept:
        manifest = manifest.with_file(one.result.sha256 or "", 0, one.parts)
    return commit(root, renames, manifest)


def _failed_task(path: Path, err: BaseException) -> Exception:
    from recovery.display import printable
    from recovery.store.ray_cluster import RayTaskFailed

    why = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
    return RayTaskFailed(f"ingest --engine ray stopped: the task of {printable(path)} failed "
                         f"({printable(why)}); nothing was committed, the store is as it was")


Runner = Callable[[Callable[..., StagedFile], Sequence[tuple[Any, ...]]],
                  tuple[list[Any], "tuple[int, BaseException] | None"]]
"""Runs the task on each call: each call's result, and the first failure (its index and
error), after which nothing is left running (:func:`recovery.store.ray_cluster.run_bounded`)."""


def ingest_staged(store: FolderStore, files: Sequence[Path], options: IngestOptions,
                  run: Runner, *, names: dict[Path, str] | None = None) -> list[IngestResult]:
    """Ingest ``files`` into the folder store ``store``: each staged by :func:`stage_file`
    through ``run``, the writer's lock held throughout, then settled and committed at once.

    Args:
        store: An open folder store (its connection's views are brought up to date).
        files: The inputs.
        options: The options of every input.
        run: Runs the tasks (on a Ray cluster: :func:`ray_ingest`).
        names: Run labels for some inputs (resolved path -> label), as
            :func:`recovery.store.command.run_names_for` gives them.

    Returns:
        One result per input, in order (as the local engine's).

    Raises:
        RayTaskFailed: when a task failed for a reason that is not its input's (nothing
            committed then, and what the tasks wrote removed).
    """
    from recovery.store.folder_layout import writer_lock
    from recovery.store.folder_views import refresh_views

    root, names, cwd = Path(store.root), names or {}, os.getcwd()
    with writer_lock(root) as manifest:
        calls = [(str(root), manifest, str(path), dataclasses.replace(
                    options, run=names.get(Path(path).resolve(), options.run)),
                  str(root / "_tmp" / uuid.uuid4().hex),
                  None if Path(path).is_absolute() else cwd) for path in files]
        try:
            staged, failure = run(stage_file, calls)
            if failure is not None:
                raise _failed_task(Path(files[failure[0]]), failure[1]) from None
            results, kept = _settle(staged)
            manifest = _commit_kept(root, manifest, kept)
        finally:
            for call in calls:
                shutil.rmtree(call[4], ignore_errors=True)
        refresh_views(store.con, root, manifest)
    return results


def ray_ingest(store: FolderStore, files: Sequence[Path], options: IngestOptions,
               workers: int | None = None, *,
               names: dict[Path, str] | None = None) -> list[IngestResult]:
    """:func:`ingest_staged` with each file staged in a Ray task of one CPU, at most
    ``workers`` at once (``None`` = the cluster's CPUs), on the cluster ``RAY_ADDRESS``
    names, the one this process joined, or a local one started for the call.

    Raises:
        RayTaskFailed: see :func:`ingest_staged`.
        UsageProblem: when Ray is not installed, or ``workers`` is below 1.
    """
    import functools

    from recovery.store.ray_cluster import ray_workers, run_bounded

    with ray_workers(workers) as (ray, n):
        return ingest_staged(store, files, options,
                             functools.partial(run_bounded, ray, workers=n), names=names)


def ray_ingest_command(
    config: IngestConfig,
    workers: int | None = None,
    *,
    on_result: Callable[[IngestResult], Any] | None = None,
    on_names: Callable[[dict[Path, str]], Any] | None = None,
) -> IngestOutcome:
    """:func:`recovery.store.command.ingest_command` with the Ray engine: the inputs parsed
    in Ray tasks into a folder store, committed at once (:func:`ray_ingest`); the outcome, the
    data checks and the removal of a store it made and could store nothing in, as locally.

    Raises:
        UsageProblem: for a store that is not a local folder store, Ray not installed,
            ``workers`` below 1, or options that do not hold.
        RayTaskFailed: see :func:`ray_ingest`.
    """
    from recovery.store.command import ingest_outcome, run_names_for
    from recovery.store.opening import open_store
    from recovery.store.ray_cluster import check_folder_store, check_workers, import_ray

    check_folder_store(config.store, "ingest")
    check_workers(workers)
    import_ray()
    options = config.ingest_options()
    files = [Path(p) for p in config.files]
    created = not Path(str(config.store)).exists()
    store = open_store(config.store)
    try:
        names = run_names_for(files, options)
        if names and on_names is not None:
            on_names(names)
        results = ray_ingest(store, files, options, workers, names=names)
        for result in results if on_result is not None else ():
            on_result(result)
        return ingest_outcome(store, results, names, created)
    finally:
        store.close()
