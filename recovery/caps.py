"""Step caps: an episode that stops at its task's step cap without success is censored, not failed.

Real harnesses stop an episode after a fixed number of steps (BALROG's ``max_steps``,
SWE-agent's ``step_limit``, tau-bench's ``max_num_steps``). Such an episode did not fail: it
ran out of turns, and the hazard model must treat it as censored there (a death at turn 100 and
a censoring at turn 100 give different hazards).

A cap is a fact of the environment and the task, not of the run: one benchmark run spans
environments with different caps, and within one environment the caps can differ by level.
**The one rule**: an episode that did not succeed, did not crash and reached its task's cap
ends by ``budget`` (censored), whatever gave the cap. Each task's cap comes, in this order, from

1. ``--max-turns`` (what the user knows): ``RUN=N``, ``ENV=N`` or ``RUN/ENV=N``
   (:func:`resolve_max_turns`);
2. the data, for the task: the format wrote ``budget`` for some of its episodes (a canonical
   ``budget``, a BALROG summary without ``done``): the largest such turn count is the task's
   cap, and it applies to every episode of the task that reached it;
3. the data, for the environment (the task id up to its first ``/``): when the tasks of the
   environment that have a written cap all have the same one, a task without one gets it
   (unless its own detected cap differs);
4. detection for the task, where it has :data:`MIN_TASK_EPISODES` episodes and its cap is
   corroborated (the environment's cap, a written one, or that of another task);
5. detection for the environment.

Detection (:func:`detect_cap`) pools the runs given together (the environment sets the cap, not
the agent). The store keeps the end reason the format gave; every consumer (the report and its
data-quality numbers, the task timeline, ``budgetmix plan``) gets the capped frame from
:func:`capped_frame`, so one episode has one end reason everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from recovery.caps_given import parse_max_turns, resolve_max_turns
from recovery.config import need

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CAP_SOURCES", "CappedFrame", "StepCap", "capped_frame", "detect_cap", "env_of",
           "parse_max_turns"]

CAP_SOURCES = ("--max-turns", "data", "detected")
"""Where a cap came from, in the order they are tried."""

MIN_CAPPED = 3
"""Fewest failures at the largest turn count for a cap to be detected."""

SPIKE_WINDOW = 5
"""Turn counts just below the largest that the spike is compared with."""

NEARLY_ALL = 0.9
"""A share of the unsuccessful episodes ending at the largest turn count that is a cap by itself
(29 of 30), with at least one episode shorter."""

MIN_TASK_EPISODES = 10
"""Fewest episodes (over the runs) of a task for a cap to be detected on the task alone."""

_HOW = {"--max-turns": "given with --max-turns", "data": "written in the data",
        "detected": "detected"}


@dataclass(frozen=True)
class StepCap:
    """One step cap of a run, as the data-quality section states it.

    Attributes:
        run: The run.
        turns: The cap: an episode of this many turns without success ran out of turns.
        source: Where it came from (one of :data:`CAP_SOURCES`).
        n_capped: Unsuccessful episodes (of the run, or of ``env`` in it) that reach the cap.
        n_failures: Unsuccessful episodes (of the run, or of ``env`` in it).
        env: The environment it holds for; ``None`` when it is the run's only cap.
    """

    run: str
    turns: int
    source: str
    n_capped: int
    n_failures: int
    env: str | None = None

    def describe(self) -> str:
        """``"100 turns (detected: 76 of 80 unsuccessful episodes end there)"``, with
        ``" in ENV"`` after the turns when the run has several caps."""
        where = "" if self.env is None else f" in {self.env or '(no environment)'}"
        return (f"{self.turns} turns{where} ({_HOW[self.source]}: {self.n_capped} of "
                f"{self.n_failures} unsuccessful episodes end there)")


@dataclass
class CappedFrame:
    """:func:`capped_frame`'s answer.

    Attributes:
        frame: The trajectories with the episodes that ran out of turns ended by ``budget``.
        cap: Each row's cap (float; NaN where it has none).
        source: Where each row's cap came from (``""`` where it has none).
        moved: Rows whose end reason the caps changed (from ``failure`` to ``budget``).
        by_run: Run -> its caps, as the data-quality section states them.
    """

    frame: pd.DataFrame
    cap: np.ndarray
    source: np.ndarray
    moved: np.ndarray
    by_run: dict[str, list[StepCap]] = field(default_factory=dict)

    def env_caps(self, run: str | None = None) -> dict[str, list[int]]:
        """Environment -> its distinct caps (of ``run``; ``None`` = every row), for the envs
        that have one."""
        mask = ~np.isnan(self.cap)
        if run is not None:
            mask &= self.frame["run"].astype(str).to_numpy() == run
        envs = env_of(self.frame["task_id"].to_numpy()[mask])
        out: dict[str, set[int]] = {}
        for env, cap in zip(envs, self.cap[mask], strict=True):
            out.setdefault(str(env), set()).add(int(cap))
        return {env: sorted(caps) for env, caps in sorted(out.items())}

    def pooling_note(self, run: str | None = None, who: str = "the runs",
                     advice: str = "read them apart with --by env") -> str | None:
        """One line, ``"WHO: environments with different step caps are pooled (...); ADVICE"``,
        when the rows (of ``run``) pool environments whose caps differ."""
        caps = self.env_caps(run)
        if len({tuple(c) for c in caps.values()}) < 2:
            return None
        listed = ", ".join(f"{env or '(no environment)'} {'/'.join(map(str, c))}"
                           for env, c in caps.items())
        return f"{who}: environments with different step caps are pooled ({listed}); {advice}"


def env_of(task_ids: Sequence[object] | np.ndarray) -> np.ndarray:
    """The environment of each task id: the id up to its first ``/`` (``""`` without one), as
    ``recovery analyze --by env`` groups them."""
    import pandas as pd

    ids = pd.Series(np.asarray(task_ids, dtype=object), dtype=object).astype(str)
    head = ids.str.split("/", n=1).str[0]
    return np.where(ids.str.contains("/", regex=False), head, "").astype(object)


def detect_cap(n_turns: np.ndarray, success: np.ndarray) -> int | None:
    """The step cap of a set of episodes, or ``None`` when their ends show none.

    With ``M`` the largest turn count and ``k`` the unsuccessful episodes of exactly ``M``
    turns, ``M`` is a cap when ``k >= MIN_CAPPED``, some episode ends before ``M`` (when
    every episode has one length, nothing piles up), and either nearly every unsuccessful
    episode ends there (``k`` at least :data:`NEARLY_ALL` of them: 29 of 30) or, with at least
    ``MIN_CAPPED`` episodes shorter, ``k`` is at least twice the most unsuccessful episodes at
    any one of the :data:`SPIKE_WINDOW` turn counts below ``M``: episodes that end on their own
    spread out, while a cap piles them up at one count. tau-bench's airline file (a cap of 30
    steps) has 7 failures at 30 and at most 1 at 25 to 29.

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
    shorter = int((n_turns < top).sum())
    if at_top < MIN_CAPPED or not shorter:
        return None  # too few there, or every episode has that length: nothing piles up
    if at_top >= NEARLY_ALL * int(failed.sum()):
        return top
    if shorter < MIN_CAPPED:
        return None
    below = n_turns[failed & (n_turns < top) & (n_turns >= top - SPIKE_WINDOW)]
    most_below = int(np.bincount(top - below).max()) if len(below) else 0
    return top if at_top >= 2 * most_below else None


def capped_frame(traj: pd.DataFrame, given: Mapping[str, int] | None = None) -> CappedFrame:
    """The trajectories with every episode that ran out of turns ended by ``budget``.

    The one place the rule of the module docs is applied: an episode that did not succeed,
    ended by ``failure`` (not a crash, not unknown) and has at least its task's cap of turns
    ends by ``budget``; every other row is unchanged. The runs in ``traj`` are pooled for the
    caps from the data and from detection.

    Args:
        traj: Trajectories (``run, task_id, success, n_turns``; ``end_reason`` when known, else
            it is derived as :func:`ended_by_budget` says).
        given: ``--max-turns`` entries, name -> cap (:func:`resolve_max_turns` reads them).

    Raises:
        UsageProblem: for a ``--max-turns`` name that is no run, environment or RUN/ENV.
    """
    import pandas as pd

    runs = traj["run"].astype(str).to_numpy()
    codes, task_names = pd.factorize(traj["task_id"].astype(str))
    task_env = env_of(np.asarray(task_names, dtype=object))
    envs = task_env[codes]
    success = traj["success"].astype("boolean").fillna(False).to_numpy(dtype=bool)
    n_turns = traj["n_turns"].to_numpy(dtype=np.int64)
    reason = _reasons(traj, success)
    cap_of, source_of = _found_caps(codes, task_env, success, n_turns, reason)
    cap, source = cap_of[codes], source_of[codes]
    for mask, turns in resolve_max_turns(given or {}, runs, envs):
        cap[mask], source[mask] = turns, "--max-turns"
    moved = (reason == "failure") & ~success & (n_turns >= np.nan_to_num(cap, nan=np.inf))
    frame = traj.assign(end_reason=np.where(moved, "budget", reason))
    out = CappedFrame(frame=frame, cap=cap, source=source, moved=moved)
    rows = _Rows(envs=envs, success=success, n_turns=n_turns, cap=cap, source=source)
    out.by_run = {run: _run_caps(run, runs == run, rows) for run in sorted(set(runs))}
    return out


def _reasons(traj: pd.DataFrame, success: np.ndarray) -> np.ndarray:
    """The frame's end reasons (derived for a frame built without them)."""
    if "end_reason" in traj:
        return traj["end_reason"].astype(str).to_numpy(dtype=object)
    known = traj["success"].notna().to_numpy()
    reason = np.where(success, "success", np.where(ended_by_budget(traj), "budget", "failure"))
    return np.where(known, reason, "unknown").astype(object)


def _found_caps(
    codes: np.ndarray, task_env: np.ndarray, success: np.ndarray, n_turns: np.ndarray,
    reason: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Each task's cap (NaN: none) and its source from the data and detection (steps 2 to 5
    of the module docs), over the rows that ended by success, failure or budget.

    Args:
        codes: Each row's task, as an index into ``task_env``.
        task_env: Each task's environment.
        success: Whether each row succeeded.
        n_turns: Each row's turns.
        reason: Each row's end reason.
    """
    import pandas as pd

    usable = np.isin(reason, ["success", "failure", "budget"])
    c, ok, n = codes[usable], success[usable], n_turns[usable]
    written = reason[usable] == "budget"
    data_task = np.full(len(task_env), -1, dtype=np.int64)
    np.maximum.at(data_task, c[written], n[written])
    env_codes = pd.factorize(pd.Series(task_env, dtype=object))[0]
    row_env = env_codes[c]
    data_env, det_env = {}, {}
    for e in range(int(env_codes.max()) + 1 if len(env_codes) else 0):
        values = np.unique(data_task[(env_codes == e) & (data_task >= 0)])
        if len(values) == 1:
            data_env[e] = int(values[0])
        mine = row_env == e
        if (found := detect_cap(n[mine], ok[mine])) is not None:
            det_env[e] = found
    det_task = _task_detections(c, ok, n, env_codes, (det_env, data_env, data_task))
    cap = np.full(len(task_env), np.nan)
    source = np.full(len(task_env), "", dtype=object)
    for task, env in enumerate(env_codes):
        own, whole = int(det_task[task]), data_env.get(env)
        if data_task[task] >= 0:
            cap[task], source[task] = data_task[task], "data"
        elif whole is not None and own in (-1, whole):
            cap[task], source[task] = whole, "data"
        elif own >= 0:
            cap[task], source[task] = own, "detected"
        elif env in det_env:
            cap[task], source[task] = det_env[env], "detected"
    return cap, source


def _task_detections(
    c: np.ndarray, ok: np.ndarray, n: np.ndarray, env_codes: np.ndarray,
    known: tuple[Mapping[int, int], Mapping[int, int], np.ndarray],
) -> np.ndarray:
    """Each task's own detected cap (-1: none), for tasks with enough episodes whose cap is
    corroborated: it is their environment's cap (detected, or written for all its tasks or for
    one), or the detected cap of another task there (one task piling up at one count may be a
    quirk of the task; a level cap recurs). ``known``: the environments' detected and written
    caps and the tasks' written caps."""
    det_env, data_env, data_task = known
    n_tasks = len(env_codes)
    sizes = np.bincount(c, minlength=n_tasks)
    tops = np.zeros(n_tasks, dtype=np.int64)
    np.maximum.at(tops, c, n)
    at_top = np.bincount(c[(n == tops[c]) & ~ok], minlength=n_tasks)
    order = np.argsort(c, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)])
    found = np.full(n_tasks, -1, dtype=np.int64)
    for task in np.flatnonzero((sizes >= MIN_TASK_EPISODES) & (at_top >= MIN_CAPPED)):
        rows = order[starts[task]:starts[task + 1]]
        found[task] = detect_cap(n[rows], ok[rows]) or -1
    pairs, counts = np.unique(np.stack([env_codes, found])[:, found >= 0], axis=1,
                              return_counts=True)
    corroborated = {(int(e), int(v)) for (e, v), k in zip(pairs.T, counts, strict=True)
                    if k >= 2}
    corroborated |= {(int(e), int(v)) for e, v in zip(env_codes, data_task, strict=True)
                     if v >= 0}
    corroborated |= {(e, v) for caps in (det_env, data_env) for e, v in caps.items()}
    keep = np.array([(int(e), int(v)) in corroborated for e, v in zip(env_codes, found,
                                                                       strict=True)], dtype=bool)
    return np.where(keep, found, -1)


@dataclass(frozen=True)
class _Rows:
    """The per-row arrays :func:`_run_caps` reads (one entry per trajectory)."""

    envs: np.ndarray = need("Each row's environment.")
    success: np.ndarray = need("Whether each row succeeded.")
    n_turns: np.ndarray = need("Each row's turns.")
    cap: np.ndarray = need("Each row's cap (NaN: none).")
    source: np.ndarray = need("Where each row's cap came from.")


def _run_caps(run: str, mine: np.ndarray, rows: _Rows) -> list[StepCap]:
    """The caps of one run (its rows: ``mine``): one for the whole run when its capped
    episodes share one cap and source, else one per environment, cap and source."""
    envs, success, n_turns = rows.envs, rows.success, rows.n_turns
    cap, source = rows.cap, rows.source
    has = mine & ~np.isnan(cap)
    failed = ~success
    reached = failed & (n_turns >= np.nan_to_num(cap, nan=np.inf))
    keys = sorted({(int(c), str(s)) for c, s in zip(cap[has], source[has], strict=True)})
    if len(keys) == 1:
        turns, src = keys[0]
        return [StepCap(run, turns, src, int((reached & has).sum()),
                        int((failed & mine).sum()))]
    out = []
    for env in sorted({str(e) for e in envs[has]}):
        in_env = mine & (envs == env)
        for turns, src in sorted({(int(c), str(s)) for c, s in
                                  zip(cap[in_env & has], source[in_env & has], strict=True)}):
            part = in_env & (cap == turns) & (source == src)
            out.append(StepCap(run, turns, src, int((reached & part).sum()),
                               int((failed & in_env).sum()), env))
    return out


def ended_by_budget(traj: pd.DataFrame) -> np.ndarray:
    """Whether each trajectory's turn limit ended it (censored), as a bool array.

    From ``end_reason`` when the frame has it; a frame without it (built by hand) gets the rule
    of :func:`recovery.schema.end_reason` applied row by row.
    """
    import numpy as np
    import pandas as pd

    if "end_reason" in traj:
        return (traj["end_reason"] == "budget").to_numpy(dtype=bool)
    from recovery.schema import end_reason

    success = traj["success"].astype("boolean").to_numpy(dtype=object, na_value=None)
    budget = pd.to_numeric(traj["budget"]).to_numpy(dtype=np.float64, na_value=np.nan) if (
        "budget" in traj) else np.full(len(traj), np.nan)
    n_turns = pd.to_numeric(traj["n_turns"]).to_numpy(dtype=np.int64)
    return np.array(
        [end_reason(s, int(n), None if np.isnan(b) else int(b)) == "budget"
         for s, n, b in zip(success, n_turns, budget, strict=True)],
        dtype=bool,
    )
