"""The store as one object: what every kind of store does, whatever it keeps its rows in.

A :class:`Store` is opened with :func:`recovery.store.open_store` and is one of two kinds:

- :class:`recovery.store.duckdb_store.DuckDBStore`: one DuckDB file (or an in-memory store);
- :class:`recovery.store.folder.FolderStore`: a folder of Parquet files, read through views.

Both have the same tables and are read the same way, through their one DuckDB connection
(:attr:`Store.con`: ``store.con.sql("SELECT ...")``; the store itself forwards nothing to it).
Every write goes through the store's own methods (:attr:`Store.WRITES`), which each kind
implements its own way, or refuses for the reason its :attr:`Store.refused` gives: ingest
(:meth:`Store.ingest_file`), re-marking (:meth:`Store.mark`), following hand-edited marks
(:meth:`Store.rebuild_spells`) and replacing a PRM's scores
(:meth:`Store.replace_step_scores`). Code that writes takes a ``Store``; code that only reads
takes its connection.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

from recovery.display import printable
from recovery.errors import InputProblem
from recovery.store.errors import WriteRefused
from recovery.store.ingest import IngestOptions, IngestResult

if TYPE_CHECKING:
    import duckdb

    from recovery.marking import RuleSet
    from recovery.schema import Trajectory


class Store(abc.ABC):
    """An opened store: its DuckDB connection for reading, and the operations that write.

    Use it as a context manager, or call :meth:`close`. Read through :attr:`con`; write only
    through the methods named in :attr:`WRITES`.

    Attributes:
        con: The one DuckDB connection onto the store's tables.
        location: The store's path as given (``":memory:"`` for an in-memory store).
        read_only: Whether the store was opened read-only (every write is refused).
    """

    kind: ClassVar[str]
    """``"duckdb"`` or ``"folder"``."""

    WRITES: ClassVar[tuple[str, ...]] = (
        "ingest_file", "ingest_files", "ingest_trajectories", "mark", "rebuild_spells",
        "replace_step_scores", "remove_if_unused",
    )
    """Every method that writes: each kind implements it, or names it in :attr:`refused`."""

    refused: ClassVar[MappingProxyType[str, str]] = MappingProxyType({})
    """The writes this kind does not do, each with why; calling one raises
    :class:`~recovery.store.errors.WriteRefused` with that reason, and changes nothing."""

    def __init__(self, con: duckdb.DuckDBPyConnection, location: str, *,
                 read_only: bool = False) -> None:
        self.con = con
        self.location = location
        self.read_only = read_only

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = ", read-only" if self.read_only else ""
        return f"<{type(self).__name__} {self.location}{mode}>"

    def close(self) -> None:
        """Close the store's connection."""
        self.con.close()

    def _check_writable(self, what: str) -> None:
        if self.read_only:
            raise InputProblem(f"store {self.location} was opened read-only; cannot {what}")

    def _refuse(self, method: str) -> NoReturn:
        """Raise the refusal of ``method`` that :attr:`refused` documents."""
        reason = self.refused.get(method, "this kind of store does not implement it")
        raise WriteRefused(f"store {printable(self.location)}: {method} refused: {reason}; "
                           "nothing was stored")

    # ----------------------------------------------------------------------------------------
    # Ingest

    @abc.abstractmethod
    def ingest_file(self, path: str | Path, options: IngestOptions | None = None) -> IngestResult:
        """Ingest one file atomically and idempotently.

        Args:
            path: Input file (or folder, for a format that reads one) in any registered format.
            options: Ingest options; defaults when ``None``.

        Returns:
            What was stored, or that the file was skipped because its sha256 is already
            recorded.

        Raises:
            IngestError: for a bad record (unless ``skip_bad``), naming file and line; the
                store is left exactly as it was.
            recovery.formats.UnknownFormatError: when the format is unknown or cannot be
                detected.
        """

    def ingest_files(
        self,
        paths: Iterable[str | Path],
        options: IngestOptions | None = None,
        *,
        on_result: Callable[[IngestResult], Any] | None = None,
    ) -> list[IngestResult]:
        """Ingest several files, each atomically; one failing file stops none.

        Args:
            paths: Input files (or directories, for formats that read one).
            options: Ingest options for every file.
            on_result: Called with each file's result as soon as it is known (for progress).

        Returns:
            One result per path, in order; a failed file has ``status == "failed"`` and its
            ``error``, and left the store as it was.
        """
        import duckdb

        from recovery.formats import UnknownFormatError
        from recovery.store.errors import IngestError

        results = []
        for path in paths:
            try:
                result = self.ingest_file(path, options)
            except (IngestError, UnknownFormatError) as err:
                result = IngestResult(file=str(path), format="", status="failed", error=str(err))
            except duckdb.Error as err:  # the transaction was rolled back
                result = IngestResult(
                    file=str(path), format="", status="failed",
                    error=f"{path}: the store refused the file: {err}; nothing from it was stored",
                )
            results.append(result)
            if on_result is not None:
                on_result(result)
        return results

    def ingest_trajectories(
        self,
        trajectories: Iterable[Trajectory],
        *,
        source: str = "<python>",
        options: IngestOptions | None = None,
    ) -> IngestResult:
        """Ingest trajectories built in Python (e.g. by the simulator), atomically.

        There is no sha256 to make this idempotent; a trajectory whose (run, task, budget,
        sample) is already stored is an error.

        Args:
            trajectories: The trajectories.
            source: What the result names as the file.
            options: Ingest options (the format is ``python``).

        Raises:
            IngestError: a bad trajectory (nothing is stored).
            WriteRefused: a store that takes files only (:attr:`refused`).
        """
        self._check_writable("ingest")
        return self._ingest_trajectories(trajectories, source, options or IngestOptions())

    def _ingest_trajectories(self, trajectories: Iterable[Trajectory], source: str,
                             options: IngestOptions) -> IngestResult:
        """:meth:`ingest_trajectories` in this kind of store (a kind that does it overrides
        this; the others refuse it)."""
        self._refuse("ingest_trajectories")

    def runs_of(self, results: Iterable[IngestResult]) -> list[str]:
        """The runs of the trajectories that ``results`` stored, or that an earlier ingest of
        the same bytes stored (a skipped input's runs are those of the file the store recorded
        for its digest). Failed inputs hold none."""
        sources: list[str] = []
        for result in results:
            if result.status == "ingested":
                sources.append(result.file)
            elif result.status == "skipped":
                sources += [row[0] for row in self.con.execute(
                    "SELECT file FROM ingests WHERE sha256 = ?", [result.sha256]).fetchall()]
        if not sources:
            return []
        rows = self.con.execute(
            "SELECT DISTINCT run FROM trajectories WHERE list_contains(?, source_file) "
            "ORDER BY run",
            [sources],
        ).fetchall()
        return [row[0] for row in rows]

    def trajectories_of_runs(self, runs: Sequence[str]) -> list[str]:
        """The ids of the trajectories of ``runs``, in id order."""
        return [row[0] for row in self.con.execute(
            "SELECT traj_id FROM trajectories WHERE list_contains(?, run) ORDER BY traj_id",
            [list(runs)],
        ).fetchall()]

    # ----------------------------------------------------------------------------------------
    # Marking and scores

    def mark(
        self,
        rules: RuleSet | None = None,
        traj_ids: Sequence[str] | None = None,
        *,
        prm_model: str | None = None,
        prm_threshold: float = 0.5,
    ) -> dict[str, int]:
        """(Re-)mark error turns, recoveries and error spells, atomically.

        Marking (:mod:`recovery.marking`) says which turns are errors, of which kind; the
        store writes ``turns.error_kind``, ``is_error``, ``recovery_of`` and the
        ``error_spells`` table. Re-marking is idempotent and scoped: trajectories outside
        ``traj_ids`` are not touched.

        Args:
            rules: User rules and switches; ``None`` = the built-in rules and ``repeat`` only.
            traj_ids: Trajectories to (re)mark; ``None`` = the whole store.
            prm_model: Also mark ``prm`` errors: turns whose score from this model in
                ``step_scores`` is below ``prm_threshold``. ``None`` = no ``prm`` marks.
            prm_threshold: The score below which a turn is a ``prm`` error.

        Returns:
            The number of error turns of each kind among the marked trajectories, most
            frequent first.
        """
        self._check_writable("mark")
        return self._mark(rules, traj_ids, prm_model, prm_threshold)

    @abc.abstractmethod
    def _mark(self, rules: RuleSet | None, traj_ids: Sequence[str] | None,
              prm_model: str | None, prm_threshold: float) -> dict[str, int]:
        """:meth:`mark` in this kind of store."""

    def rebuild_spells(self, traj_ids: Sequence[str] | None = None) -> None:
        """Recompute ``error_spells`` and ``turns.recovery_of`` from the turns' current marks
        (after ``turns.error_kind``/``is_error`` were edited by hand with SQL), atomically.

        Args:
            traj_ids: The trajectories; ``None`` = all.

        Raises:
            WriteRefused: a store whose marks cannot be edited by hand (:attr:`refused`).
        """
        self._check_writable("rebuild spells")
        self._rebuild_spells(traj_ids)

    def _rebuild_spells(self, traj_ids: Sequence[str] | None) -> None:
        """:meth:`rebuild_spells` in this kind of store (a kind that does it overrides this;
        the others refuse it)."""
        self._refuse("rebuild_spells")

    @abc.abstractmethod
    def replace_step_scores(self, scores: Any, model: str) -> None:
        """Replace ``model``'s rows of ``step_scores`` for the trajectories in ``scores``,
        atomically.

        Args:
            scores: The new scores, ``traj_id, t, score``: a pandas frame, an Arrow table, or
                the name of a relation on the store's connection.
            model: The model's name.
        """

    # ----------------------------------------------------------------------------------------
    # Removal

    @abc.abstractmethod
    def remove_if_unused(self) -> bool:
        """Close the store and delete it if it holds nothing; whether it is gone.

        For a command that made a new store and could store nothing in it. A store another
        process is writing to, or that holds any row, is kept.
        """


def relation_of(con: duckdb.DuckDBPyConnection, scores: Any) -> tuple[str, Callable[[], None]]:
    """A relation name on ``con`` for ``scores`` (a relation name, or a frame / Arrow table
    registered for the call), and the function that unregisters it."""
    import uuid

    if isinstance(scores, str):
        return scores, lambda: None
    name = f"_scores_{uuid.uuid4().hex}"
    con.register(name, scores)
    return name, lambda: con.unregister(name)
