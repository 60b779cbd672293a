"""Evaluation of a trained PRM on a split of the store's tasks (``prm eval``).

The metrics themselves are in :mod:`prm.evaluation.metrics`; this module scores the split once
(every kind of model folder, structured included), joins the scores with the targets (and, on
simulator runs, the ground truth) and builds the report, with the model's decisions beside the
floors of its setting (:func:`prm.evaluation.floors.floor_report`). Its options are
:class:`EvalConfig`, the dataclass ``prm eval`` builds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data.features import SETTINGS
from prm.data.labels import LABEL_SOURCES
from prm.evaluation.metrics import (
    best_of_k,
    expected_calibration_error,
    first_error_accuracy,
    ground_truth_aurocs,
    processbench_f1,
    step_accuracy,
    step_auroc,
    trajectory_scores,
)
from prm.neural.device import DEVICES
from recovery.config import CheckedOptions, opt
from recovery.jsonsafe import json_safe

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from prm.data.examples import StepExample
    from prm.kinds.base import PRMKind


@dataclass
class EvalConfig(CheckedOptions):
    """Options of ``prm eval`` (and of :func:`evaluate_model`)."""

    store: Path | None = opt(None, "Store (DuckDB file or Parquet folder; must exist).",
                             required=True)
    model: Path | None = opt(None, "Model folder written by prm train.", required=True)
    split: str = opt(
        "test", "Split of tasks to evaluate (tasks new since training count as test).",
        choices=("train", "validation", "test", "all"),
    )
    labels: str | None = opt(
        None, "Label source of the targets (default: the model's own).", choices=LABEL_SOURCES
    )
    ks: list[int] = opt(default_factory=lambda: [1, 2, 4, 8], help="K values of Best-of-K.")
    aggregate: str = opt(
        "min", "Trajectory score for Best-of-K from its step scores.",
        choices=("min", "mean", "last"),
    )
    device: str = opt("auto", "auto, cuda or cpu.", choices=DEVICES)
    batch_tokens: int = opt(16384, "Padded tokens per scoring batch.")
    trust_remote_code: bool = opt(
        False, "Allow the backbone's own Python code, for a model folder that needs it."
    )
    json_out: Path | None = opt(None, "Also write the report as JSON here.", flag="--json")
    setting: str | None = opt(
        None, "blind or hindsight (default: the model's; blind for models that read no "
        "outcome): which floors the model is set beside. In hindsight the outcome-aware floor "
        "(success: no error; failure: the last turn is the first error) joins the "
        "every-step-correct one. A structured model evaluates only in its own setting.",
        choices=SETTINGS,
    )
    n_boot: int = opt(1000, "Bootstrap replicates over tasks for the intervals.")
    seed: int = opt(0, "Seed of the bootstrap.")


@dataclass
class EvalReport:
    """The evaluation of one model on one split.

    Attributes:
        model: Model directory.
        split: Split evaluated.
        labels: Label source of the targets.
        n_trajectories: Trajectories evaluated.
        n_turns: Turns with a known target.
        step_auroc, step_accuracy, first_error_accuracy, ece: See the functions of this module.
        processbench: ``accuracy_erroneous``, ``accuracy_error_free``, ``f1``.
        best_of_k: Rows of :func:`best_of_k`.
        ground_truth: :func:`ground_truth_aurocs` when the turns carry ``meta.true_error``.
        decisions: The ternary metrics of the model's decision rule
            (:func:`prm.evaluation.decisions.decision_metrics`: ``step_acc``, ``first_error_acc`` and the
            two "every step correct" floors) and its ``error_threshold``.
        floors: :func:`prm.evaluation.floors.floor_report` on the same scores: ``setting``, the
            decision metrics, the outcome-aware floor (hindsight), ``margins``, ``intervals``
            (the ``*_minus_floor*`` differences among them), ``verdict``.
    """

    model: str
    split: str
    labels: str
    n_trajectories: int = 0
    n_turns: int = 0
    step_auroc: float | None = None
    step_accuracy: float | None = None
    first_error_accuracy: float | None = None
    ece: float | None = None
    processbench: dict[str, float | None] = field(default_factory=dict)
    best_of_k: list[dict[str, Any]] = field(default_factory=list)
    ground_truth: dict[str, Any] | None = None
    decisions: dict[str, Any] = field(default_factory=dict)
    floors: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the floor report's keys at the top level (``setting``, ``step_acc``,
        ``floor_*``, ``intervals``, ``verdict``, ...), then the report's own, which win where
        both have one (``n_trajectories`` counts every trajectory of the split)."""
        own = asdict(self)
        own.pop("floors")
        return {**self.floors, **own}

    def lines(self) -> list[str]:
        """A short text report."""

        def f(x: float | None) -> str:
            return "n/a" if x is None or x != x else f"{x:.3f}"

        out = [
            f"model {self.model} on {self.split} ({self.n_trajectories} trajectories, "
            f"{self.n_turns} turns, labels {self.labels})",
            f"  step AUROC {f(self.step_auroc)}  accuracy {f(self.step_accuracy)}  "
            f"ECE {f(self.ece)}",
            f"  first-error accuracy {f(self.first_error_accuracy)}  ProcessBench F1 "
            f"{f(self.processbench.get('f1'))} (erroneous "
            f"{f(self.processbench.get('accuracy_erroneous'))}, error-free "
            f"{f(self.processbench.get('accuracy_error_free'))})",
        ]
        if self.decisions:
            from prm.evaluation.decisions import threshold_words

            d = self.decisions
            out.append(
                f"  decisions ({d.get('decision_words') or threshold_words(d.get('error_threshold'))}"
                f"): step accuracy "
                f"{f(d.get('step_acc'))} (every step correct: "
                f"{f(d.get('floor_all_correct_step_acc'))}), first-error accuracy "
                f"{f(d.get('first_error_acc'))} (every step correct: "
                f"{f(d.get('floor_all_correct_first_error_acc'))})"
            )
        for row in self.best_of_k:
            if not row["n_groups"]:
                continue
            out.append(
                f"  Best-of-{row['k']} ({row['n_groups']} groups): PRM {f(row['prm'])}  "
                f"random {f(row['random'])}  oracle {f(row['oracle'])}"
            )
        if self.floors:
            from prm.evaluation.cv import floor_lines

            fl = self.floors
            out.append(f"  beside the floors ({fl.get('setting')} setting, "
                       f"{fl.get('n_trajectories')} trajectories, {fl.get('n_steps')} turns):")
            out.extend("  " + line for line in floor_lines(fl))
        if self.ground_truth:
            gt = self.ground_truth
            ci = gt.get("prm_auroc_silent_ci")
            interval = f" [{f(ci[0])}, {f(ci[1])}]" if ci else ""
            out.append(
                f"  ground truth: silent errors ({gt['n_silent']}) vs clean ({gt['n_clean']}): "
                f"PRM AUROC {f(gt['prm_auroc_silent'])}{interval}, rules {f(gt['rules_auroc_silent'])}; "
                f"visible ({gt['n_visible']}): PRM {f(gt['prm_auroc_visible'])}, rules "
                f"{f(gt['rules_auroc_visible'])}"
            )
            if gt.get("prm_auroc_first_silent_vs_progress") is not None:
                out.append(
                    "  first silent-error turns vs progress turns (alike on the surface): PRM "
                    f"AUROC {f(gt['prm_auroc_first_silent_vs_progress'])}"
                )
        return out


def _turn_facts(con: duckdb.DuckDBPyConnection, traj_ids: list[str]) -> pd.DataFrame:
    """Per turn: the simulator's truth and what the rules alone mark (``is_error``).

    The rules' mark leaves process labels out (:func:`recovery.marking.rule_marks`): on runs
    labelled with Monte Carlo values a turn below 0 is marked ``labelled``, which is not the
    rules reading the text.
    """
    from recovery.marking import rule_marks
    from recovery.store import traj_scope

    marks = rule_marks(con, traj_ids)
    with traj_scope(con, traj_ids, "u.traj_id") as scope:
        truth = con.execute(
            f"""
            SELECT u.traj_id, u.t,
                   json_extract_string(u.meta, '$.true_error') AS true_error,
                   json_extract_string(u.meta, '$.event') AS event,
                   json_exists(u.meta, '$.true_error') AS has_truth
            FROM turns u WHERE {scope}
            """
        ).df()
    marks["is_error"] = marks.pop("kind").notna()
    return truth.merge(marks, on=["traj_id", "t"])


def evaluate_model(con: duckdb.DuckDBPyConnection, model: str | Path | PRMKind,
                   options: EvalConfig | None = None) -> EvalReport:
    """Score one split of the store with a trained PRM (once) and compute every metric, with
    the model's decisions beside the floors of its setting.

    ``model`` is a folder written by ``prm train`` (loaded with the options' ``device`` and
    ``trust_remote_code``) or a loaded :class:`prm.kinds.base.PRMKind`; ``options`` default to
    :class:`EvalConfig`'s (its ``store``, ``model`` and ``json_out`` are the command line's).

    Raises:
        InputProblem: a missing or damaged model folder or split (the message names the file).
        UsageProblem: a field of the folder's spec or config cannot be used (named), the
            folder asks for remote code without ``trust_remote_code``, or a folder of another
            setting.
    """
    from prm.data.examples import load_step_examples

    options = options if options is not None else EvalConfig()
    predictor = _predictor(model, options)
    setting = options.setting or predictor.setting or "blind"
    labels = options.labels or predictor.labels
    task_split = _task_split(predictor.model_dir)
    examples = task_split.select(
        load_step_examples(con, labels, base=predictor.label_base), options.split)
    report = EvalReport(model=str(predictor.model_dir), split=options.split, labels=labels,
                        n_trajectories=len(examples))
    if not examples:
        report.floors = {"setting": setting, "n_trajectories": 0, "n_steps": 0,
                         "verdict": f"no trajectory in the {options.split} split"}
        return report
    scores = predictor.predict_steps(examples, con=con, batch_tokens=options.batch_tokens)
    frame = _targets(examples).merge(scores, on=["traj_id", "t"], validate="one_to_one")
    _step_metrics(report, frame.loc[frame["target"].notna()], predictor.head)
    _decisions(report, predictor, examples, scores, setting, options)
    report.best_of_k = _best_of_k(examples, frame, options)
    report.ground_truth = _ground_truth(con, examples, frame)
    return report


def _predictor(model: str | Path | PRMKind, options: EvalConfig) -> PRMKind:
    """The model, loaded from its folder or given, with the options' setting checked."""
    from prm.kinds import check_setting_name, load_model

    if isinstance(model, (str, Path)):
        return load_model(model, device=options.device, setting=options.setting,
                          trust_remote_code=options.trust_remote_code)
    check_setting_name(options.setting)
    model.check_setting(options.setting)
    return model


def _task_split(model_dir: Path) -> Any:
    """The model folder's task split, named in one line when missing or damaged."""
    from prm.data.examples import TaskSplit
    from prm.spec import SPLIT_FILE, read_json
    from recovery.errors import InputProblem

    read_json(model_dir / SPLIT_FILE)  # a missing or damaged split is named before the work
    try:
        return TaskSplit.load(model_dir / SPLIT_FILE)
    except (KeyError, TypeError, ValueError) as err:
        raise InputProblem(f"{model_dir / SPLIT_FILE}: not a task split ({err})") from None


def _targets(examples: list[StepExample]) -> pd.DataFrame:
    """``traj_id, t, target`` of every turn of ``examples``."""
    import numpy as np
    import pandas as pd

    return pd.DataFrame({
        "traj_id": np.repeat([e.traj_id for e in examples], [e.n_steps for e in examples]),
        "t": np.concatenate([np.arange(1, e.n_steps + 1) for e in examples]),
        "target": np.concatenate([np.asarray(e.targets, float) for e in examples]),
    })


def _step_metrics(report: EvalReport, known: pd.DataFrame, head: str) -> None:
    """The step metrics of the turns with a target, into ``report``."""
    report.n_turns = len(known)
    if not len(known):
        return
    report.step_auroc = step_auroc(known["target"], known["score"])
    report.step_accuracy = step_accuracy(known["target"], known["score"])
    # A ternary model's score is P(not an error): calibrated against that event.
    report.ece = expected_calibration_error(
        (known["target"] >= 0.5).astype(float) if head == "ternary" else known["target"],
        known["score"],
    )
    report.first_error_accuracy = first_error_accuracy(known)
    report.processbench = processbench_f1(known)


def _decisions(report: EvalReport, predictor: PRMKind, examples: list[StepExample],
               scores: pd.DataFrame, setting: str, options: EvalConfig) -> None:
    """The floor report (on the same scores: no second scoring) and the model's decisions."""
    from prm.evaluation.floors import decision_rows, floor_report

    labelled = [e for e in examples if any(x == x for x in e.targets)]
    report.floors = floor_report(
        decision_rows(labelled, scores), predictor.error_threshold, setting,
        n_boot=options.n_boot, seed=options.seed,
    ) if labelled else {"setting": setting, "n_trajectories": 0, "n_steps": 0,
                        "verdict": f"no labelled trajectory in the {options.split} split"}
    if report.n_turns:
        report.decisions = {
            **{key: report.floors[key] for key in (
                "step_acc", "first_error_acc", "step_auroc", "floor_all_correct_step_acc",
                "floor_all_correct_first_error_acc", "n_trajectories", "n_steps")},
            "error_threshold": predictor.error_threshold,
            "decision_words": predictor.decision_words,
        }


def _best_of_k(examples: list[StepExample], frame: pd.DataFrame, options: EvalConfig
               ) -> list[dict[str, Any]]:
    """Best-of-K rows over the examples with a known outcome."""
    import pandas as pd

    outcomes = pd.DataFrame(
        {"traj_id": [e.traj_id for e in examples], "run": [e.run for e in examples],
         "task_id": [e.task_id for e in examples], "success": [e.success for e in examples]}
    ).dropna(subset=["success"])
    per_trajectory = outcomes.merge(
        trajectory_scores(frame, options.aggregate).rename("score").reset_index(), on="traj_id"
    )
    per_trajectory["success"] = per_trajectory["success"].astype(bool)
    return [{key: json_safe(value) for key, value in row.items()}
            for row in best_of_k(per_trajectory, options.ks).to_dict("records")]


def _ground_truth(con: duckdb.DuckDBPyConnection, examples: list[StepExample],
                  frame: pd.DataFrame) -> dict[str, Any] | None:
    """:func:`prm.evaluation.metrics.ground_truth_aurocs` when every turn carries the
    simulator's truth, else ``None``."""
    import pandas as pd

    facts = _turn_facts(con, [e.traj_id for e in examples])
    if not len(facts) or not facts["has_truth"].all():
        return None
    tasks = pd.DataFrame(
        {"traj_id": [e.traj_id for e in examples], "task_id": [e.task_id for e in examples]}
    )
    return ground_truth_aurocs(frame.merge(facts, on=["traj_id", "t"]).merge(tasks, on="traj_id"))
