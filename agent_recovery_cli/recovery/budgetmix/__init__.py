"""``recovery budgetmix plan|rewards|assign|train-sim``: BudgetMix signals (docs/budgetmix.md).

One module per subcommand, imported when that subcommand runs (the one lazy group), so
``analyses`` is imported then, never when this package is.
"""

from __future__ import annotations

import click

from agent_recovery_cli.lazy import LazyGroup

COMMANDS = {
    "plan": "agent_recovery_cli.recovery.budgetmix.plan:plan",
    "rewards": "agent_recovery_cli.recovery.budgetmix.rewards:rewards",
    "assign": "agent_recovery_cli.recovery.budgetmix.assign:assign_command",
    "train-sim": "agent_recovery_cli.recovery.budgetmix.train_sim:train_sim_command",
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS)
def budgetmix() -> None:
    """BudgetMix signals: budget schedules, PRM-shaped rewards, per-row budgets for trainers,
    a reference trainer."""
