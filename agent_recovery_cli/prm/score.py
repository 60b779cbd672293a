"""``prm score --store S --model DIR``: write a PRM's per-turn scores to ``step_scores``."""

from __future__ import annotations

import click

from agent_recovery_cli.recovery.options import command_options
from prm.score import ScoreConfig


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
        result = score_store(store, model, config)
    setting = f" ({result.setting} setting)" if result.setting else ""
    click.echo(
        f"step_scores: {result.n_scores} turns of {result.n_trajectories} trajectories "
        f"as model {result.model!r}{setting}"
    )
