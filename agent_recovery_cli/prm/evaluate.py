"""``prm eval --store S --model DIR``: step, first-error, calibration and Best-of-K metrics."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click

from agent_recovery_cli.recovery.options import command_options
from prm.data.features import SETTINGS
from prm.data.labels import LABEL_SOURCES
from prm.neural.device import DEVICES
from recovery.config import CheckedOptions, opt
from recovery.jsonsafe import json_safe


@dataclass
class EvalConfig(CheckedOptions):
    """Options of ``prm eval``."""

    store: Path | None = opt(None, "Store (DuckDB file or Parquet folder; must exist).", required=True)
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


@click.command()
@command_options(EvalConfig)
def evaluate(config: EvalConfig) -> None:
    """Evaluate a PRM on a split of the store's tasks (default: the test tasks)."""
    from prm.evaluation.evaluate import evaluate_model
    from prm.kinds import load_model
    from recovery.store import open_store

    # The model is loaded (and refused, if it must be) before the store is read.
    predictor = load_model(config.model, device=config.device, setting=config.setting,
                           trust_remote_code=config.trust_remote_code)
    store = open_store(config.store, read_only=True, must_exist=True)
    con = store.con
    try:
        report = evaluate_model(
            con, predictor, split=config.split, labels=config.labels, ks=config.ks,
            aggregate=config.aggregate, device=config.device,
            trust_remote_code=config.trust_remote_code, setting=config.setting,
            n_boot=config.n_boot, seed=config.seed,
        )
    finally:
        store.close()
    for line in report.lines():
        click.echo(line)
    if config.json_out is not None:
        config.json_out.parent.mkdir(parents=True, exist_ok=True)
        config.json_out.write_text(json.dumps(json_safe(report.to_dict()), indent=1))
