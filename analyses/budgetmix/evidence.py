"""Adaptive schedules: weigh each training budget by where the store's policy falls short.

Two kinds of evidence per budget ``T`` (both are kept in the schedule, whichever drives the
weights):

- ``shortfall``: how far Pass@(1,T) falls below Pass@(1,T_ref) at the reference (large)
  budget, ``max(0, pass1(T_ref) - pass1(T))``: train more where short budgets cost success;
- ``unrecovered``: how much larger the share of error spells still unrecovered at ``T`` is
  than at ``T_ref``, ``max(0, u(T) - u(T_ref))`` with ``u(T)`` = spells started by ``T`` and
  not recovered by ``T`` / spells started by ``T``: train more where the budget cuts
  recoveries off.

The weights are :func:`analyses.budgetmix.schedule.evidence_weights` of the chosen evidence.
The store is read through :mod:`analyses.frames`, whose frames hold plain numpy dtypes (an
unknown budget is NaN), so a store without budgets (most real data) reads in truncation mode.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from analyses.budgetmix.schedule import (
    BudgetEvidence,
    BudgetSchedule,
    check_budget,
    evidence_weights,
)
from recovery.config import opt
from recovery.errors import InputProblem, UsageProblem
from recovery.jsonsafe import json_safe

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

EVIDENCE_KINDS = ("shortfall", "unrecovered")
"""What drives the weights of an ``adaptive`` schedule."""

EVIDENCE_MODES = ("auto", "budgeted", "truncation")
"""How Pass@(1,T) and spells are read at each budget (see :func:`budget_evidence`)."""


def _selected_trajectories(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None
) -> pd.DataFrame:
    from analyses.frames import trajectories_frame

    traj = trajectories_frame(con, runs)
    if traj.empty:
        which = f" of runs {', '.join(runs)}" if runs else ""
        raise InputProblem(f"no trajectories with a known outcome{which} in the store")
    return traj


def _budgets_present(traj: pd.DataFrame) -> set[int]:
    """The budgets trajectories were run with (NaN, an unknown budget, is left out)."""
    budget = traj["budget"].to_numpy(dtype=np.float64)
    return {int(b) for b in np.unique(budget[~np.isnan(budget)])}


def _run_with(traj: pd.DataFrame, budgets: Sequence[int]) -> np.ndarray:
    """Whether each trajectory was run with one of ``budgets`` (never for an unknown budget)."""
    return np.isin(traj["budget"].to_numpy(dtype=np.float64), np.asarray(budgets, dtype=float))


def _resolve_mode(traj: pd.DataFrame, wanted: Sequence[int], mode: str) -> str:
    if mode not in EVIDENCE_MODES:
        raise UsageProblem(f"unknown mode {mode!r}; known: {', '.join(EVIDENCE_MODES)}")
    present = _budgets_present(traj)
    if mode == "budgeted":
        missing = sorted(set(wanted) - present)
        if missing:
            raise InputProblem(
                f"budgeted mode: no trajectories run with budget(s) {missing} "
                f"(present: {sorted(present) or 'none'}); use --mode truncation"
            )
        return mode
    if mode == "auto":
        # the one rule: `recovery analyze` reads the same store in the same mode
        from analyses.modes import resolve_mode

        return resolve_mode(traj, "auto", list(wanted))[0]
    return mode


def default_budgets(con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None) -> list[int]:
    """Budgets to weigh when none are given.

    The distinct budgets of the store when there are at least two, else turn limits at
    quantiles of the turn counts (:func:`analyses.grid_defaults.default_ts`).

    Raises:
        InputProblem: when the store has no trajectory with a known outcome (of ``runs``).
    """
    from analyses.grid_defaults import default_ts

    traj = _selected_trajectories(con, runs)
    present = sorted(_budgets_present(traj))
    if len(present) >= 2:
        return present
    return [t for t in default_ts(traj["n_turns"]) if t is not None]


def budget_evidence(
    con: duckdb.DuckDBPyConnection,
    budgets: Sequence[int],
    *,
    runs: Sequence[str] | None = None,
    mode: str = "auto",
    reference_budget: int | None = None,
) -> tuple[list[BudgetEvidence], dict[str, Any]]:
    """Pass@(1,T) and unrecovered error spells at each budget, with the reference values.

    The selected runs are pooled (one policy's view; pass ``runs`` to pick the checkpoint).

    Args:
        con: The store (marked: ``error_spells`` filled, as ingest does).
        budgets: The budgets ``T`` to describe.
        runs: Runs to read; ``None`` = all.
        mode: ``budgeted`` (at ``T``, the trajectories run with budget ``T``), ``truncation``
            (every trajectory cut at ``T``: right when the agent is not told its budget) or
            ``auto`` (budgeted when every budget, the reference included, was run).
        reference_budget: ``T_ref``, the large budget the others are compared with; default
            the largest of ``budgets``.

    Returns:
        The evidence per budget (budget order) and a dict with ``mode``, ``reference_budget``,
        ``reference_pass_at_1`` and ``reference_unrecovered_share``.

    Raises:
        UsageProblem: for an unknown ``mode``, no budgets, or a budget that is not a positive
            integer.
        InputProblem: when the store has no trajectory with a known outcome (of ``runs``), or
            ``mode="budgeted"`` asks for budgets no trajectory was run with.
    """
    from analyses.passkt import GridOptions, pass_at_kt

    # Checked, never rounded: 4.9 is refused rather than read as 4, 2**63 before DuckDB sees it.
    budgets = sorted({check_budget(b) for b in budgets})
    if not budgets:
        raise UsageProblem("no budgets to describe")
    reference = (check_budget(reference_budget, "the reference budget")
                 if reference_budget is not None else budgets[-1])
    traj = _selected_trajectories(con, runs)
    wanted = sorted({*budgets, reference})
    used = _resolve_mode(traj, wanted, mode)
    pooled = traj.assign(run="pooled")
    if used == "budgeted":
        pooled = pooled[_run_with(pooled, wanted)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # mixed budgets: the mode is reported
        grid = pass_at_kt(pooled, GridOptions(ks=[1], ts=wanted, mode=used, n_boot=0))
    pass1 = dict(zip(grid["t"].astype(int), grid["value"], strict=True))
    spells = _spell_counts(con, traj, wanted, used)
    ref_pass, ref_share = pass1[reference], spells[reference][2]
    out = []
    for t in budgets:
        n_traj, n_tasks = _counts_at(pooled, t, used)
        n_spells, n_unrec, share = spells[t]
        out.append(
            BudgetEvidence(
                budget=t,
                n_trajectories=n_traj,
                n_tasks=n_tasks,
                pass_at_1=json_safe(pass1[t]),
                shortfall=json_safe(max(0.0, ref_pass - pass1[t])),
                n_spells=n_spells,
                n_unrecovered=n_unrec,
                unrecovered_share=share,
                unrecovered_excess=None if share is None or ref_share is None
                else max(0.0, share - ref_share),
            )
        )
    info = {
        "mode": used,
        "reference_budget": reference,
        "reference_pass_at_1": json_safe(ref_pass),
        "reference_unrecovered_share": ref_share,
    }
    return out, info


def _counts_at(traj: pd.DataFrame, t: int, mode: str) -> tuple[int, int]:
    at = traj[_run_with(traj, [t])] if mode == "budgeted" else traj
    return len(at), int(at["task_id"].nunique())


def _spell_counts(
    con: duckdb.DuckDBPyConnection, traj: pd.DataFrame, budgets: list[int], mode: str
) -> dict[int, tuple[int, int, float | None]]:
    """Per budget: spells started by ``T``, those not recovered by ``T``, and their share."""
    import pyarrow as pa

    budget = traj["budget"].to_numpy(dtype=np.float64)
    con.register("_bm_traj", pa.table({
        "traj_id": pa.array(traj["traj_id"].astype(str).tolist(), pa.string()),
        # an unknown budget (NaN) is NULL: it matches no budget in budgeted mode
        "budget": pa.array(np.nan_to_num(budget, nan=0).astype(np.int64),
                           mask=np.isnan(budget)),
    }))
    con.register("_bm_budgets", pa.table({"t": pa.array(budgets, pa.int64())}))
    if mode == "budgeted":
        scope = "tr.budget = b.t"
        started = "TRUE"
        unrecovered = "NOT s.recovered"
    else:
        scope = "TRUE"
        started = "s.start_t <= b.t"
        unrecovered = "(s.recovered_at IS NULL OR s.recovered_at > b.t)"
    try:
        rows = con.execute(
            f"""
            SELECT b.t,
                   count(s.traj_id) FILTER (WHERE {started})                  AS n_spells,
                   count(s.traj_id) FILTER (WHERE {started} AND {unrecovered}) AS n_unrecovered
            FROM _bm_budgets b
            JOIN _bm_traj tr ON {scope}
            JOIN error_spells s ON s.traj_id = tr.traj_id
            GROUP BY b.t
            """
        ).fetchall()
    finally:
        con.unregister("_bm_traj")
        con.unregister("_bm_budgets")
    counts = {int(t): (int(n), int(u)) for t, n, u in rows}
    out = {}
    for t in budgets:
        n, u = counts.get(t, (0, 0))
        out[t] = (n, u, u / n if n else None)
    return out


@dataclass(frozen=True)
class EvidenceOptions:
    """What :func:`adaptive_schedule` weighs by (``recovery budgetmix plan``'s adaptive
    settings)."""

    evidence: str = opt("shortfall", "'shortfall' (Pass@(1,T) below the reference) or "
                                     "'unrecovered' (error spells left unrecovered at T beyond "
                                     "the reference's share).")
    runs: Sequence[str] | None = opt(None, "Runs to read (pooled); None = all.")
    mode: str = opt("auto", "'auto', 'budgeted' or 'truncation' (see budget_evidence).")
    reference_budget: int | None = opt(None, "The large budget compared with; None = the "
                                             "largest budget.")
    floor: float = opt(0.2, "Share of the mass kept uniform, in [0, 1].")


def adaptive_schedule(
    con: duckdb.DuckDBPyConnection,
    budgets: Sequence[int] | None = None,
    options: EvidenceOptions = EvidenceOptions(),
) -> BudgetSchedule:
    """A schedule over ``budgets`` (``None`` = :func:`default_budgets`) weighted by where the
    policy in the store falls short (see module docstring), with its evidence and parameters.

    Raises:
        UsageProblem: for an unknown ``evidence`` or ``mode``, or a ``floor`` outside [0, 1].
        InputProblem: when the store cannot give the evidence (see :func:`budget_evidence`).
    """
    evidence, runs, mode = options.evidence, options.runs, options.mode
    reference_budget, floor = options.reference_budget, options.floor
    if evidence not in EVIDENCE_KINDS:
        raise UsageProblem(f"unknown evidence {evidence!r}; known: {', '.join(EVIDENCE_KINDS)}")
    if not 0.0 <= floor <= 1.0:
        raise UsageProblem(f"floor must lie in [0, 1], got {floor}")
    if budgets is None:
        budgets = default_budgets(con, runs)
        if not budgets:
            raise InputProblem("the store's trajectories have no turns to choose budgets from; "
                               "give --budgets")
    rows, info = budget_evidence(
        con, budgets, runs=runs, mode=mode, reference_budget=reference_budget
    )
    key = "shortfall" if evidence == "shortfall" else "unrecovered_excess"
    x = [getattr(r, key) if getattr(r, key) is not None else 0.0 for r in rows]
    weights = evidence_weights(x, floor)
    params = {"floor": floor, **info, "runs": list(runs) if runs else None}
    return BudgetSchedule(
        budgets=[r.budget for r in rows],
        weights=list(weights),
        strategy="adaptive",
        evidence_kind=evidence,
        evidence=rows,
        params=params,
    )
