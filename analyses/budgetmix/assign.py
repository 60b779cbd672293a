"""Per-row turn budgets for real trainers: the library face of ``recovery budgetmix assign``.

Each row of a training dataset gets a ``max_turns`` drawn from a budget schedule (seeded, so
the same seed, schedule and rows give the same file), in the places the trainers hand per-row
values to the code that runs an episode:

- verl: the row's ``extra_info`` (a struct / object column; ``RLHFDataset`` passes it to the
  agent loop's ``run(**kwargs)`` as ``kwargs["extra_info"]``);
- SkyRL: a top-level column (``PromptDataset`` puts every column but the prompt and the
  environment class into the row's ``env_extras``);
- TRL: a top-level column (``GRPOTrainer`` calls ``environment.reset(**row)`` with the row).

``trainer="all"`` (the default) writes both places, so one file serves all three. A trainer
repeats a row for the samples of its group (GRPO's ``num_generations``, verl's
``rollout.n``, SkyRL's ``n_samples_per_prompt``), so a group shares its budget.

The adapters (:mod:`analyses.budgetmix.adapters`) read the budget back with :func:`row_budget`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analyses.budgetmix.assign_stream import (
    jsonl_chunks,
    jsonl_schema,
    parquet_rows,
    parquet_tables,
)
from analyses.budgetmix.schedule import MAX_BUDGET, BudgetSchedule, validate_schedule
from recovery.config import CheckedOptions, opt
from recovery.errors import InputProblem, UsageProblem
from recovery.formats.base import DEFAULT_MAX_RECORD_BYTES
from recovery.jsonsafe import dumps

if TYPE_CHECKING:
    import pyarrow as pa

BUDGET_KEY = "max_turns"
"""The name of the per-row budget, at the top level and inside ``extra_info``."""

EXTRA_INFO = "extra_info"
"""verl's per-row column of extra values."""

TRAINERS = ("all", "verl", "skyrl", "trl")
"""Where the budget is written: ``verl`` inside ``extra_info``, ``skyrl``/``trl`` as a column,
``all`` both."""

DATASET_SUFFIXES = (".parquet", ".jsonl")
"""Dataset files ``assign`` reads and writes."""


@dataclass
class AssignConfig(CheckedOptions):
    """Options of ``recovery budgetmix assign`` (and of :func:`assign`)."""

    schedule: Path | None = opt(
        None, "Budget schedule JSON (from `recovery budgetmix plan`).", required=True)
    dataset: Path | None = opt(None, "Training dataset: .parquet or .jsonl.", required=True)
    out: Path | None = opt(
        None, "Output dataset (.parquet or .jsonl; may differ from the input's).",
        required=True, short="-o")
    seed: int = opt(0, "Seed of the draws (same seed, schedule and rows: same budgets).")
    trainer: str = opt(
        "all", "Where max_turns goes: verl (extra_info), skyrl or trl (a column), all (both).",
        choices=TRAINERS,
    )
    overwrite: bool = opt(False, "Replace a max_turns the rows already have (else an error).")
    max_record_mb: float = opt(
        512.0, "Largest row accepted, in MB (decoded); the dataset is read under this bound.")


@dataclass(slots=True)
class AssignResult:
    """What :func:`assign_budgets` wrote.

    Attributes:
        path: The output dataset.
        n_rows: Rows written (each with its budget).
        counts: Budget -> rows that got it.
        trainer: Where the budget was written.
        seed: The seed of the draws.
    """

    path: Path
    n_rows: int
    counts: dict[int, int] = field(default_factory=dict)
    trainer: str = "all"
    seed: int = 0

    def summary(self) -> str:
        """One line: the file, the rows, and how many got each budget."""
        per = ", ".join(f"T={t}: {n}" for t, n in sorted(self.counts.items()))
        return (f"{self.path}: {self.n_rows} rows with {BUDGET_KEY} for {self.trainer} "
                f"(seed {self.seed}); {per}")


def row_budget(values: Mapping[str, Any] | None, key: str = BUDGET_KEY) -> int | None:
    """The turn budget a row carries, wherever the trainer put it.

    Looks at ``values[key]`` (a TRL row, SkyRL's ``env_extras``), then at
    ``values["extra_info"][key]`` (a verl row, or verl's agent-loop keyword arguments).

    Args:
        values: The row (or the trainer's per-row mapping); ``None`` has no budget.
        key: The budget's name.

    Returns:
        The budget, or ``None`` when the row has none.

    Raises:
        InputProblem: for a budget that is not a positive integer up to ``2**31 - 1`` (a
            float is read when it holds a whole number, as a Parquet column of doubles does).
    """
    if values is None:
        return None
    value = values.get(key)
    if value is None:
        extra = values.get(EXTRA_INFO)
        value = extra.get(key) if isinstance(extra, Mapping) else None
    if value is None:
        return None
    rule = f"{key} must be a positive integer (at most {MAX_BUDGET})"
    if isinstance(value, (bool, np.bool_)):
        raise InputProblem(f"{rule}, got {'true' if value else 'false'}")
    if isinstance(value, (float, np.floating)):
        if not float(value).is_integer():  # 2.5, nan, inf
            raise InputProblem(f"{rule}, got {float(value)!r}")
    elif not isinstance(value, (int, np.integer)):
        raise InputProblem(f"{rule}, got {type(value).__name__} {str(value)[:40]!r}")
    number = int(value)
    if not 1 <= number <= MAX_BUDGET:
        shown = str(number)
        shown = shown if len(shown) <= 40 else f"a {len(shown.lstrip('-'))}-digit integer"
        raise InputProblem(f"{rule}, got {shown}")
    return number


def with_budgets(
    rows: Sequence[Mapping[str, Any]], budgets: Sequence[int], trainer: str = "all",
    *, overwrite: bool = False, first_row: int = 1,
) -> list[dict[str, Any]]:
    """Rows (dicts) with their budgets added where ``trainer`` reads them.

    Args:
        rows: The dataset's rows.
        budgets: One budget per row.
        trainer: One of :data:`TRAINERS`.
        overwrite: Replace an existing ``max_turns`` (else it is an error).
        first_row: The number messages give ``rows[0]`` (rows read in chunks).

    Returns:
        New row dicts (the input is not modified).

    Raises:
        UsageProblem: for an unknown ``trainer``.
        InputProblem: naming the row when it already has a budget (and not ``overwrite``), or
            its ``extra_info`` is not an object.
        ValueError: when ``rows`` and ``budgets`` differ in length (a caller's bug).
    """
    if trainer not in TRAINERS:
        raise UsageProblem(f"unknown trainer {trainer!r}; known: {', '.join(TRAINERS)}")
    if len(rows) != len(budgets):
        raise ValueError(f"{len(rows)} rows but {len(budgets)} budgets")
    top, nested = trainer in ("all", "skyrl", "trl"), trainer in ("all", "verl")
    out = []
    for i, (row, budget) in enumerate(zip(rows, budgets, strict=True), start=first_row - 1):
        new = dict(row)
        if top:
            if BUDGET_KEY in new and not overwrite:
                raise InputProblem(f"row {i + 1} already has {BUDGET_KEY}; pass --overwrite")
            new[BUDGET_KEY] = int(budget)
        if nested:
            extra = new.get(EXTRA_INFO)
            if extra is None:
                extra = {}
            if not isinstance(extra, Mapping):
                raise InputProblem(f"row {i + 1}: {EXTRA_INFO} is {type(extra).__name__}, "
                                   "not an object")
            if BUDGET_KEY in extra and not overwrite:
                raise InputProblem(f"row {i + 1} already has {EXTRA_INFO}.{BUDGET_KEY}; "
                                   "pass --overwrite")
            new[EXTRA_INFO] = {**extra, BUDGET_KEY: int(budget)}
        out.append(new)
    return out


def _with_budgets_table(
    table: pa.Table, budgets: np.ndarray, trainer: str, *, overwrite: bool
) -> pa.Table:
    """The Parquet path of :func:`with_budgets`: the same columns, changed in Arrow.

    Raises:
        InputProblem: when the table already has a budget (and not ``overwrite``), or its
            ``extra_info`` is not a struct.
    """
    import pyarrow as pa

    column = pa.array(budgets, pa.int64())
    if trainer in ("all", "skyrl", "trl"):
        if BUDGET_KEY in table.column_names:
            if not overwrite:
                raise InputProblem(
                    f"the dataset already has a {BUDGET_KEY} column; pass --overwrite")
            table = table.set_column(table.column_names.index(BUDGET_KEY), BUDGET_KEY, column)
        else:
            table = table.append_column(BUDGET_KEY, column)
    if trainer in ("all", "verl"):
        if EXTRA_INFO in table.column_names:
            extra = table.column(EXTRA_INFO).combine_chunks()
            if not pa.types.is_struct(extra.type):
                raise InputProblem(f"the {EXTRA_INFO} column is {extra.type}, not a struct")
            names = [extra.type.field(i).name for i in range(extra.type.num_fields)]
            if BUDGET_KEY in names and not overwrite:
                raise InputProblem(f"the rows already have {EXTRA_INFO}.{BUDGET_KEY}; "
                                   "pass --overwrite")
            children = [child for name, child in zip(names, extra.flatten(), strict=True)
                        if name != BUDGET_KEY]
            kept = [name for name in names if name != BUDGET_KEY]
            merged = pa.StructArray.from_arrays([*children, column], names=[*kept, BUDGET_KEY])
            table = table.set_column(table.column_names.index(EXTRA_INFO), EXTRA_INFO, merged)
        else:
            table = table.append_column(
                EXTRA_INFO, pa.StructArray.from_arrays([column], names=[BUDGET_KEY]))
    return table


def _suffix(path: Path, what: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in DATASET_SUFFIXES:
        raise UsageProblem(f"{what} {path}: the file must end in .parquet or .jsonl")
    return suffix


@dataclass(frozen=True)
class AssignOptions:
    """How :func:`assign_budgets` draws and writes (``recovery budgetmix assign``'s settings)."""

    seed: int = opt(0, "Seed of the draws (same seed, schedule and rows: same budgets).")
    trainer: str = opt("all", "Where max_turns goes: one of TRAINERS (verl: extra_info; "
                              "skyrl or trl: a column; all: both).")
    overwrite: bool = opt(False, "Replace a max_turns the rows already have (else an error).")
    max_record_bytes: int = opt(DEFAULT_MAX_RECORD_BYTES, "The largest row accepted (decoded); "
                                                          "a larger one is an error.")


def assign_budgets(
    dataset: str | Path,
    schedule: BudgetSchedule,
    out: str | Path,
    options: AssignOptions = AssignOptions(),
) -> AssignResult:
    """Add a ``max_turns`` drawn from ``schedule`` to every row of ``dataset`` (``.parquet`` or
    ``.jsonl``); write ``out`` (either kind) and say what was written.

    Row ``i`` gets the ``i``-th of ``schedule.sample(numpy.random.default_rng(seed), n_rows)``;
    every other column or field is kept. The dataset is streamed
    (:mod:`analyses.budgetmix.assign_stream`), so memory follows the batch budget and
    ``max_record_bytes``, not the file; ``out`` is written beside itself and renamed, so a
    failure leaves no partial file (and ``out`` may be ``dataset``).

    Raises:
        UsageProblem: for a file type, trainer, seed or limit that cannot be used, or a
            schedule whose budgets or weights break a rule
            (:func:`analyses.budgetmix.schedule.validate_schedule`).
        InputProblem: naming the file (and line or row) when the dataset cannot be read, is
            over the limits, or cannot be changed or written.
    """
    import pyarrow as pa

    from recovery.errors import Problem
    from recovery.outputs import atomic_output

    seed, trainer, overwrite = options.seed, options.trainer, options.overwrite
    max_record_bytes = options.max_record_bytes
    dataset, out = Path(dataset), Path(out)
    _check_arguments(trainer, seed, max_record_bytes)
    validate_schedule(schedule.budgets, schedule.weights)  # also a schedule changed since made
    in_kind, out_kind = _suffix(dataset, "dataset"), _suffix(out, "output")
    if not dataset.is_file():
        raise InputProblem(f"dataset {dataset} does not exist")
    if in_kind == ".parquet" and parquet_rows(dataset) == 0:
        raise InputProblem(f"dataset {dataset} has no rows")
    draws = _Draws(schedule, seed)
    pieces = _Pieces(dataset, in_kind, trainer, overwrite, max_record_bytes)
    try:
        with atomic_output(out) as temp:
            _write(pieces, draws, temp, out_kind)
            if not draws.n_rows:
                raise InputProblem(f"dataset {dataset} has no rows")
    except Problem:
        raise
    except (pa.ArrowException, TypeError, ValueError) as err:
        raise InputProblem(f"{dataset}: cannot be written as {out_kind[1:]} ({err})") from None
    return AssignResult(path=out, n_rows=draws.n_rows, counts=dict(sorted(draws.counts.items())),
                        trainer=trainer, seed=seed)


def _check_arguments(trainer: str, seed: Any, max_record_bytes: Any) -> None:
    if trainer not in TRAINERS:
        raise UsageProblem(f"unknown trainer {trainer!r}; known: {', '.join(TRAINERS)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageProblem(f"--seed must be 0 or more, got {seed}")
    if isinstance(max_record_bytes, bool) or not isinstance(max_record_bytes, int) \
            or max_record_bytes <= 0:
        raise UsageProblem(f"--max-record-mb: must be > 0, not {max_record_bytes}")


class _Draws:
    """The budgets, drawn a piece at a time from one seeded generator, and their counts."""

    def __init__(self, schedule: BudgetSchedule, seed: int) -> None:
        self.schedule = schedule
        self.rng = np.random.default_rng(seed)
        self.n_rows = 0
        self.counts: Counter[int] = Counter()

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` budgets (numpy draws them in order: pieces give one sequence)."""
        budgets = self.schedule.sample(self.rng, n)
        self.n_rows += n
        self.counts.update(int(b) for b in budgets)
        return budgets


@dataclass(frozen=True, slots=True)
class _Pieces:
    """How to read the dataset, a bounded piece at a time, and add budgets to each piece."""

    dataset: Path
    kind: str
    trainer: str
    overwrite: bool
    max_record_bytes: int

    def read(self) -> Iterator[pa.Table | list[dict[str, Any]]]:
        """The dataset's pieces: Arrow tables for Parquet, row dicts for JSON Lines."""
        if self.kind == ".parquet":
            return parquet_tables(self.dataset, self.max_record_bytes)
        return jsonl_chunks(self.dataset, self.max_record_bytes)

    def budgeted(self, piece: Any, budgets: np.ndarray, first_row: int) -> Any:
        """``piece`` with ``budgets`` added where the trainer reads them.

        Raises:
            InputProblem: naming the file when a row cannot take its budget.
        """
        try:
            if isinstance(piece, list):
                return with_budgets(piece, budgets.tolist(), self.trainer,
                                    overwrite=self.overwrite, first_row=first_row)
            return _with_budgets_table(piece, budgets, self.trainer, overwrite=self.overwrite)
        except InputProblem as err:  # a row that cannot take its budget, named by the file
            raise InputProblem(f"{self.dataset}: {err}") from None

    def schema(self) -> pa.Schema:
        """The Parquet schema of the budgeted JSON Lines rows (a first reading of the file)."""

        def chunks() -> Iterator[list[dict[str, Any]]]:
            first = 1
            for chunk in self.read():
                yield self.budgeted(chunk, np.ones(len(chunk), dtype=np.int64), first)
                first += len(chunk)

        return jsonl_schema(chunks())


def _budgeted(pieces: _Pieces, draws: _Draws) -> Iterator[Any]:
    """The dataset's pieces, each with the next budgets added."""
    for piece in pieces.read():
        n = len(piece) if isinstance(piece, list) else piece.num_rows
        first = draws.n_rows + 1
        yield pieces.budgeted(piece, draws.take(n), first)


def _write(pieces: _Pieces, draws: _Draws, temp: Path, out_kind: str) -> None:
    """Write the budgeted pieces to ``temp`` as ``out_kind``, one piece at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if out_kind == ".jsonl":
        with open(temp, "w", encoding="utf-8", newline="\n") as fh:
            for piece in _budgeted(pieces, draws):
                rows = piece if isinstance(piece, list) else piece.to_pylist()
                fh.writelines(dumps(row) + "\n" for row in rows)
        return
    schema = pieces.schema() if pieces.kind == ".jsonl" else None
    writer: pq.ParquetWriter | None = None
    try:
        for piece in _budgeted(pieces, draws):
            table = pa.Table.from_pylist(piece, schema=schema) if isinstance(piece, list) \
                else piece
            if writer is None:
                writer = pq.ParquetWriter(temp, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()


def assign(config: AssignConfig) -> AssignResult:
    """``recovery budgetmix assign``: read the schedule and write the dataset with budgets.

    Args:
        config: The command's options.

    Returns:
        What was written.

    Raises:
        UsageProblem: for an option that cannot be used.
        InputProblem: for a schedule or dataset that cannot be read, or a schedule that breaks
            a rule (naming the file).
    """
    if config.schedule is None or config.dataset is None or config.out is None:
        raise UsageProblem("assign needs --schedule, --dataset and --out")
    try:
        schedule = BudgetSchedule.load(config.schedule)
    except UsageProblem as err:  # the schedule is this command's input: exit status 1
        raise InputProblem(str(err)) from None
    if not config.max_record_mb > 0:
        raise UsageProblem(f"--max-record-mb: must be > 0, not {config.max_record_mb}")
    from recovery.outputs import check_output_path

    check_output_path(config.out, "--out")  # before the dataset is read
    return assign_budgets(config.dataset, schedule, config.out, AssignOptions(
        seed=config.seed, trainer=config.trainer, overwrite=config.overwrite,
        max_record_bytes=int(config.max_record_mb * 1024 * 1024)))
