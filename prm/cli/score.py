"""``prm score --store S --model DIR``: write a PRM's per-turn scores to ``step_scores``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from recovery.cli.options import command_options, opt


@dataclass
class ScoreConfig:
    """Options of ``prm score``."""

    store: Path | None = opt(None, "DuckDB store whose turns are scored.", required=True)
    model: Path | None = opt(None, "Model directory written by prm train.", required=True)
    name: str | None = opt(
        None, "Model name in step_scores (default: the model directory's name)."
    )
    device: str = opt("auto", "auto, cuda or cpu.", choices=("auto", "cuda", "cpu"))
    batch_tokens: int = opt(16384, "Padded tokens per scoring batch.")


@click.command()
@command_options(ScoreConfig)
def score(config: ScoreConfig) -> None:
    """Score every turn of the store and fill step_scores (replacing the model's earlier rows)."""
    from prm.score import score_store
    from recovery.store import connect

    con = connect(config.store)
    try:
        result = score_store(con, config.model, name=config.name, device=config.device,
                             batch_tokens=config.batch_tokens)
    except (ValueError, FileNotFoundError) as err:
        raise click.ClickException(str(err)) from None
    finally:
        con.close()
    click.echo(
        f"step_scores: {result.n_scores} turns of {result.n_trajectories} trajectories "
        f"as model {result.model!r}"
    )
