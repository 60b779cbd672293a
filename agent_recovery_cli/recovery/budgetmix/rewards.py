"""``recovery budgetmix rewards``: PRM-shaped per-turn rewards."""

from __future__ import annotations

import click

from agent_recovery_cli.recovery.options import command_options
from analyses.budgetmix.rewards import RewardsConfig, export_rewards


@click.command(name="rewards")
@command_options(RewardsConfig)
def rewards(config: RewardsConfig) -> None:
    """Export PRM-shaped per-turn rewards keyed by (traj_id, t), with alignment fields.

    r_t = R [t = last] + lambda (gamma phi(s_t+1) - phi(s_t)), phi(s_t) = the PRM score of
    turn t - 1, phi(s_1) = --initial-potential, phi after the last turn = 0.
    """
    click.echo(export_rewards(config).summary())
