"""Step datasets from the store: one example per trajectory, split by task.

An example is a trajectory's prompt and, per turn, the agent's action and what the environment
returned to it (kept apart, so no consumer has to split a joined text), with a training target. The model appends a special step marker token to
every turn and reads the turn's score there (see :mod:`prm.neural.model`); the marker is never part of
the text, so data cannot forge one.

Splits are by task, never by turn or trajectory: every sample of a task lands in the same split,
so a model is always tested on tasks it never saw. The assignment ranks tasks by a seeded hash
of their id and cuts the ranking at the split fractions, so it depends only on the set of tasks
and the seed, and every split with a positive fraction gets at least one task when there are
enough tasks.

Example:
    >>> from prm.data.examples import load_step_examples, split_tasks
    >>> examples = load_step_examples(con, labels="recovery")
    >>> splits = split_tasks([e.task_id for e in examples], seed=0)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

SPLITS = ("train", "validation", "test")
DEFAULT_FRACTIONS = (0.8, 0.1, 0.1)


@dataclass(slots=True)
class StepExample:
    """One trajectory as a sequence of scored steps.

    Attributes:
        traj_id: The store's trajectory id.
        run: Policy / checkpoint label.
        task_id: The task; splits are by task.
        prompt: Text before the first turn (system prompt, task); may be empty.
        actions: The agent's action of each turn, turn ``t`` at index ``t - 1``.
        observations: What the environment returned to each turn.
        targets: One target in [0, 1] per turn, NaN where unknown.
        success: The episode's outcome (``None`` when unknown).
    """

    traj_id: str
    run: str
    task_id: str
    prompt: str
    actions: list[str]
    observations: list[str]
    targets: list[float]
    success: bool | None = None

    @property
    def n_steps(self) -> int:
        """Number of turns."""
        return len(self.actions)

    @property
    def steps(self) -> list[str]:
        """One text per turn as the model reads it (:func:`step_text`)."""
        return [step_text(a, o) for a, o in zip(self.actions, self.observations, strict=True)]


ACTION_PREFIX = "Action: "
"""What a turn's text starts with in :func:`step_text`."""

OBSERVATION_SEPARATOR = "\nObservation: "
"""What separates a turn's action from its observation in :func:`step_text`."""


def step_text(action: str | None, observation: str | None) -> str:
    """The text of one turn as the model reads it: the action, then the observation."""
    return f"{ACTION_PREFIX}{action or ''}{OBSERVATION_SEPARATOR}{observation or ''}"


def load_step_examples(
    con: duckdb.DuckDBPyConnection,
    labels: str | None = "recovery",
    traj_ids: Sequence[str] | None = None,
    *,
    base: str = "mc",
) -> list[StepExample]:
    """Read trajectories from the store as step examples.

    Args:
        con: The store.
        labels: A label source of :data:`prm.data.labels.LABEL_SOURCES`, or ``None`` for no targets
            (all NaN: for scoring).
        traj_ids: Trajectories to read; ``None`` = all.
        base: Base of the ``recovery`` labels (see :func:`prm.data.labels.step_targets`).

    Returns:
        Examples ordered by ``(task_id, run, traj_id)``.
    """
    from recovery.store import traj_scope

    with traj_scope(con, traj_ids, "tr.traj_id") as scope:
        trajectories = con.execute(
            f"SELECT traj_id, run, task_id, coalesce(prompt, '') AS prompt, success "
            f"FROM trajectories tr WHERE {scope} ORDER BY task_id, run, traj_id"
        ).df()
        turns = con.execute(
            f"SELECT u.traj_id, u.t, u.action, u.observation FROM turns u "
            f"JOIN trajectories tr USING (traj_id) WHERE {scope} ORDER BY u.traj_id, u.t"
        ).df()
    turns["action"] = turns["action"].fillna("").astype(str)
    turns["observation"] = turns["observation"].fillna("").astype(str)
    if labels is None:
        turns["target"] = math.nan
    else:
        from prm.data.labels import step_targets

        targets = step_targets(con, labels, traj_ids, base=base)
        turns = turns.merge(targets, on=["traj_id", "t"], how="left", validate="one_to_one")
        turns = turns.sort_values(["traj_id", "t"], ignore_index=True)
    grouped = turns.groupby("traj_id", sort=False).agg(
        actions=("action", list), observations=("observation", list), targets=("target", list)
    )
    examples = []
    for row in trajectories.itertuples(index=False):
        if row.traj_id in grouped.index:
            actions, observations, targets = (
                grouped.at[row.traj_id, column] for column in ("actions", "observations", "targets")
            )
        else:
            actions, observations, targets = [], [], []
        success = None if row.success is None or row.success != row.success else bool(row.success)
        examples.append(
            StepExample(
                traj_id=row.traj_id,
                run=row.run,
                task_id=str(row.task_id),
                prompt=row.prompt,
                actions=list(actions),
                observations=list(observations),
                targets=[float(x) for x in targets],
                success=success,
            )
        )
    return examples


def _task_rank_key(task_id: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}\x1f{task_id}".encode()).hexdigest()


def split_tasks(
    task_ids: Iterable[str],
    seed: int = 0,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
) -> dict[str, str]:
    """Assign every task to ``train``, ``validation`` or ``test``.

    Tasks are ranked by ``sha256(seed, task_id)`` and the ranking is cut at the cumulative
    fractions (rounded), so the split is reproducible from the seed and the set of tasks. Every
    split with a positive fraction gets at least one task while there are enough tasks to go
    round (the train split keeps the rest).

    Args:
        task_ids: Task ids (repeats are fine).
        seed: Seed of the assignment.
        fractions: Fractions of train, validation and test; they must sum to 1.

    Returns:
        ``{task_id: split}``.
    """
    if len(fractions) != 3 or not math.isclose(sum(fractions), 1.0) or min(fractions) < 0:
        raise ValueError(f"fractions must be three non-negative numbers summing to 1: {fractions}")
    tasks = sorted({str(t) for t in task_ids}, key=lambda t: _task_rank_key(t, seed))
    n = len(tasks)
    n_val = round(fractions[1] * n)
    n_test = round(fractions[2] * n)
    if fractions[2] > 0 and n >= 2:
        n_test = max(n_test, 1)
    if fractions[1] > 0 and n >= 3:
        n_val = max(n_val, 1)
    n_train = n - n_val - n_test
    if fractions[0] > 0 and n_train < 1 and n >= 1:
        n_val = max(0, n_val - (1 - n_train))
        n_train = n - n_val - n_test
    names = ["train"] * n_train + ["validation"] * n_val + ["test"] * n_test
    return dict(zip(tasks, names, strict=True))


def _is_split_record(raw: object) -> bool:
    """Whether a parsed ``split.json`` is what :meth:`TaskSplit.save` writes."""

    def number(x: object) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool)

    return (isinstance(raw, dict) and isinstance(raw.get("seed"), int)
            and not isinstance(raw["seed"], bool) and isinstance(raw.get("fractions"), list)
            and len(raw["fractions"]) == 3 and all(map(number, raw["fractions"]))
            and isinstance(raw.get("tasks"), dict)
            and all(v in SPLITS for v in raw["tasks"].values()))


@dataclass(slots=True)
class TaskSplit:
    """A saved task split (``split.json`` next to a model).

    Attributes:
        seed: Seed of :func:`split_tasks`.
        fractions: Train, validation, test fractions.
        tasks: ``{task_id: split}`` for the tasks present at training time.
    """

    seed: int
    fractions: tuple[float, float, float]
    tasks: dict[str, str] = field(default_factory=dict)

    def split_of(self, task_id: str) -> str:
        """The split of a task; tasks unseen at training time count as ``test``."""
        return self.tasks.get(str(task_id), "test")

    def select(self, examples: Iterable[StepExample], split: str) -> list[StepExample]:
        """The examples of one split (``"all"`` keeps every example)."""
        if split == "all":
            return list(examples)
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; known: {', '.join((*SPLITS, 'all'))}")
        return [e for e in examples if self.split_of(e.task_id) == split]

    def save(self, path: str | Path) -> None:
        """Write as JSON."""
        Path(path).write_text(
            json.dumps(
                {"seed": self.seed, "fractions": list(self.fractions), "tasks": self.tasks},
                indent=1,
                sort_keys=True,
            )
        )

    @classmethod
    def load(cls, path: str | Path) -> TaskSplit:
        """Read a split written by :meth:`save` (strictly: :func:`recovery.ownfiles.read_own_json`).

        Raises:
            InputProblem: naming the file when it cannot be read or is not a task split.
        """
        from recovery.errors import InputProblem
        from recovery.ownfiles import read_own_json

        raw = read_own_json(path, "task split")
        if not _is_split_record(raw):
            raise InputProblem(f"{path}: not a task split (seed, three fractions and a split "
                               f"of {', '.join(SPLITS)} per task)")
        return cls(seed=raw["seed"], fractions=tuple(raw["fractions"]), tasks=raw["tasks"])

    @classmethod
    def make(
        cls, examples: Iterable[StepExample], seed: int = 0,
        fractions: Sequence[float] = DEFAULT_FRACTIONS,
    ) -> TaskSplit:
        """Split the tasks of ``examples`` with :func:`split_tasks`."""
        tasks = split_tasks((e.task_id for e in examples), seed=seed, fractions=fractions)
        return cls(seed=seed, fractions=tuple(fractions), tasks=tasks)


def trl_records(
    examples: Iterable[StepExample], *, soft: bool = False
) -> tuple[list[dict[str, object]], int]:
    """Examples in TRL's stepwise-supervision form.

    TRL's ``PRMTrainer`` (``trl.experimental.prm`` in trl 1.13.0) reads rows with ``prompt``
    (str), ``completions`` (list of str, one per step) and ``labels`` (list of bool, one per
    step); it casts labels with ``int()``, so soft targets are written as ``target >= 0.5``
    unless ``soft`` is set. Extra keys (``traj_id``, ``task_id``, ``run``) are ignored by TRL.
    Trajectories with a step whose target is unknown are left out.

    Args:
        examples: Step examples with targets.
        soft: Write the float targets instead of booleans (not readable by PRMTrainer as is).

    Returns:
        The records, and how many trajectories were left out.
    """
    records = []
    left_out = 0
    for example in examples:
        if not example.steps or any(math.isnan(x) for x in example.targets):
            left_out += 1
            continue
        labels = list(example.targets) if soft else [x >= 0.5 for x in example.targets]
        records.append(
            {
                "prompt": example.prompt,
                "completions": list(example.steps),
                "labels": labels,
                "traj_id": example.traj_id,
                "task_id": example.task_id,
                "run": example.run,
            }
        )
    return records, left_out


def export_trl(
    con: duckdb.DuckDBPyConnection,
    out: str | Path,
    labels: str = "recovery",
    *,
    soft: bool = False,
    base: str = "mc",
) -> tuple[int, int]:
    """Write the store's trajectories as TRL stepwise-supervision JSONL.

    Args:
        con: The store.
        out: Output ``.jsonl`` file.
        labels: Label source (see :mod:`prm.data.labels`).
        soft: Float labels instead of booleans.
        base: Base of the ``recovery`` labels.

    Returns:
        Rows written and trajectories left out (a step with an unknown target).
    """
    records, left_out = trl_records(load_step_examples(con, labels, base=base), soft=soft)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    return len(records), left_out


def fold_of_tasks(examples: list[StepExample], folds: int, seed: int) -> list[int]:
    """The fold of each example: tasks dealt into ``folds`` groups (``GroupKFold``, shuffled
    by ``seed``), so the samples of a task are never split."""
    import numpy as np
    from sklearn.model_selection import GroupKFold

    from recovery.errors import UsageProblem

    groups = np.array([e.task_id for e in examples])
    n_tasks = len(np.unique(groups))
    if folds < 2 or n_tasks < folds:
        raise UsageProblem(f"--folds {folds} needs at least 2 folds and as many tasks "
                           f"({n_tasks} here)")
    out = [0] * len(examples)
    splitter = GroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    for k, (_, test) in enumerate(splitter.split(groups, groups=groups)):
        for i in test:
            out[i] = k
    return out


def turn_rows(examples: Sequence[StepExample]) -> pd.DataFrame:
    """One row per turn of ``examples``: ``traj_id, t, task_id, target``, in example order."""
    import numpy as np
    import pandas as pd

    lengths = [e.n_steps for e in examples]
    return pd.DataFrame({
        "traj_id": np.repeat([e.traj_id for e in examples], lengths),
        "t": np.concatenate([np.arange(1, n + 1) for n in lengths] or [np.zeros(0, int)]),
        "task_id": np.repeat([e.task_id for e in examples], lengths),
        "target": np.array([x for e in examples for x in e.targets], dtype=float),
    })
