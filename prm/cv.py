"""Grouped k-fold cross-validation of a PRM by task (``prm cv``), for small labelled sets.

The tasks are dealt into ``folds`` groups (scikit-learn's ``GroupKFold`` with the seed's
shuffle): every sample of a task lands in the same fold, and every trajectory is scored once,
by the model trained on the other folds. The metrics are pooled over all folds, beside the
"every step correct" floors computed on the same turns, with percentile bootstrap intervals
over tasks (:func:`prm.metrics.decision_intervals`); the same metrics are given per fold.

- ``sklearn``: the TF-IDF baseline fitted per fold.
- ``frozen`` (the default for the pretrained backbones): the backbone's features of every turn
  are computed once (the backbone never sees a label), and per fold only the head is fitted,
  with its regularisation and error threshold chosen by grouped cross-validation inside the
  fold's training tasks.
- ``full`` and ``lora`` (and ``tiny``): a model trained per fold by :func:`prm.train.train_examples`
  on the fold's training tasks, less a validation share of them that picks the best epoch and
  the error threshold.
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
from prm.labels import no_target_message, outcome_targets_note
from recovery.config import opt
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    import pandas as pd

    from prm.data import StepExample

METRICS = ("step_acc", "first_error_acc", "step_auroc", "floor_all_correct_step_acc",
           "floor_all_correct_first_error_acc", "n_trajectories", "n_steps")
FLOOR_KEYS = ("setting", *METRICS, "floor_outcome_step_acc", "floor_outcome_first_error_acc",
              "margins", "intervals", "verdict")
"""What :func:`prm.metrics.floor_report` gives the report."""


@dataclass
class CVConfig(TrainConfig):
    """Options of ``prm cv``: those of ``prm train`` that shape the model, and the folds."""

    out: Path | None = opt(
        None, "Keep the folds' models in this folder (default: a temporary one, removed)."
    )
    backbone: str = opt(
        "structured", "structured (the default: features and a logistic regression, seconds "
        "on CPU), tiny, minilm, smollm2, sklearn or a local model folder (as for prm train)."
    )
    val_fraction: float = opt(
        0.125, "full and lora: share of each fold's training tasks that validates."
    )
    folds: int = opt(5, "Folds (groups of tasks).")
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
        step_acc, first_error_acc, step_auroc: Pooled over folds (:func:`prm.metrics.decision_metrics`).
        floor_all_correct_step_acc, floor_all_correct_first_error_acc: "Every step correct".
        floor_outcome_step_acc, floor_outcome_first_error_acc: In hindsight, the
            outcome-aware rule (success: no error; failure: the last turn is the first error).
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
        return [
            f"prm cv: {self.backbone} ({self.mode}, {self.head}, {self.setting}) on labels "
            f"{self.labels}, {self.folds} folds by task: {self.n_trajectories} trajectories, "
            f"{self.n_steps} labelled turns, {self.wall_s:.0f} s",
            *floor_lines(self.to_dict()),
            *(f"  note: {note}" for note in self.notes),
        ]


def floor_lines(report: dict[str, Any]) -> list[str]:
    """The metrics of a :func:`prm.metrics.floor_report` beside their floors, as text."""

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
        lines.append(line)
    lines.append(f"  verdict: {report.get('verdict', '')}")
    return lines


def fold_of_tasks(examples: list[StepExample], folds: int, seed: int) -> list[int]:
    """The fold of each example: tasks dealt into ``folds`` groups (``GroupKFold``, shuffled
    by ``seed``), so the samples of a task are never split."""
    import numpy as np
    from sklearn.model_selection import GroupKFold

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


def _turn_table(examples: list[StepExample], fold: list[int]) -> pd.DataFrame:
    """One row per turn: ``traj_id, t, task_id, target``, the fold, the outcome
    (``success``, NaN when unknown) and ``n_turns`` (for the outcome-aware floor)."""
    import numpy as np

    from prm.frozen import turn_rows

    rows = turn_rows(examples)
    rows["fold"] = [k for e, k in zip(examples, fold, strict=True) for _ in range(e.n_steps)]
    lengths = [e.n_steps for e in examples]
    rows["success"] = np.repeat([np.nan if e.success is None else float(e.success)
                                 for e in examples], lengths)
    rows["n_turns"] = np.repeat(lengths, lengths)
    return rows


def _structured_predictions(config: CVConfig, rows: pd.DataFrame, con: Any,
                            echo: Callable[[str], Any]) -> tuple[pd.DataFrame, str, list[str]]:
    """Out-of-fold scores of the structured PRM: the features once (they read no label),
    a model fitted per fold."""
    import numpy as np
    import pandas as pd

    from prm.metrics import ALWAYS_ERROR
    from prm.structured import StructuredStepModel, feature_rows, text_counts, with_embeddings

    table, names, notes = feature_rows(con, config.setting, rows["traj_id"].unique().tolist())
    leak = outcome_targets_note(config.labels, config.setting)
    notes = [*notes, *([] if leak is None else [leak])]
    for note in notes:
        echo(note)
    if config.embeddings:
        table = with_embeddings(table, con, echo=echo, progress=config.progress)
    merged = rows[["traj_id", "t", "task_id", "target", "fold"]].merge(
        table.drop(columns="task_id"), on=["traj_id", "t"], validate="one_to_one")
    counts = text_counts(merged)  # no label read: once for every fold
    parts, head = [], "binary"
    for k in range(config.folds):
        train, test = merged["fold"] != k, merged["fold"] == k
        fitted = merged.loc[train].reset_index(drop=True)
        model = StructuredStepModel(setting=config.setting, head=config.head,
                                    seed=config.seed, embeddings=config.embeddings
                                    ).fit(fitted, fitted["target"], names,
                                          counts=counts[np.flatnonzero(train.to_numpy())])
        part = rows.loc[test.to_numpy()].copy()
        scored = model.score_steps(merged.loc[test],
                                   counts=counts[np.flatnonzero(test.to_numpy())])
        part["score"] = scored["score"].to_numpy()
        if "p_neutral" in scored:
            part["p_neutral"] = scored["p_neutral"].to_numpy()
        part["threshold"] = model.error_threshold_
        if ALWAYS_ERROR in scored:
            part[ALWAYS_ERROR] = scored[ALWAYS_ERROR].to_numpy()
        parts.append(part)
        head = model.head_
        echo(f"fold {k + 1}/{config.folds}: C = {model.C_:g}, "
             f"{'with' if model.use_text_ else 'without'} the text scores, "
             f"{model.decision_words()}")
    return pd.concat(parts, ignore_index=True), head, notes


def _frozen_predictions(config: CVConfig, spec: Any, examples: list[StepExample],
                        rows: pd.DataFrame, echo: Callable[[str], Any]) -> pd.DataFrame:
    import numpy as np
    import torch

    from prm.device import resolve_device
    from prm.frozen import extract_features, fit_head, frozen_scorer
    from prm.metrics import threshold_words

    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    scorer, tokenizer, spec = frozen_scorer(config, spec, echo)
    scorer = scorer.to(device)
    echo(f"features of {len(examples)} trajectories ({len(rows)} turns) from {config.backbone} "
         f"on {device}, once for every fold")
    features = np.concatenate(extract_features(
        scorer, tokenizer, spec, examples, device=device, batch_tokens=config.batch_tokens,
        progress=config.progress,
    ))
    parts = []
    for k in range(config.folds):
        train, test = (rows["fold"] != k).to_numpy(), (rows["fold"] == k).to_numpy()
        fit = fit_head(rows.loc[train].reset_index(drop=True), features[train],
                       ternary=spec.head == "ternary", seed=config.seed)
        probs = fit.probabilities(features[test])
        part = rows.loc[test].copy()
        part["score"] = 1.0 - probs[:, 0] if probs.ndim == 2 else probs
        if probs.ndim == 2:
            part["p_neutral"] = probs[:, 1]
        part["threshold"] = fit.error_threshold
        parts.append(part)
        echo(f"fold {k + 1}/{config.folds}: head C = {fit.C:g}, "
             f"{threshold_words(fit.error_threshold)}")
    import pandas as pd

    return pd.concat(parts, ignore_index=True)


def _trained_predictions(config: CVConfig, examples: list[StepExample], fold: list[int],
                         rows: pd.DataFrame, workdir: Path, echo: Callable[[str], Any]
                         ) -> pd.DataFrame:
    import pandas as pd

    from prm.data import TaskSplit, split_tasks
    from prm.metrics import threshold_words
    from prm.score import predict_steps
    from prm.spec import PRMSpec
    from prm.train import train_examples

    parts = []
    v = config.val_fraction
    for k in range(config.folds):
        train = [e for e, f in zip(examples, fold, strict=True) if f != k]
        test = [e for e, f in zip(examples, fold, strict=True) if f == k]
        tasks = split_tasks((e.task_id for e in train), seed=config.seed,
                            fractions=(1.0 - v, v, 0.0))
        tasks.update({e.task_id: "test" for e in test})
        split = TaskSplit(seed=config.seed, fractions=(1.0 - v, v, 0.0), tasks=tasks)
        out = workdir / f"fold-{k}"
        train_examples(dataclasses.replace(config, out=out), train + test, split, echo=echo)
        scores = predict_steps(out, test, device=config.device,
                               trust_remote_code=config.trust_remote_code)
        part = rows.loc[(rows["fold"] == k).to_numpy()].merge(
            scores, on=["traj_id", "t"], validate="one_to_one")
        spec = PRMSpec.load(out, trust_remote_code=config.trust_remote_code)
        part["threshold"] = spec.error_threshold
        parts.append(part)
        echo(f"fold {k + 1}/{config.folds}: {len(train)} trajectories trained, {len(test)} "
             f"scored, {threshold_words(spec.error_threshold)}")
    return pd.concat(parts, ignore_index=True)


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

    from prm.data import load_step_examples
    from prm.metrics import decision_metrics, floor_report
    from prm.train import model_spec
    from recovery.store import open_store

    if config.store is None:
        raise UsageProblem("store is required")
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
        fold = fold_of_tasks(examples, config.folds, config.seed)
        rows = _turn_table(examples, fold)
        echo(f"prm cv: {config.backbone}, {config.setting} setting, {len(examples)} "
             f"trajectories ({len(rows)} turns) in {config.folds} folds by task")
        notes: list[str] = []
        if config.backbone == "structured":
            mode = "structured"
            pooled, head, notes = _structured_predictions(config, rows, con, echo)
    finally:
        store.close()
    if config.backbone == "sklearn":
        mode, head = "sklearn", "binary"
        pooled = _baseline_predictions(config, examples, fold, rows, echo)
    elif config.backbone != "structured":
        spec = model_spec(config, examples, echo)
        mode, head = spec.mode, spec.head
        if spec.mode == "frozen":
            pooled = _frozen_predictions(config, spec, examples, rows, echo)
        else:
            with tempfile.TemporaryDirectory(prefix="prm-cv-") as tmp:
                workdir = Path(config.out) if config.out is not None else Path(tmp)
                pooled = _trained_predictions(config, examples, fold, rows, workdir, echo)
    pooled = _with_outcomes(pooled, rows)
    report = CVReport(backbone=config.backbone, mode=mode, head=head, labels=config.labels,
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
    report.wall_s = time.perf_counter() - started
    report.predictions = pooled
    if config.json_out is not None:
        from recovery.jsonsafe import json_safe

        config.json_out.parent.mkdir(parents=True, exist_ok=True)
        config.json_out.write_text(json.dumps(json_safe(report.to_dict()), indent=1))
    return report


def _with_outcomes(pooled: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """``pooled`` with each row's ``success`` and ``n_turns`` (the outcome-aware floor's)."""
    extra = [c for c in ("success", "n_turns") if c not in pooled]
    if not extra:
        return pooled
    return pooled.merge(rows[["traj_id", "t", *extra]], on=["traj_id", "t"], how="left",
                        validate="one_to_one")


def _baseline_predictions(config: CVConfig, examples: list[StepExample], fold: list[int],
                          rows: pd.DataFrame, echo: Callable[[str], Any] = print
                          ) -> pd.DataFrame:
    """Out-of-fold scores of the TF-IDF baseline; its error threshold is chosen by an inner
    grouped split of each fold's training tasks."""
    import pandas as pd

    from prm.baseline import TfidfStepBaseline, turn_frame
    from prm.metrics import choose_error_threshold, threshold_words

    parts = []
    for k in range(config.folds):
        train = [e for e, f in zip(examples, fold, strict=True) if f != k]
        test = [e for e, f in zip(examples, fold, strict=True) if f == k]
        inner = fold_of_tasks(train, 3, config.seed) if len({e.task_id for e in train}) >= 3 \
            else None
        threshold = 0.5
        if inner is not None:
            held = []
            for j in range(3):
                fit_frame = turn_frame([e for e, f in zip(train, inner, strict=True) if f != j])
                out_frame = turn_frame([e for e, f in zip(train, inner, strict=True) if f == j])
                try:
                    model = TfidfStepBaseline().fit(fit_frame, fit_frame["target"].to_numpy())
                except ValueError:
                    continue
                out_frame["score"] = model.score_steps(out_frame)
                held.append(out_frame[["traj_id", "t", "target", "score"]])
            if held:
                threshold = choose_error_threshold(pd.concat(held, ignore_index=True))
        frame = turn_frame(train)
        model = TfidfStepBaseline().fit(frame, frame["target"].to_numpy())
        test_frame = turn_frame(test)
        test_frame["score"] = model.score_steps(test_frame)
        part = rows.loc[(rows["fold"] == k).to_numpy()].merge(
            test_frame[["traj_id", "t", "score"]], on=["traj_id", "t"], validate="one_to_one")
        part["threshold"] = threshold
        parts.append(part)
        echo(f"fold {k + 1}/{config.folds}: TF-IDF fitted on {len(train)} trajectories, "
             f"{len(test)} scored, {threshold_words(threshold)}")
    return pd.concat(parts, ignore_index=True)
