"""``recovery budgetmix plan|rewards|train-sim``: BudgetMix signals (docs/budgetmix.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click

from analyses.budgetmix_train import TrainSimConfig
from recovery.cli.options import command_options, opt


@dataclass
class PlanConfig:
    """Options of ``recovery budgetmix plan``."""

    store: Path | None = opt(None, "DuckDB store (needed by --strategy adaptive).")
    strategy: str | None = opt(
        None, "uniform, mixture or adaptive [default: adaptive with --store, else uniform].",
        choices=("uniform", "mixture", "adaptive"),
    )
    budgets: list[int] | None = opt(
        None, "Budgets, comma-separated [adaptive default: the store's budgets, or turn-count "
        "quantiles when it has one].",
    )
    budget_range: str | None = opt(
        None, "Budgets as LOW:HIGH[:STEP] (HIGH included) instead of --budgets.", flag="--range"
    )
    weights: list[float] | None = opt(None, "mixture: one weight per budget, comma-separated.")
    evidence: str = opt(
        "shortfall", "adaptive: weigh by the Pass@(1,T) shortfall against the reference budget, "
        "or by the excess share of error spells left unrecovered at T.",
        choices=("shortfall", "unrecovered"),
    )
    runs: list[str] | None = opt(None, "adaptive: runs to read (pooled) [default: all].")
    mode: str = opt(
        "auto", "adaptive: budgeted (runs made at each budget), truncation (cut at T) or auto.",
        choices=("auto", "budgeted", "truncation"),
    )
    reference: int | None = opt(
        None, "adaptive: the large reference budget [default: the largest budget]."
    )
    floor: float = opt(0.2, "adaptive: share of the mass kept uniform over the budgets.")
    out: Path | None = opt(None, "Schedule JSON to write [default: print it].", short="-o")


@dataclass
class RewardsConfig:
    """Options of ``recovery budgetmix rewards``."""

    store: Path | None = opt(None, "DuckDB store with step_scores (prm score).", required=True)
    model: str | None = opt(None, "PRM name in step_scores.", required=True)
    out: Path | None = opt(None, "Output file: .jsonl or .parquet.", required=True, short="-o")
    lam: float = opt(1.0, "Shaping weight lambda.", flag="--lambda")
    gamma: float = opt(1.0, "Discount gamma of the shaping term.")
    initial_potential: str = opt(
        "0.5", "phi(s_1), the potential before the first turn: a number, or 'mean' (mean score)."
    )
    runs: list[str] | None = opt(None, "Runs to export [default: all].")
    layout: str = opt(
        "turns", "One row per turn, or one per trajectory with per-turn lists.",
        choices=("turns", "trajectories"),
    )
    skip_unscored: bool = opt(
        False, "Leave out trajectories with a turn the model did not score (else an error)."
    )


@click.group()
def budgetmix() -> None:
    """BudgetMix signals: budget schedules, PRM-shaped rewards, a reference trainer."""


def _plan_budgets(config: PlanConfig) -> list[int] | None:
    from analyses.budgetmix import parse_budget_range

    if config.budgets and config.budget_range:
        raise click.UsageError("give either --budgets or --range, not both")
    if config.budget_range:
        try:
            return parse_budget_range(config.budget_range)
        except ValueError as err:
            raise click.UsageError(f"--range: {err}") from None
    return list(config.budgets) if config.budgets else None


def make_schedule(config: PlanConfig):
    """The :class:`~analyses.budgetmix.BudgetSchedule` the options describe.

    Raises:
        click.UsageError: for missing or conflicting options.
        ValueError: from the schedule itself (e.g. an empty store).
    """
    from analyses.budgetmix import adaptive_schedule, mixture_schedule, uniform_schedule

    strategy = config.strategy or ("adaptive" if config.store is not None else "uniform")
    budgets = _plan_budgets(config)
    if strategy != "mixture" and config.weights:
        raise click.UsageError("--weights only goes with --strategy mixture")
    if strategy == "uniform":
        if not budgets:
            raise click.UsageError("uniform needs --budgets or --range")
        return uniform_schedule(budgets)
    if strategy == "mixture":
        if not budgets or not config.weights:
            raise click.UsageError("mixture needs --budgets (or --range) and --weights")
        return mixture_schedule(budgets, config.weights)
    if config.store is None:
        raise click.UsageError("adaptive needs --store")
    from recovery.store import connect

    if not Path(config.store).exists():
        raise click.UsageError(f"store {config.store} does not exist")
    con = connect(config.store, read_only=True)
    try:
        return adaptive_schedule(
            con, budgets, evidence=config.evidence, runs=config.runs, mode=config.mode,
            reference_budget=config.reference, floor=config.floor,
        )
    finally:
        con.close()


@budgetmix.command()
@command_options(PlanConfig)
def plan(config: PlanConfig) -> None:
    """Write a budget schedule (budgets, weights, and the evidence behind them) as JSON.

    adaptive weighs each budget T by where the store's policy falls short there; see
    docs/budgetmix.md for the formula and the JSON schema.
    """
    try:
        schedule = make_schedule(config)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    if config.out is None:
        click.echo(json.dumps(schedule.to_dict(), indent=1))
    else:
        schedule.save(config.out)
        click.echo(f"{config.out}: {schedule.strategy} schedule over {len(schedule.budgets)} budgets")
    by_budget = {e.budget: e for e in schedule.evidence}
    for budget, weight in zip(schedule.budgets, schedule.weights, strict=True):
        line = f"  T={budget:<5d} weight {weight:.3f}"
        ev = by_budget.get(budget)
        if ev is not None:
            line += (f"  pass@1 {_fmt(ev.pass_at_1)}  shortfall {_fmt(ev.shortfall)}  "
                     f"unrecovered {ev.n_unrecovered}/{ev.n_spells}")
        click.echo(line, err=config.out is None)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


@budgetmix.command()
@command_options(RewardsConfig)
def rewards(config: RewardsConfig) -> None:
    """Export PRM-shaped per-turn rewards keyed by (traj_id, t), with alignment fields.

    r_t = R [t = last] + lambda (gamma phi(s_t+1) - phi(s_t)), phi(s_t) = the PRM score of turn
    t - 1, phi(s_1) = --initial-potential, phi after the last turn = 0.
    """
    from analyses.budgetmix import export_shaped_rewards
    from recovery.store import connect

    try:
        initial: float | str = float(config.initial_potential)
    except ValueError:
        initial = config.initial_potential
    if not Path(config.store).exists():
        raise click.UsageError(f"store {config.store} does not exist")
    con = connect(config.store, read_only=True)
    try:
        result = export_shaped_rewards(
            con, config.model, config.out, lam=config.lam, gamma=config.gamma,
            initial_potential=initial, runs=config.runs, skip_unscored=config.skip_unscored,
            layout=config.layout,
        )
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    finally:
        con.close()
    line = (f"{result.path}: {result.n_turns} turns of {result.n_trajectories} trajectories "
            f"(model {result.model!r}, phi(s_1) = {result.initial_potential:.4g})")
    if result.n_unscored:
        line += f"; {result.n_unscored} trajectories with unscored turns left out"
    if result.n_unknown_outcome:
        line += f"; {result.n_unknown_outcome} with an unknown outcome left out"
    click.echo(line)


@budgetmix.command(name="train-sim")
@command_options(TrainSimConfig)
def train_sim(config: TrainSimConfig) -> None:
    """Train small policies on a simulated agent task at fixed budgets, with BudgetMix, and
    with BudgetMix + PRM shaping; write evaluation rollouts that `recovery analyze` reads.
    """
    from analyses.budgetmix_train import train_sim as run_train_sim

    try:
        result = run_train_sim(config, echo=lambda line: click.echo(line, err=True))
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    files = " ".join(str(m.rollouts) for m in result.modes)
    click.echo(f"summary {result.summary}")
    click.echo(f"measure: recovery analyze {files} --mode budgeted")
