"""``recovery budgetmix plan|rewards|assign|train-sim``: BudgetMix signals (docs/budgetmix.md).

Each subcommand's options are a config dataclass of :mod:`analyses.budgetmix`, so the command
is built when it is asked for (:class:`BudgetMixGroup`): ``analyses`` is imported then, never
when this module is. This is also the place that joins ``analyses`` and ``prm``: ``train-sim``
builds the PRM of its ``budgetmix+prm`` mode from the prm package (:class:`TfidfStepScorer`)
and passes it to the reference trainer, which never imports ``prm`` itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from recovery.cli.options import command_options
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    import numpy as np

    from recovery.schema import Trajectory


class TfidfStepScorer:
    """The prm package's TF-IDF baseline as the reference trainer's PRM
    (:class:`analyses.budgetmix.scorer.StepScorer`).

    :meth:`fit` ingests the trajectories into an in-memory store (marked by the built-in
    rules), reads ``labels`` targets and fits :class:`prm.baseline.TfidfStepBaseline`; a refit
    whose targets are all one class keeps the previous model.

    Args:
        labels: Label source of the targets (see ``prm.labels``).
        max_features: Vocabulary size per text field.
    """

    def __init__(self, labels: str = "outcome", max_features: int = 5000):
        self.labels = labels
        self.max_features = max_features
        self.n_fits = 0
        self._baseline: Any = None

    def fit(self, trajectories: Sequence[Trajectory]) -> None:
        """Fit on the trajectories' turns (see the class docstring)."""
        from prm.baseline import TfidfStepBaseline, turn_frame
        from prm.data import load_step_examples
        from recovery.store import connect, ingest_trajectories

        con = connect(None)
        try:
            ingest_trajectories(con, list(trajectories), source="train-sim")
            examples = load_step_examples(con, labels=self.labels, base="outcome")
        finally:
            con.close()
        frame = turn_frame(examples)
        try:
            self._baseline = TfidfStepBaseline(max_features=self.max_features).fit(
                frame, frame["target"].to_numpy()
            )
        except ValueError:  # all one class: nothing to learn, keep the previous model
            return
        self.n_fits += 1

    def score(self, trajectories: Sequence[Trajectory]) -> np.ndarray:
        """Scores of every turn, trajectory by trajectory (flat, in turn order).

        Turns with the same four text fields get the same score, so each distinct one is
        scored once (the reference task's episodes repeat a small vocabulary of texts).
        """
        import numpy as np
        import pandas as pd

        from prm.baseline import FIELDS, turn_frame
        from prm.data import StepExample

        if self._baseline is None:
            raise ValueError("the scorer has not been fitted")
        examples = [
            StepExample(traj_id=str(k), run=tr.run, task_id=tr.task_id, prompt=tr.prompt or "",
                        actions=[u.action or "" for u in tr.turns],
                        observations=[u.observation or "" for u in tr.turns],
                        targets=[float("nan")] * len(tr.turns))
            for k, tr in enumerate(trajectories)
        ]
        frame = turn_frame(examples)
        codes, _ = pd.factorize(pd.Series(
            ["\x1f".join(row) for row in frame[list(FIELDS)].itertuples(index=False)]))
        _, first = np.unique(codes, return_index=True)  # first row of each distinct text
        scores = np.asarray(self._baseline.score_steps(frame.iloc[first]), dtype=float)
        return scores[codes]

    def save(self, directory: Path) -> None:
        """Write a model folder that ``prm score --model`` reads."""
        from prm.baseline import save_baseline_model

        if self._baseline is None:
            raise ValueError("the scorer has not been fitted")
        save_baseline_model(directory, self._baseline, labels=self.labels, label_base="outcome")


def tfidf_scorer_factory(labels: str = "outcome") -> Callable[[], TfidfStepScorer]:
    """A factory of fresh :class:`TfidfStepScorer` objects (one per training mode)."""
    return lambda: TfidfStepScorer(labels)


def _plan_command() -> click.Command:
    from analyses.budgetmix.plan import PlanConfig, plan_schedule, schedule_lines
    from recovery.jsonsafe import dumps

    @click.command(name="plan")
    @command_options(PlanConfig)
    def plan(config: PlanConfig) -> None:
        """Write a budget schedule (budgets, weights, and the evidence behind them) as JSON.

        adaptive weighs each budget T by where the store's policy falls short there; see
        docs/budgetmix.md for the formula and the JSON schema. A store without budgets (the
        usual case for real data) is read in truncation mode.
        """
        schedule = plan_schedule(config)
        if config.out is None:
            click.echo(dumps(schedule.to_dict(), indent=1))
        else:
            schedule.save(config.out)
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

    @click.command(name="train-sim")
    @command_options(TrainSimConfig)
    def train_sim_command(config: TrainSimConfig) -> None:
        """Train small policies on a simulated agent task at fixed budgets, with BudgetMix, and
        with BudgetMix + PRM shaping; write evaluation rollouts that `recovery analyze` reads.
        """
        try:
            result = train_sim(config, scorer_factory=tfidf_scorer_factory(config.prm_labels),
                               echo=lambda line: click.echo(line, err=True))
        except (UsageProblem, InputProblem):
            raise
        except ValueError as err:
            raise UsageProblem(str(err)) from None
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
