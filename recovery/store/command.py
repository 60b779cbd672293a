"""``recovery ingest`` as a function: its options (:class:`IngestConfig`) and
:func:`ingest_command`, which the command line only calls and prints."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.config import CheckedOptions, opt
from recovery.errors import Problem, UsageProblem
from recovery.formats import ReadOptions
from recovery.store.ingest import IngestOptions, IngestResult

if TYPE_CHECKING:
    from recovery.store.base import Store


@dataclass
class IngestConfig(CheckedOptions):
    """Options of ``recovery ingest``."""

    files: list[Path] = opt(
        argument=True, required=True, default_factory=list, help="Input files."
    )
    store: str | None = opt(
        None, "Store to write (created when missing): a DuckDB file, or a folder of Parquet "
        "files when the path is an existing folder or ends in '/' (e.g. runs/); in memory "
        "when omitted.",
    )
    format: str | None = opt(
        None, "Input format (default: detected per file). Unknown names list the known ones."
    )
    run: str | None = opt(None, "Run label for every trajectory, replacing the data's own.")
    skip_bad: bool = opt(
        False, "Store the good records of a file with bad ones and print how many were skipped."
    )
    rules: Path | None = opt(None, "TOML file of extra error rules (see docs/errors.md).")
    max_record_mb: float = opt(512.0, "Largest record accepted, in MB of text (> 0).")
    success_threshold: float = opt(
        ReadOptions().success_threshold,
        "A final reward at or above this counts as success where no flag is given.",
    )
    inspect_scorer: str | None = opt(
        None, "Inspect logs: the scorer whose value decides success (default: the first)."
    )
    results: Path | None = opt(
        None, "A results file that decides success where trajectories carry none (e.g. the "
        "resolved-instance list of a SWE-bench harness for SWE-agent trajectories).",
    )
    inspect_success: list[str] = opt(
        help="Inspect logs: score values that count as success, comma-separated.",
        default_factory=lambda: list(ReadOptions().inspect_success),
    )

    def ingest_options(self) -> IngestOptions:
        """The library's options of this command (rules loaded, sizes in bytes).

        Raises:
            UsageProblem: for a size that is not positive.
            UnknownFormatError: for a format no reader has.
            RuleError: for a rules file that is not valid.
        """
        from recovery.marking import load_rules

        if self.max_record_mb <= 0:
            raise UsageProblem(f"--max-record-mb: must be > 0, not {self.max_record_mb}")
        return IngestOptions(
            format=self.format,
            run=self.run,
            skip_bad=self.skip_bad,
            success_threshold=self.success_threshold,
            max_record_bytes=int(self.max_record_mb * 1024 * 1024),
            rules=load_rules(self.rules) if self.rules else None,
            inspect_scorer=self.inspect_scorer,
            inspect_success=tuple(self.inspect_success),
            results=self.results,
        )


@dataclass
class IngestOutcome:
    """What :func:`ingest_command` did.

    Attributes:
        results: One result per input, in order.
        n_trajectories: Trajectories in the store afterwards.
        n_turns: Turns in the store afterwards.
        removed: The store was made by this command, nothing could be stored in it, and it
            was removed again.
        quality_lines: The data checks of the runs this command stored (or found stored).
        run_names: Inputs of the same name given distinct run names (path -> name).
    """

    results: list[IngestResult]
    n_trajectories: int = 0
    n_turns: int = 0
    removed: bool = False
    quality_lines: list[str] = field(default_factory=list)
    run_names: dict[Path, str] = field(default_factory=dict)

    @property
    def n_failed(self) -> int:
        """Inputs nothing was stored from."""
        return sum(r.status == "failed" for r in self.results)


def default_run_name(path: Path) -> str:
    """The run label a reader gives an input that names no run: a file's stem
    (``runs/base.jsonl`` -> ``base``), a folder's own name (``runs/babaisai/`` -> ``babaisai``)."""
    from recovery.formats import stem

    return path.resolve().name if path.is_dir() else stem(path)


def distinct_run_names(files: list[Path]) -> dict[Path, str]:
    """Run labels for the inputs whose default names collide: the parent folder joins the name.

    ``A/babaisai.jsonl`` and ``B/babaisai.jsonl`` would both be run ``babaisai``; they get
    ``A/babaisai`` and ``B/babaisai``. Inputs whose default name is their own are absent from
    the result (they keep what the reader gives them), and so is the same path given twice.

    Raises:
        UsageProblem: when the parent folders do not tell the inputs apart either, naming the
            flag that sets a run label.
    """
    by_name: dict[str, list[Path]] = {}
    for path in dict.fromkeys(Path(f).resolve() for f in files):
        if path.exists():
            by_name.setdefault(default_run_name(path), []).append(path)
    out: dict[Path, str] = {}
    for name, paths in by_name.items():
        if len(paths) < 2:
            continue
        labels = {path: f"{path.parent.name}/{name}" for path in paths}
        for label in set(labels.values()):
            clash = [str(p) for p, given in labels.items() if given == label]
            if len(clash) > 1:
                raise UsageProblem(
                    f"inputs {' and '.join(clash)} would all be run {label!r}; give each a run "
                    "label of its own: recovery ingest FILE --run NAME --store S for each, then "
                    "recovery analyze --store S")
        out.update(labels)
    return out


def _names_its_run(path: Path, options: IngestOptions) -> bool:
    """Whether the input's first trajectory carries a run label other than the default one
    (the data names its run itself, so it keeps it); ``False`` when it cannot be read (the
    ingest says why)."""
    from recovery.formats import ReadOptions, read_file
    from recovery.schema import Trajectory

    records = read_file(path, options.format, ReadOptions(
        success_threshold=options.success_threshold, results=options.results))
    try:
        for record in records:
            if isinstance(record, Trajectory):
                return record.run != default_run_name(path)
    except (Problem, OSError):  # the ingest reads the file again and reports what is wrong
        return False
    finally:
        records.close()
    return False


def run_names_for(files: list[Path], options: IngestOptions) -> dict[Path, str]:
    """The run label to give each input whose default name collides with another's and whose
    data names no run (see :func:`distinct_run_names`); keys are the resolved paths."""
    if options.run is not None:
        return {}
    return {path: label for path, label in distinct_run_names(files).items()
            if not _names_its_run(path, options)}


def names_line(names: dict[Path, str]) -> str:
    """The line that tells which inputs were given which run names."""
    return "run names given to inputs of the same name: " + ", ".join(
        f"{path} -> {label}" for path, label in names.items())


def ingest_named(
    store: Store,
    files: list[Path],
    options: IngestOptions,
    *,
    on_result: Callable[[IngestResult], Any] | None = None,
    on_names: Callable[[dict[Path, str]], Any] | None = None,
    progress: Callable[[list[Path]], Iterable[Path]] | None = None,
) -> tuple[list[IngestResult], dict[Path, str]]:
    """Ingest each input (each atomically), giving inputs whose default run names collide
    distinct names (:func:`run_names_for`; ``on_names`` is told them first).

    Args:
        store: The store.
        files: The inputs.
        options: The options of every input.
        on_result: Called with each input's result as soon as it is known.
        on_names: Called with the run names given, if any, before the first ingest.
        progress: Wraps the inputs for iterating (e.g. in a progress bar).

    Returns:
        One result per input, in order, and the names given.

    Raises:
        UsageProblem: when colliding run names cannot be told apart by their folders.
    """
    names = run_names_for([Path(p) for p in files], options)
    if names and on_names is not None:
        on_names(names)
    results: list[IngestResult] = []
    for path in (files if progress is None else progress(files)):
        label = names.get(Path(path).resolve())
        file_options = options if label is None else dataclasses.replace(options, run=label)
        results += store.ingest_files([path], file_options, on_result=on_result)
    return results, names


def ingest_command(
    config: IngestConfig,
    *,
    on_result: Callable[[IngestResult], Any] | None = None,
    on_names: Callable[[dict[Path, str]], Any] | None = None,
    progress: Callable[[list[Path]], Iterable[Path]] | None = None,
) -> IngestOutcome:
    """Ingest every input of ``config`` into its store (each atomically), then check the data.

    A store this command made and could store nothing in (every input failed) is removed
    again, so that a wrong ``--format`` or path leaves nothing behind.

    Args:
        config: The options.
        on_result: Called with each input's result as soon as it is known.
        on_names: Called with the run names given to inputs of the same name, if any.
        progress: Wraps the inputs for iterating (e.g. in a progress bar).

    Raises:
        UsageProblem: for options that do not hold, or inputs whose run names collide and
            cannot be told apart by their folders.
        InputProblem: when the store cannot be opened.
    """
    from recovery.store.opening import open_store

    options = config.ingest_options()
    created = config.store is not None and not Path(config.store).exists()
    store = open_store(config.store)
    try:
        results, names = ingest_named(store, list(config.files), options, on_result=on_result,
                                      on_names=on_names, progress=progress)
        return ingest_outcome(store, results, names, created)
    finally:
        store.close()


def ingest_outcome(store: Store, results: list[IngestResult], names: dict | None,
                   created: bool) -> IngestOutcome:
    """The outcome of an ingest into ``store`` (either engine): the store's totals, the
    data checks of the runs it touched, and the removal of a store this command ``created``
    and could store nothing in."""
    from recovery.quality import run_quality, summary_lines

    (n_trajectories, n_turns) = store.con.execute(
        "SELECT count(*), coalesce(sum(n_turns), 0) FROM trajectories").fetchone()
    outcome = IngestOutcome(results, int(n_trajectories), int(n_turns), run_names=names)
    # The runs this command stored (or found already stored), not the whole store: the
    # check costs what the input costs.
    touched = store.runs_of(results)
    outcome.quality_lines = summary_lines(run_quality(store.con, touched)) if touched else []
    outcome.removed = bool(created and not n_trajectories and outcome.n_failed
                           and store.remove_if_unused())
    return outcome
