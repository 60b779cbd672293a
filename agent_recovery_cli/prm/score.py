"""``prm score --store S --model DIR``: write a PRM's per-turn scores to ``step_scores``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from agent_recovery_cli.recovery.options import command_options
from prm.data.features import SETTINGS
from prm.neural.device import DEVICES
from recovery.config import CheckedOptions, opt


@dataclass
class ScoreConfig(CheckedOptions):
    """Options of ``prm score``."""

    store: Path | None = opt(None, "Store whose turns are scored (DuckDB file or Parquet folder; must exist).",
                             required=True)
    model: Path | None = opt(None, "Model folder written by prm train.", required=True)
    name: str | None = opt(
        None, "Model name in step_scores (default: the model folder's name)."
    )
    device: str = opt("auto", "auto, cuda or cpu.", choices=DEVICES)
    batch_tokens: int = opt(16384, "Padded tokens per scoring batch.")
    trust_remote_code: bool = opt(
        False, "Allow the backbone's own Python code, for a model folder that needs it."
    )
    progress: bool = opt(True, "Show progress with turn counts on stderr.",
                         flag="--progress/--no-progress")
    setting: str | None = opt(
        None, "blind or hindsight: the setting the scores are for (default: the model's). A "
        "structured model scores only in the setting it was trained for; the other models "
        "read no outcome and no later turn, so they score in either.",
        choices=SETTINGS,
    )


@click.command()
@command_options(ScoreConfig)
def score(config: ScoreConfig) -> None:
    """Score every turn of the store and fill step_scores (replacing the model's earlier rows)."""
    from prm.kinds import load_model
    from prm.score import score_store
    from recovery.store import open_store

    # The model is loaded (and refused, if it must be) before the store is opened for writing.
    model = load_model(config.model, device=config.device, setting=config.setting,
                       trust_remote_code=config.trust_remote_code)
    with open_store(config.store, must_exist=True) as store:
        result = score_store(store, model, name=config.name, setting=config.setting,
                             batch_tokens=config.batch_tokens, progress=config.progress)
    setting = f" ({result.setting} setting)" if result.setting else ""
    click.echo(
        f"step_scores: {result.n_scores} turns of {result.n_trajectories} trajectories "
        f"as model {result.model!r}{setting}"
    )
