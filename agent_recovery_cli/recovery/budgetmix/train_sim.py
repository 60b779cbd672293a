"""``recovery budgetmix train-sim``: the reference trainer. It joins ``analyses`` and
``prm``: it builds the PRM of the ``budgetmix+prm`` mode from :mod:`prm.online` and passes it
to the trainer, which never imports ``prm`` itself."""

from __future__ import annotations

import click

from agent_recovery_cli.recovery.options import command_options
from analyses.budgetmix.reference.train import TrainSimConfig, train_sim
from prm.online import tfidf_scorer_factory


@click.command(name="train-sim")
@command_options(TrainSimConfig)
def train_sim_command(config: TrainSimConfig) -> None:
    """Train small policies on a simulated agent task at fixed budgets, with BudgetMix, and
    with BudgetMix + PRM shaping; write evaluation rollouts that `recovery analyze` reads.
    """
    result = train_sim(config, scorer_factory=tfidf_scorer_factory(config.prm_labels),
                       echo=lambda line: click.echo(line, err=True))
    files = " ".join(str(m.rollouts) for m in result.modes)
    click.echo(f"summary {result.summary}")
    click.echo(f"measure: recovery analyze {files} --mode budgeted")
