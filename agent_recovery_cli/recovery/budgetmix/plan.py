"""``recovery budgetmix plan``: a budget schedule from a store."""

from __future__ import annotations

import click

from agent_recovery_cli.recovery.options import command_options
from analyses.budgetmix.plan import PlanConfig, plan_schedule, schedule_lines
from analyses.budgetmix.schedule import check_budget
from recovery.jsonsafe import dumps
from recovery.outputs import atomic_output, check_output_path


@click.command(name="plan")
@command_options(PlanConfig)
def plan(config: PlanConfig) -> None:
    """Write a budget schedule (budgets, weights, and the evidence behind them) as JSON.

    adaptive weighs each budget T by where the store's policy falls short there; see
    docs/budgetmix.md for the formula and the JSON schema. A store without budgets (the
    usual case for real data) is read in truncation mode.
    """
    # The budgets are options: refuse one out of range (exit 2) before a store is read.
    for budget in config.budgets or []:
        check_budget(budget)
    if config.reference is not None:
        check_budget(config.reference, "--reference")
    if config.out is not None:
        check_output_path(config.out, "--out")
    schedule = plan_schedule(config)
    if config.out is None:
        click.echo(dumps(schedule.to_dict(), indent=1))
    else:
        with atomic_output(config.out) as temp:
            schedule.save(temp)
        click.echo(f"{config.out}: {schedule.strategy} schedule over "
                   f"{len(schedule.budgets)} budgets")
    for line in schedule_lines(schedule):
        click.echo(line, err=config.out is None)
