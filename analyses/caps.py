"""Step caps: an episode that stops at its run's step cap without success is censored, not failed.

Real harnesses stop an episode after a fixed number of steps (BALROG's ``max_steps``,
SWE-agent's ``step_limit``, tau-bench's ``max_num_steps``). Such an episode did not fail: it
ran out of turns, and the hazard model must treat it as censored there (a death at turn 100 and
a censoring at turn 100 give different hazards). The cap comes, in this order, from

1. ``--max-turns RUN=N`` (what the user knows),
2. the data: the format wrote the budget (a canonical ``budget``, a BALROG config, a SWE-agent
   ``step_limit``) and the store already calls such endings ``budget``,
3. detection: many episodes of the run end without success at its largest turn count, a
   spike there (:func:`detect_cap`).

The store keeps the end reason the format gave; the analyses apply the cap to their frames
(:func:`with_step_caps`), and the report's data-quality section says where each cap came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import pandas as pd

CAP_SOURCES = ("--max-turns", "data", "detected")
"""Where a run's step cap came from, in the order they are tried."""

MIN_CAPPED = 3
"""Fewest failures at the largest turn count for a cap to be detected."""

SPIKE_WINDOW = 5
"""Turn counts just below the largest that the spike is compared with."""


@dataclass(frozen=True)
class StepCap:
    """A run's step cap.

    Attributes:
        run: The run.
        turns: The cap: an episode of this many turns without success ran out of turns.
        source: Where it came from (one of :data:`CAP_SOURCES`).
        n_capped: Episodes of the run that end at the cap without success.
        n_failures: Episodes of the run that did not succeed (the cap's share is of these).
    """

    run: str
    turns: int
    source: str
    n_capped: int
    n_failures: int

    def describe(self) -> str:
        """``"100 turns (detected: 76 of 80 unsuccessful episodes end there)"``."""
        how = {"--max-turns": "given with --max-turns", "data": "written in the data",
               "detected": "detected"}[self.source]
        return (f"{self.turns} turns ({how}: {self.n_capped} of {self.n_failures} unsuccessful "
                f"episodes end there)")


def detect_cap(n_turns: np.ndarray, success: np.ndarray) -> int | None:
    """The step cap of one run's episodes, or ``None`` when their ends show none.

    With ``M`` the largest turn count and ``k`` the unsuccessful episodes of exactly ``M``
    turns, ``M`` is a cap when ``k >= MIN_CAPPED``, at least ``MIN_CAPPED`` episodes end
    before ``M`` (when every episode has one length, nothing piles up), and ``k`` is at least
    twice the most
    unsuccessful episodes at any one of the :data:`SPIKE_WINDOW` turn counts below ``M``: episodes
    that end on their own spread out, while a cap piles them up at one count. tau-bench's
    airline file (a cap of 30 steps) has 7 failures at 30 and at most 1 at 25 to 29; a game
    run stopped at 100 steps has most of its failures there.

    Args:
        n_turns: Turns of each episode.
        success: Whether each succeeded.
    """
    n_turns = np.asarray(n_turns, dtype=np.int64)
    failed = ~np.asarray(success, dtype=bool)
    if not len(n_turns) or not failed.any():
        return None
    top = int(n_turns.max())
    at_top = int((failed & (n_turns == top)).sum())
    if at_top < MIN_CAPPED or int((n_turns < top).sum()) < MIN_CAPPED:
        return None  # too few there, or every episode has that length: nothing piles up
    below = n_turns[failed & (n_turns < top) & (n_turns >= top - SPIKE_WINDOW)]
    most_below = int(np.bincount(top - below).max()) if len(below) else 0
    return top if at_top >= 2 * most_below else None


def step_caps(traj: pd.DataFrame, given: Mapping[str, int] | None = None) -> dict[str, StepCap]:
    """Each run's step cap, from ``--max-turns``, the data, or detection.

    Args:
        traj: Trajectories frame (``run, success, n_turns``, and ``end_reason`` when known).
        given: Run -> cap, from ``--max-turns``; a run named here that has no trajectory is
            refused.

    Returns:
        Run -> its cap, for the runs that have one.

    Raises:
        UsageProblem: for a ``--max-turns`` run that is not among the runs, or a cap below 1.
    """
    import pandas as pd

    given = dict(given or {})
    runs = sorted(str(r) for r in pd.unique(traj["run"]))
    unknown = sorted(set(given) - set(runs))
    if unknown:
        raise UsageProblem(f"--max-turns names run(s) {', '.join(unknown)} that are not "
                           f"among the runs ({', '.join(runs)})")
    out: dict[str, StepCap] = {}
    for run in runs:
        mine = traj[traj["run"].astype(str) == run]
        success = mine["success"].astype("boolean").fillna(False).to_numpy(dtype=bool)
        n_turns = mine["n_turns"].to_numpy(dtype=np.int64)
        failures = int((~success).sum())
        reason = (mine["end_reason"].astype(str).to_numpy() if "end_reason" in mine
                  else np.full(len(mine), ""))
        if run in given:
            cap = int(given[run])
            if cap < 1:
                raise UsageProblem(f"--max-turns {run}={cap}: a cap is at least 1 turn")
            source = "--max-turns"
        elif (reason == "budget").any():
            cap = int(n_turns[reason == "budget"].max())
            source = "data"
        else:
            detected = detect_cap(n_turns, success)
            if detected is None:
                continue
            cap, source = detected, "detected"
        capped = int((~success & (n_turns >= cap)).sum())
        out[run] = StepCap(run, cap, source, capped, failures)
    return out


def with_step_caps(traj: pd.DataFrame, caps: Mapping[str, StepCap]) -> pd.DataFrame:
    """``traj`` with the episodes that ran out of turns ended by ``budget`` (censored).

    An episode of a run with a cap that did not succeed, did not crash, and has at least the
    cap's turns ends by its budget; every other row is unchanged.
    """
    applied = {run: c.turns for run, c in caps.items() if c.source != "data"}
    if not applied or "end_reason" not in traj:
        return traj  # a cap written in the data is in the end reasons already
    cap = traj["run"].astype(str).map(applied)
    success = traj["success"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    reason = traj["end_reason"].astype(str).to_numpy()
    out_of_turns = (~success & (reason == "failure")
                    & (traj["n_turns"].to_numpy() >= cap.fillna(np.inf).to_numpy()))
    if not out_of_turns.any():
        return traj
    return traj.assign(end_reason=np.where(out_of_turns, "budget", reason))


def parse_max_turns(values: list[str] | tuple[str, ...]) -> dict[str, int]:
    """``["rl=100", "base=50"]`` -> ``{"rl": 100, "base": 50}`` (the run label may hold ``=``:
    the last one splits).

    Raises:
        UsageProblem: for an entry without ``=`` or a cap that is not a positive whole number.
    """
    out: dict[str, int] = {}
    for value in values:
        run, sep, cap = str(value).rpartition("=")
        if not sep or not run or not cap.strip().isdigit() or int(cap) < 1:
            raise UsageProblem(f"--max-turns {value!r}: give RUN=N with N a whole number of "
                               "turns, at least 1")
        out[run] = int(cap)
    return out
