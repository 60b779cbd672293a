"""How the report writes numbers and turn limits: one set of formatters for every output.

The terminal, the HTML page and the plots all call these, so a number reads the same wherever
it appears: ``-`` for a missing value, no ``-0.000``, ``no limit`` for T = infinity.
"""

from __future__ import annotations

import math

NO_LIMIT = "no limit"
"""How a turn limit of infinity (``None``) is written."""

MISSING = "-"
"""How a missing (NaN) number is written."""


def t_label(t: int | None) -> str:
    """A turn limit as a bare label: ``"10"`` or ``"no limit"``."""
    return NO_LIMIT if t is None else str(t)


def t_header(t: int | None) -> str:
    """A turn limit as a column header: ``"T=10"`` or ``"no limit"``."""
    return NO_LIMIT if t is None else f"T={t}"


def number(value: float | None, digits: int = 3, *, signed: bool = False) -> str:
    """``0.427``; ``+0.031`` when ``signed``; :data:`MISSING` for NaN; never ``-0.000``."""
    if value is None or not math.isfinite(value):
        return MISSING
    if round(value, digits) == 0:
        value = 0.0
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def percent(value: float | None, digits: int = 1) -> str:
    """``12.5%``; :data:`MISSING` for NaN."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{100 * value:.{digits}f}%"


def interval(lo: float, hi: float, digits: int = 2, *, signed: bool = False,
             compact: bool = True) -> str:
    """An interval: compact ``.06-.11`` / ``-.01,+.02``, or ``[0.060, 0.110]``; empty
    without bootstrap (NaN ends)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ""
    if not compact:
        return f"[{number(lo, digits, signed=signed)}, {number(hi, digits, signed=signed)}]"
    sep = "," if signed else "-"
    return f"{_short(lo, digits, signed)}{sep}{_short(hi, digits, signed)}"


def _short(value: float, digits: int, signed: bool) -> str:
    text = f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return text.replace("0.", ".", 1)


def signed_interval(lo: float, hi: float, digits: int = 3) -> str:
    """``[+0.200, +0.258]``; empty without bootstrap."""
    return interval(lo, hi, digits, signed=True, compact=False)


STRATA_KEYS = {
    "clean_success": "successes per clean turn",
    "success": "success rate",
}
"""How each ``strata_by`` orders tasks, in words."""


def definitions(strata: int = 5, strata_by: str = "clean_success") -> dict[str, str]:
    """One sentence per quantity the report shows, in the report's own words.

    The terminal, the HTML page and the JSON file carry the same sentences, so a reader never
    needs another document to know what a number is.

    Args:
        strata: The strata of the report (the sentence says how many).
        strata_by: What ordered the tasks into strata.
    """
    key = STRATA_KEYS.get(strata_by, strata_by)
    strata_text = (
        "strata: the hazards are fitted on all tasks pooled (one stratum)"
        if strata == 1 else
        f"strata: the tasks are sorted by their {key} over both runs and cut into {strata} "
        "groups of similar difficulty; the hazards are fitted within each group and the "
        "groups averaged, weighted by their tasks"
    )
    return {
        "Pass@(K,T)": "Pass@(K,T): the chance that at least one of K samples of a task "
        "succeeds within T turns, averaged over tasks",
        "pass^(K,T)": "pass^(K,T): the chance that all K samples of a task succeed within T "
        "turns, averaged over tasks",
        "drop": "drop: Pass@(K,T) at T minus its value at the reference T, what cutting "
        "the budget to T costs",
        "S(T)": "S(T) = Pass@(1,T): the share of a task's samples that succeed within T "
        "turns, averaged over tasks",
        "budget curve": "budget curve: S(T) and a comparison's change of S(T) at every T "
        "from 1 to the largest turn count (truncation mode), with a 95% band that holds over "
        "every T at once (max-|t| bootstrap over the shared tasks); K > 1, the difference "
        "surface and the decomposition are read on the T grid (quantiles of the turn counts, "
        "and the budgets the headline reads)",
        "empirical": "empirical: counted from the trajectories themselves",
        "model": "model: S(T) of the two-clock hazard model fitted to the run, a "
        "single-step process (error, success and failure chances per clean turn) and a "
        "recovery process (the chances of leaving, or dying in, an error spell per turn of it)",
        "e": "e: the chance that an error spell starts within the first T turns",
        "c": "c: the chance of success by T for a trajectory with no error within T",
        "r": "r: the chance of success by T for a trajectory with an error within T; "
        "S(T) = (1 - e) c + e r describes a run and attributes nothing",
        "strata": strata_text,
        "delta": "delta: the empirical change of S(T), candidate minus baseline, over the "
        "tasks both ran",
        "model delta": "model delta: the model's change of S(T), single step + recovery",
        "single step": "single step: the part of the model's change due to the single-step "
        "process (fewer errors, faster progress), averaged over both orders of swapping",
        "recovery": "recovery: the part due to the recovery process (leaving error spells "
        "sooner, dying in them less often)",
        "residual": "residual: delta minus model delta, how far the model is from the data",
        "recovery share": "recovery share: recovery / model delta, shown only where the "
        "interval of model delta excludes 0",
        "difference": "difference: the candidate's Pass@(K,T) minus the baseline's over the "
        "tasks both ran, with intervals from resampling those tasks (the same draw for both)",
        "h": "h(n): the chance that the next turn starts an error spell, after n clean turns",
        "rho": "rho(d): the chance that the next turn is clean (the spell ends), after d "
        "error turns of a spell",
        "phi": "phi(d): the chance that the episode ends in failure right after the d-th error "
        "turn of a spell",
        "latency": "latency: turns from an error spell's first turn to the clean turn that "
        "ends it",
        "t_90": "T for 90%: the smallest T at which Pass@(1,T) reaches 90% of its value with "
        "no turn limit",
        "intervals": "intervals: percentile bootstrap over tasks; none for a change over "
        "fewer than 10 shared tasks",
    }
