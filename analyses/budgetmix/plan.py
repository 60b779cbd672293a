"""The library face of ``recovery budgetmix plan``: options in, a budget schedule out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from analyses.budgetmix.evidence import (
    EVIDENCE_KINDS,
    EVIDENCE_MODES,
    EvidenceOptions,
    adaptive_schedule,
)
from analyses.budgetmix.schedule import (
    STRATEGIES,
    BudgetSchedule,
    check_budget,
    mixture_schedule,
    parse_budget_range,
    uniform_schedule,
)
from recovery.caps_given import parse_max_turns
from recovery.config import CheckedOptions, opt
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    import duckdb


@dataclass
class PlanConfig(CheckedOptions):
    """Options of ``recovery budgetmix plan`` (and of :func:`plan_schedule`)."""

    store: Path | None = opt(None, "Store (DuckDB file or Parquet folder; needed by --strategy adaptive).")
    strategy: str | None = opt(
        None, "uniform, mixture or adaptive [default: adaptive with --store, else uniform].",
        choices=STRATEGIES,
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
        choices=EVIDENCE_KINDS,
    )
    runs: list[str] | None = opt(None, "adaptive: runs to read (pooled) [default: all].")
    mode: str = opt(
        "auto", "adaptive: budgeted (runs made at each budget), truncation (cut at T) or auto.",
        choices=EVIDENCE_MODES,
    )
    reference: int | None = opt(
        None, "adaptive: the large reference budget [default: the largest budget]."
    )
    floor: float = opt(0.2, "adaptive: share of the mass kept uniform over the budgets.")
    max_turns: list[str] | None = opt(
        None, "adaptive: step caps as recovery analyze takes them (RUN=N, ENV=N, RUN/ENV=N) "
        "[default: written in the data or detected].",
    )
    out: Path | None = opt(None, "Schedule JSON to write [default: print it].", short="-o")


def _plan_budgets(config: PlanConfig) -> list[int] | None:
    if config.budgets and config.budget_range:
        raise UsageProblem("give either --budgets or --range, not both")
    if config.budget_range:
        try:
            return parse_budget_range(config.budget_range)
        except UsageProblem as err:
            raise UsageProblem(f"--range: {err}") from None
    budgets = [check_budget(b, "--budgets") for b in config.budgets] if config.budgets else None
    if config.reference is not None:
        check_budget(config.reference, "--reference")
    return budgets


def plan_schedule(config: PlanConfig) -> BudgetSchedule:
    """The schedule the options describe (the store is opened read-only, only if it exists).

    Args:
        config: The command's options.

    Returns:
        The schedule (not yet written).

    Raises:
        UsageProblem: for missing or conflicting options.
        InputProblem: when the store is missing or its data cannot support the schedule
            (e.g. no trajectory with a known outcome, or budgeted mode without budgets).
    """
    strategy = config.strategy or ("adaptive" if config.store is not None else "uniform")
    budgets = _plan_budgets(config)
    if strategy != "mixture" and config.weights:
        raise UsageProblem("--weights only goes with --strategy mixture")
    # repeated or non-positive budgets, bad weights: UsageProblems of the schedule's checks
    if strategy == "uniform":
        if not budgets:
            raise UsageProblem("uniform needs --budgets or --range")
        return uniform_schedule(budgets)
    if strategy == "mixture":
        if not budgets or not config.weights:
            raise UsageProblem("mixture needs --budgets (or --range) and --weights")
        return mixture_schedule(budgets, config.weights)
    if config.store is None:
        raise UsageProblem("adaptive needs --store")
    if not 0.0 <= config.floor <= 1.0:
        raise UsageProblem(f"--floor must lie in [0, 1], got {config.floor}")
    given = parse_max_turns(config.max_turns) if config.max_turns else None
    from recovery.store import open_store

    store = open_store(config.store, read_only=True)
    con = store.con
    try:
        schedule = adaptive_schedule(con, budgets, EvidenceOptions(
            evidence=config.evidence, runs=config.runs, mode=config.mode,
            reference_budget=config.reference, floor=config.floor,
        ))
        schedule.params.update(_step_cap_params(con, config.runs, given))
        return schedule
    except InputProblem as err:  # what the store cannot give, named by the store
        raise InputProblem(f"store {config.store}: {err}") from None
    finally:
        store.close()


def _step_cap_params(
    con: duckdb.DuckDBPyConnection, runs: list[str] | None, given: dict[str, int] | None
) -> dict[str, Any]:
    """What the store's step caps say of the pooled runs (:func:`recovery.caps.capped_frame`,
    the rule ``recovery analyze`` applies): ``step_caps`` (environment -> its caps),
    ``n_censored`` (episodes that ran out of turns) and ``warnings`` (one line when the runs
    pool environments with different caps: a budget past one's cap is never run there)."""
    from analyses.frames import trajectories_frame
    from recovery.caps import capped_frame

    capped = capped_frame(trajectories_frame(con, runs), given)
    note = capped.pooling_note(
        None, "budgetmix plan", "a budget past an environment's cap is never run there: "
        "compare them with recovery analyze --by env and plan on one environment's runs")
    return {"step_caps": capped.env_caps(),
            "n_censored": int((capped.frame["end_reason"] == "budget").sum()),
            "warnings": [note] if note else []}


def schedule_lines(schedule: BudgetSchedule) -> list[str]:
    """One line per budget: its weight and, for an adaptive schedule, the evidence behind it;
    then a ``warning:`` line for each of the schedule's warnings."""
    by_budget = {e.budget: e for e in schedule.evidence}
    lines = []
    for budget, weight in zip(schedule.budgets, schedule.weights, strict=True):
        line = f"  T={budget:<5d} weight {weight:.3f}"
        ev = by_budget.get(budget)
        if ev is not None:
            line += (f"  pass@1 {_fmt(ev.pass_at_1)}  shortfall {_fmt(ev.shortfall)}  "
                     f"unrecovered {ev.n_unrecovered}/{ev.n_spells}")
        lines.append(line)
    return lines + [f"warning: {w}" for w in schedule.params.get("warnings") or []]


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
