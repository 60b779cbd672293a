"""Grouped k-fold cross-validation of a PRM by task (``prm cv``), for small labelled sets.

The tasks are dealt into ``folds`` groups (scikit-learn's ``GroupKFold`` with the seed's
shuffle): every sample of a task lands in the same fold, and every trajectory is scored once,
by the model trained on the other folds. The metrics are pooled over all folds, beside the
"every step correct" floors computed on the same turns, with percentile bootstrap intervals
over tasks (:func:`prm.evaluation.decisions.decision_intervals`); the same metrics are given per fold.

Every kind goes through the same loop (:func:`_fold_predictions`): per fold, the kind
(:mod:`prm.kinds`) is fitted on the other folds' tasks, exactly as ``prm train`` fits it, and
scores the fold. Label-free work is shared between folds: the structured kind's features and
the frozen kind's backbone features are computed once. The neural kind holds out a validation
share of each fold's training tasks (best epoch, error threshold); the others choose their
threshold by grouped folds inside the training tasks.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.config import TrainConfig
from prm.data.labels import no_target_message, unused_labels_note
from recovery.config import opt
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    import pandas as pd

    from prm.data.examples import StepExample, TaskSplit

METRICS = ("step_acc", "first_error_acc", "step_auroc", "floor_all_correct_step_acc",
           "floor_all_correct_first_error_acc", "n_trajectories", "n_steps")
FLOOR_KEYS = ("setting", *METRICS, "floor_outcome_step_acc", "floor_outcome_first_error_acc",
              "floor_prior_step_acc", "floor_prior_first_error_acc", "margins", "intervals",
              "verdict")
"""What :func:`prm.evaluation.floors.floor_report` gives the report."""


@dataclass
class CVConfig(TrainConfig):
    """Options of ``prm cv``: those of ``prm train`` that shape the model, and the folds."""

    out: Path | None = opt(
        None, "Keep the folds' models in this folder (default: a temporary one, removed)."
    )
    val_fraction: float = opt(
        0.125, "full and lora: share of each fold's training tasks that validates."
    )
    folds: int = opt(5, "Folds (groups of tasks).")
    fold_seeds: list[int] | None = opt(
        None, "Repeat the cross-validation over these fold seeds (comma-separated; in place "
        "of --seed) and report the mean and spread over them.")
    n_boot: int = opt(1000, "Bootstrap replicates over tasks for the intervals.")
    json_out: Path | None = opt(None, "Write the report as JSON here.", flag="--json")
    # Options of prm train that a cross-validation does not take.
    test_fraction: float = 0.0
    save_every: int = 0
    keep_checkpoints: int = 1
    resume: bool = False
    stop_after: int | None = None


@dataclass
class CVReport:
    """Pooled out-of-fold metrics, their intervals over tasks, and each fold's.

    Attributes:
        backbone, mode, head, labels, setting: What was cross-validated.
        folds, seed: The folds.
        step_acc, first_error_acc, step_auroc: Pooled over folds (:func:`prm.evaluation.decisions.decision_metrics`).
        floor_all_correct_step_acc, floor_all_correct_first_error_acc: "Every step correct".
        floor_outcome_step_acc, floor_outcome_first_error_acc: In hindsight, the
            outcome-aware rule (success: no error; failure: the last turn is the first error).
        floor_prior_step_acc, floor_prior_first_error_acc: Where no turn is labelled +1, the
            fold-prior floor (:func:`prm.evaluation.floors.fold_prior_classes`).
        argmax: The same out-of-fold scores decided by argmax (``step_acc``,
            ``first_error_acc``), beside the shipped decision.
        fold_seeds: With ``--fold-seeds``, one summary per fold seed
            (:mod:`prm.evaluation.fold_seeds`); the other fields are the first seed's.
        n_trajectories, n_steps: Labelled trajectories and turns scored.
        margins: The model minus each floor (``step_acc_minus_floor``,
            ``first_error_acc_minus_floor``; in hindsight also ``*_minus_floor_outcome``).
        intervals: 95% bootstrap intervals over tasks of each metric and of each margin
            (paired: model and floor on the same resample).
        verdict: One line: which floors the model beats.
        notes: What the user should know (e.g. sibling features were neutral).
        per_fold: The same metrics per fold, with its tasks and error threshold.
        wall_s: Seconds the cross-validation took.
        predictions: The pooled out-of-fold scores (``traj_id, t, task_id, fold, target,
            score``, ``p_neutral`` for a ternary head, ``threshold``); not in the JSON.
    """

    backbone: str
    mode: str
    head: str
    labels: str
    folds: int
    seed: int
    setting: str = "blind"
    step_acc: float | None = None
    first_error_acc: float | None = None
    step_auroc: float | None = None
    floor_all_correct_step_acc: float | None = None
    floor_all_correct_first_error_acc: float | None = None
    floor_outcome_step_acc: float | None = None
    floor_outcome_first_error_acc: float | None = None
    floor_prior_step_acc: float | None = None
    floor_prior_first_error_acc: float | None = None
    argmax: dict[str, Any] = field(default_factory=dict)
    fold_seeds: list[dict[str, Any]] = field(default_factory=list)
    n_trajectories: int = 0
    n_steps: int = 0
    margins: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, Any] = field(default_factory=dict)
    verdict: str = ""
    notes: list[str] = field(default_factory=list)
    per_fold: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    predictions: Any = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (without the predictions)."""
        return {k: v for k, v in asdict(self).items() if k != "predictions"}

    def lines(self) -> list[str]:
        """A short text report."""
        from prm.evaluation.fold_seeds import argmax_line, fold_seed_lines

        if self.fold_seeds:
            return [f"prm cv: {self.backbone} ({self.mode}, {self.head}, {self.setting}) on "
                    f"labels {self.labels}, {self.folds} folds by task, fold seeds "
                    f"{', '.join(str(r['seed']) for r in self.fold_seeds)}: "
                    f"{self.n_trajectories} trajectories, {self.n_steps} labelled turns, "
                    f"{self.wall_s:.0f} s", *fold_seed_lines(self.fold_seeds),
                    *(f"  note: {note}" for note in self.notes)]
        return [
            f"prm cv: {self.backbone} ({self.mode}, {self.head}, {self.setting}) on labels "
            f"{self.labels}, {self.folds} folds by task: {self.n_trajectories} trajectories, "
            f"{self.n_steps} labelled turns, {self.wall_s:.0f} s",
            *floor_lines(self.to_dict()),
            *([argmax_line(self.to_dict())] if self.argmax else []),
            *(f"  note: {note}" for note in self.notes),
        ]


def floor_lines(report: dict[str, Any]) -> list[str]:
    """The metrics of a :func:`prm.evaluation.floors.floor_report` beside their floors, as text."""

    def f(x: Any) -> str:
        return "n/a" if x is None or x != x else f"{x:.3f}"

    def ci(name: str) -> str:
        low_high = report.get("intervals", {}).get(name)
        return f" [{f(low_high[0])}, {f(low_high[1])}]" if low_high else ""

    def margin(name: str) -> str:
        value = report.get("margins", {}).get(name)
        return f"{'n/a' if value is None else f'{value:+.3f}'}{ci(name)}"

    lines = [f"  step AUROC {f(report.get('step_auroc'))}{ci('step_auroc')}"]
    for metric, words in (("step_acc", "step accuracy"),
                          ("first_error_acc", "first-error accuracy")):
        line = (f"  {words} {f(report.get(metric))}{ci(metric)}; every step correct "
                f"{f(report.get(f'floor_all_correct_{metric}'))} (margin "
                f"{margin(f'{metric}_minus_floor')})")
        if report.get("setting") == "hindsight":
            line += (f"; outcome-aware {f(report.get(f'floor_outcome_{metric}'))} (margin "
                     f"{margin(f'{metric}_minus_floor_outcome')})")
        if report.get(f"floor_prior_{metric}") is not None:
            line += (f"; fold prior {f(report.get(f'floor_prior_{metric}'))} (margin "
                     f"{margin(f'{metric}_minus_floor_prior')})")
        lines.append(line)
    lines.append(f"  verdict: {report.get('verdict', '')}")
    return lines


def _turn_table(examples: list[StepExample], fold: list[int]) -> pd.DataFrame:
    """One row per turn: ``traj_id, t, task_id, target``, the fold, the outcome
    (``success``, NaN when unknown) and ``n_turns`` (for the outcome-aware floor)."""
    import numpy as np

    from prm.data.examples import turn_rows

    rows = turn_rows(examples)
    rows["fold"] = [k for e, k in zip(examples, fold, strict=True) for _ in range(e.n_steps)]
    lengths = [e.n_steps for e in examples]
    rows["success"] = np.repeat([np.nan if e.success is None else float(e.success)
                                 for e in examples], lengths)
    rows["n_turns"] = np.repeat(lengths, lengths)
    return rows


def _split_of_fold(config: CVConfig, train: list[StepExample], test: list[StepExample]
                   ) -> TaskSplit:
    """Fold ``k``'s split: its test tasks, the others' tasks train, less a validation share
    of them (which only the neural kind holds out)."""
    from prm.data.examples import TaskSplit, split_tasks

    v = config.val_fraction
    tasks = split_tasks((e.task_id for e in train), seed=config.seed,
                        fractions=(1.0 - v, v, 0.0))
    tasks.update({e.task_id: "test" for e in test})
    return TaskSplit(seed=config.seed, fractions=(1.0 - v, v, 0.0), tasks=tasks)


def _fold_predictions(config: CVConfig, examples: list[StepExample], fold: list[int],
                      rows: pd.DataFrame, echo: Callable[[str], Any]) -> tuple[pd.DataFrame,
                                                                                str, list[str]]:
    """The one cross-validation loop: per fold, a model of the configured kind fitted on the
    other folds' tasks (:mod:`prm.kinds`), saved, and scoring the fold's trajectories.
    Label-free work (features) is shared between the folds. Returns the out-of-fold rows,
    the head and the notes."""
    import pandas as pd

    from prm.kinds import build
    from prm.kinds.base import FitData
    from recovery.store import open_store

    parts, shared, head = [], {}, "binary"
    with tempfile.TemporaryDirectory(prefix="prm-cv-") as tmp:
        workdir = Path(config.out) if config.out is not None else Path(tmp)
        for k in range(config.folds):
            train = [e for e, f in zip(examples, fold, strict=True) if f != k]
            test = [e for e, f in zip(examples, fold, strict=True) if f == k]
            out = workdir / f"fold-{k}"
            model = build(dataclasses.replace(config, out=out), echo).fit(
                FitData(train + test, _split_of_fold(config, train, test), store=config.store,
                        shared=shared))
            model.save(out)
            store = open_store(config.store, read_only=True, must_exist=True)
            try:
                scores = model.predict_steps(test, con=store.con,
                                             batch_tokens=config.batch_tokens)
            finally:
                store.close()
            part = rows.loc[(rows["fold"] == k).to_numpy()].merge(
                scores, on=["traj_id", "t"], validate="one_to_one")
            part["threshold"] = model.error_threshold
            parts.append(part)
            head = model.head
            echo(f"fold {k + 1}/{config.folds}: {len(train)} trajectories trained, "
                 f"{len(test)} scored, {model.decision_words}")
    return pd.concat(parts, ignore_index=True), head, list(shared.get("notes", []))


def cross_validate(config: CVConfig, *, echo: Callable[[str], Any] = print) -> CVReport:
    """Cross-validate a PRM by task on the store's labelled trajectories.

    Args:
        config: The options (see :class:`CVConfig` and ``prm cv --help``).
        echo: Where progress lines go.

    Returns:
        The report (also written to ``config.json_out`` by the command line).

    Raises:
        InputProblem: a missing store, or no labelled turn.
        UsageProblem: fewer tasks than folds; options that do not go together.
    """
    import json

    from prm.evaluation.fold_seeds import seed_summary

    if config.store is None:
        raise UsageProblem("store is required")
    if config.fold_seeds is not None:
        seeds = list(config.fold_seeds)
        if not seeds or len(set(seeds)) != len(seeds):
            raise UsageProblem("--fold-seeds needs distinct seeds, e.g. 0,1,2,3,4")
        reports = [_cross_validate_once(dataclasses.replace(config, seed=s, fold_seeds=None),
                                        echo) for s in seeds]
        report = reports[0]
        report.fold_seeds = [seed_summary(r) for r in reports]
        report.wall_s = sum(r.wall_s for r in reports)
    else:
        report = _cross_validate_once(config, echo)
    if config.json_out is not None:
        from recovery.jsonsafe import json_safe

        config.json_out.parent.mkdir(parents=True, exist_ok=True)
        config.json_out.write_text(json.dumps(json_safe(report.to_dict()), indent=1))
    return report


def _cross_validate_once(config: CVConfig, echo: Callable[[str], Any]) -> CVReport:
    """:func:`cross_validate` with one fold seed (``config.seed``), writing nothing."""
    from prm.data.examples import fold_of_tasks, load_step_examples
    from prm.evaluation.decisions import decision_metrics
    from prm.evaluation.floors import floor_report
    from prm.evaluation.fold_seeds import argmax_metrics
    from prm.kinds import kind_class, resolve_options
    from recovery.store import open_store

    config = resolve_options(config)
    started = time.perf_counter()
    store = open_store(config.store, read_only=True, must_exist=True)
    con = store.con
    try:
        examples = load_step_examples(con, config.labels, base=config.label_base)
        if config.runs:
            examples = [e for e in examples if e.run in set(config.runs)]
        examples = [e for e in examples if any(x == x for x in e.targets)]
        if not examples:
            raise InputProblem(no_target_message(config.store, config.labels, con))
        unused = unused_labels_note(con, config.labels)
        fold = fold_of_tasks(examples, config.folds, config.seed)
        rows = _turn_table(examples, fold)
        what, mode = kind_class(config.model_kind).trained_words(config)
        echo(f"prm cv: {what}, {config.setting} setting, {len(examples)} "
             f"trajectories ({len(rows)} turns) in {config.folds} folds by task")
    finally:
        store.close()
    pooled, head, notes = _fold_predictions(config, examples, fold, rows, echo)
    notes = [*([unused] if unused else []), *notes]
    pooled = _with_outcomes(pooled, rows)
    report = CVReport(backbone=what, mode=mode, head=head, labels=config.labels,
                      folds=config.folds, seed=config.seed, setting=config.setting, notes=notes)
    echo(f"bootstrap over tasks ({config.n_boot} replicates)")
    summary = floor_report(pooled, None, config.setting, n_boot=config.n_boot,
                           seed=config.seed)
    for name in FLOOR_KEYS:
        if name in summary:
            setattr(report, name, summary[name])
    for k in range(config.folds):
        part = pooled.loc[pooled["fold"] == k]
        report.per_fold.append({
            "fold": k, "n_tasks": int(part["task_id"].nunique()),
            "error_threshold": float(part["threshold"].iloc[0]) if len(part) else None,
            **decision_metrics(part, None),
        })
    report.argmax = argmax_metrics(pooled)
    report.wall_s = time.perf_counter() - started
    report.predictions = pooled
    return report


def _with_outcomes(pooled: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """``pooled`` with each row's ``success`` and ``n_turns`` (the outcome-aware floor's)."""
    extra = [c for c in ("success", "n_turns") if c not in pooled]
    if not extra:
        return pooled
    return pooled.merge(rows[["traj_id", "t", *extra]], on=["traj_id", "t"], how="left",
                        validate="one_to_one")
