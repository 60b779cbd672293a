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

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analyses.budgetmix.schedule import MAX_BUDGET, BudgetSchedule, validate_schedule
from recovery.config import CheckedOptions, opt
from recovery.errors import InputProblem, UsageProblem
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
    *, overwrite: bool = False,
) -> list[dict[str, Any]]:
    """Rows (dicts) with their budgets added where ``trainer`` reads them.

    Args:
        rows: The dataset's rows.
        budgets: One budget per row.
        trainer: One of :data:`TRAINERS`.
        overwrite: Replace an existing ``max_turns`` (else it is an error).

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
    for i, (row, budget) in enumerate(zip(rows, budgets, strict=True)):
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


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON Lines dataset, each parsed strictly (UTF-8, no NaN, bounded depth).

    Raises:
        InputProblem: naming the file and line of the first row that cannot be read.
    """
    from recovery.formats.jsontext import UTF8_BOM, parse_json
    from recovery.schema import RecordError

    rows = []
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, start=1):
            if number == 1:
                line = line.removeprefix(UTF8_BOM)
            if not line.strip():
                continue
            try:
                row = parse_json(line, file=str(path), line=number)
            except RecordError as err:
                message = err.message.replace(" or drop the record (--skip-bad)", "")
                if message.startswith("malformed JSON: "):
                    message = f"not JSON: {message.removeprefix('malformed JSON: ')}"
                raise InputProblem(f"{path}:{number}: {message}") from None
            if not isinstance(row, dict):
                raise InputProblem(f"{path}:{number}: a row must be a JSON object, "
                                   f"got {type(row).__name__}")
            rows.append(row)
    return rows


def _suffix(path: Path, what: str) -> str:
    suffix = path.suffix.lower()
    if suffix not in DATASET_SUFFIXES:
        raise UsageProblem(f"{what} {path}: the file must end in .parquet or .jsonl")
    return suffix


def _write_atomically(out: Path, write: Any) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def assign_budgets(
    dataset: str | Path,
    schedule: BudgetSchedule,
    out: str | Path,
    *,
    seed: int = 0,
    trainer: str = "all",
    overwrite: bool = False,
) -> AssignResult:
    """Add a ``max_turns`` drawn from ``schedule`` to every row of ``dataset``; write ``out``.

    The draws are ``schedule.sample(numpy.random.default_rng(seed), n_rows)``, row ``i``
    getting the ``i``-th. Parquet is changed in Arrow (every other column and its type kept);
    JSON Lines row by row (every other field kept). ``out`` is written to a temporary file and
    renamed, so a failure leaves no partial file (and ``out`` may be ``dataset``).

    Long because the docstring documents the arguments and what is written; the body is about 51
    lines.

    Args:
        dataset: The training dataset (``.parquet`` or ``.jsonl``).
        schedule: The budget schedule.
        out: The output dataset (``.parquet`` or ``.jsonl``).
        seed: Seed of the draws.
        trainer: One of :data:`TRAINERS`.
        overwrite: Replace a ``max_turns`` the rows already have.

    Returns:
        What was written.

    Raises:
        UsageProblem: for a file type, trainer or seed that cannot be used, or a schedule
            whose budgets or weights break a rule
            (:func:`analyses.budgetmix.schedule.validate_schedule`).
        InputProblem: naming the file (and line) when the dataset cannot be read or changed.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    dataset, out = Path(dataset), Path(out)
    if trainer not in TRAINERS:
        raise UsageProblem(f"unknown trainer {trainer!r}; known: {', '.join(TRAINERS)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UsageProblem(f"--seed must be 0 or more, got {seed}")
    validate_schedule(schedule.budgets, schedule.weights)  # also a schedule changed since made
    in_kind, out_kind = _suffix(dataset, "dataset"), _suffix(out, "output")
    if not dataset.is_file():
        raise InputProblem(f"dataset {dataset} does not exist")
    table: pa.Table | None = None
    rows: list[dict[str, Any]] | None = None
    if in_kind == ".parquet":
        try:
            table = pq.read_table(dataset)
        except (pa.ArrowException, OSError) as err:
            raise InputProblem(f"{dataset}: cannot be read as Parquet ({err})") from None
        n_rows = table.num_rows
    else:
        rows = _read_jsonl(dataset)
        n_rows = len(rows)
    if n_rows == 0:
        raise InputProblem(f"dataset {dataset} has no rows")
    budgets = schedule.sample(np.random.default_rng(seed), n_rows)
    try:
        if table is not None:
            table = _with_budgets_table(table, budgets, trainer, overwrite=overwrite)
        else:
            rows = with_budgets(rows, budgets.tolist(), trainer,  # type: ignore[arg-type]
                                overwrite=overwrite)
    except InputProblem as err:  # a row that cannot take its budget, named by the file
        raise InputProblem(f"{dataset}: {err}") from None

    def write(tmp: Path) -> None:
        if out_kind == ".parquet":
            pq.write_table(table if table is not None else pa.Table.from_pylist(rows), tmp)
            return
        records = table.to_pylist() if table is not None else rows
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            for record in records or []:
                fh.write(dumps(record) + "\n")

    try:
        _write_atomically(out, write)
    except (pa.ArrowException, TypeError, ValueError) as err:
        raise InputProblem(f"{dataset}: cannot be written as {out_kind[1:]} ({err})") from None
    counts = Counter(int(b) for b in budgets)
    return AssignResult(path=out, n_rows=n_rows, counts=dict(sorted(counts.items())),
                        trainer=trainer, seed=seed)


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
    return assign_budgets(config.dataset, schedule, config.out, seed=config.seed,
                          trainer=config.trainer, overwrite=config.overwrite)
