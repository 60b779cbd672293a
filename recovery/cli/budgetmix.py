"""``recovery budgetmix plan|rewards|assign|train-sim``: BudgetMix signals (docs/budgetmix.md).

Each subcommand's options are a config dataclass of :mod:`analyses.budgetmix`, so the command
is built when it is asked for (:class:`BudgetMixGroup`): ``analyses`` is imported then, never
when this module is. This is also the place that joins ``analyses`` and ``prm``: ``train-sim``
builds the PRM of its ``budgetmix+prm`` mode from the prm package
(:class:`prm.online.TfidfStepScorer`)
and passes it to the reference trainer, which never imports ``prm`` itself.
"""

from __future__ import annotations

from collections.abc import Callable

import click

from recovery.cli.options import command_options


def _plan_command() -> click.Command:
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

    return plan


def _rewards_command() -> click.Command:
    from analyses.budgetmix.rewards import RewardsConfig, export_rewards

    @click.command(name="rewards")
    @command_options(RewardsConfig)
    def rewards(config: RewardsConfig) -> None:
        """Export PRM-shaped per-turn rewards keyed by (traj_id, t), with alignment fields.

        r_t = R [t = last] + lambda (gamma phi(s_t+1) - phi(s_t)), phi(s_t) = the PRM score of
        turn t - 1, phi(s_1) = --initial-potential, phi after the last turn = 0.
        """
        click.echo(export_rewards(config).summary())

    return rewards


def _assign_command() -> click.Command:
    from analyses.budgetmix.assign import AssignConfig, assign

    @click.command(name="assign")
    @command_options(AssignConfig)
    def assign_command(config: AssignConfig) -> None:
        """Add a per-row max_turns drawn from a schedule to a training dataset.

        verl reads it from extra_info, SkyRL from the row's env_extras (a column), TRL from
        environment.reset(**row) (a column); see docs/budgetmix.md for the adapters.
        """
        click.echo(assign(config).summary())

    return assign_command


def _train_sim_command() -> click.Command:
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

    return train_sim_command


_COMMANDS: dict[str, Callable[[], click.Command]] = {
    "plan": _plan_command,
    "rewards": _rewards_command,
    "assign": _assign_command,
    "train-sim": _train_sim_command,
}


class BudgetMixGroup(click.Group):
    """Builds a subcommand (importing its ``analyses`` module) only when it is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        build = _COMMANDS.get(cmd_name)
        return build() if build is not None else None


@click.group(cls=BudgetMixGroup)
def budgetmix() -> None:
    """BudgetMix signals: budget schedules, PRM-shaped rewards, per-row budgets for trainers,
    a reference trainer."""
