"""``recovery budgetmix assign``: per-row budgets for a training dataset."""

from __future__ import annotations

import click

from agent_recovery_cli.recovery.options import command_options
from analyses.budgetmix.assign import AssignConfig, assign


@click.command(name="assign")
@command_options(AssignConfig)
def assign_command(config: AssignConfig) -> None:
    """Add a per-row max_turns drawn from a schedule to a training dataset.

    verl reads it from extra_info, SkyRL from the row's env_extras (a column), TRL from
    environment.reset(**row) (a column); see docs/budgetmix.md for the adapters.
    """
    click.echo(assign(config).summary())
