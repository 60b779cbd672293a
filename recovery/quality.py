"""Data-quality checks of a store's runs, in SQL: what to look at before trusting any number.

A report built on bad data looks like any other report: an agent whose actions are empty
strings gets most of its turns marked as ``repeat`` errors, and the decomposition splits a gain
that is an artefact of the logging. :func:`run_quality` measures, per run, what betrays such
data: empty actions, observations identical to the previous turn's, turns per trajectory,
samples per task, outcomes and end reasons (``success``, ``failure``, ``budget``, ``crash``,
``unknown``), turns marked as errors; :func:`quality_warnings` says, with the numbers, where a
share is extreme. ``recovery ingest`` prints :func:`summary_lines`; ``recovery analyze`` puts the
same records into its report.

Example:
    >>> from recovery.store import open_store
    >>> store = open_store(None); store.ingest_file("runs/base.jsonl"); con = store.con
    >>> quality = run_quality(con)
    >>> quality["base"].empty_action_share
    0.0
    >>> for line in summary_lines(quality): print(line)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from recovery.population import counted_sql, left_out_sql
from recovery.schema import END_REASONS

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True, slots=True)
class QualityThresholds:
    """Shares above which :func:`quality_warnings` warns.

    Attributes:
        empty_actions: Share of turns whose action is empty (or only white space).
        repeated_observations: Share of turns (after the first of a trajectory) whose
            observation is the previous turn's, character for character.
        unknown: Share of trajectories with an unknown outcome or end reason.
        crash: Share of trajectories whose harness crashed.
        budget_hit: Share of trajectories stopped by their turn limit.
        error_turns: Share of turns marked as errors.
        tasks_below_k: Share of a run's tasks with fewer samples than the largest K asked for.
    """

    empty_actions: float = 0.2
    repeated_observations: float = 0.5
    unknown: float = 0.05
    crash: float = 0.05
    budget_hit: float = 0.5
    error_turns: float = 0.5
    tasks_below_k: float = 0.2


@dataclass(slots=True)
class RunQuality:
    """Data-quality numbers of one run.

    Counts of turns cover every trajectory of the run; samples per task count the trajectories
    the analyses use (known outcome, no crash, known end reason), since those are what K draws
    from. A number that could not be measured (a report built from frames without the turn
    texts) is ``None``.

    Attributes:
        run: The run label.
        n_trajectories: Trajectories of the run, whatever their outcome.
        n_turns: Their turns.
        n_empty_actions: Turns whose action is empty or only white space.
        empty_action_share: ``n_empty_actions / n_turns``.
        n_repeated_observations: Turns whose observation equals the previous turn's.
        n_turns_with_previous: Turns that have a previous turn (all but each first).
        repeated_observation_share: ``n_repeated_observations / n_turns_with_previous``.
        turns_min: Fewest turns of a trajectory.
        turns_median: Median turns per trajectory.
        turns_mean: Mean turns per trajectory.
        turns_max: Most turns of a trajectory.
        n_tasks: Tasks with at least one trajectory the analyses use.
        samples_min: Fewest such trajectories of a task.
        samples_max: Most such trajectories of a task.
        samples_per_task: Samples -> number of tasks with that many.
        n_unknown_outcome: Trajectories without a known outcome (``success`` is null).
        n_unknown_end_reason: Trajectories whose end reason is ``unknown``.
        n_unknown: Trajectories with an unknown outcome or an unknown end reason (either).
        n_left_out: Trajectories every analysis leaves out (unknown outcome, crash, or
            unknown end reason).
        n_budget_hit: Trajectories stopped by their turn limit (end reason ``budget``).
        budget_hit_share: ``n_budget_hit / n_trajectories``.
        end_reasons: End reason -> trajectories, every reason of :data:`recovery.schema.END_REASONS`.
        budgets: The distinct known budgets of the run's trajectories.
        n_error_turns: Turns marked as errors.
        error_turn_share: ``n_error_turns / n_turns``.
        error_kinds: Error kind -> turns, most frequent first.
        tasks_below_k: K -> tasks with fewer than K samples (filled by a report, which knows
            its K grid; empty otherwise).
        empty_action_kinds: Error kind -> empty-action turns marked with it: what the
            environment said of them (e.g. ``invalid_action`` from its "no valid action"
            notice), so a warning can tell an agent that gave no action from a log that lost it.
        repeated_observation_kinds: Error kind -> turns whose observation repeated the previous
            one and that are marked with it.
        step_cap: The run's step cap, where it has one (filled by a report:
            :mod:`recovery.caps`); its unsuccessful episodes of that many turns are censored.
        step_cap_source: Where the caps came from: ``--max-turns``, ``data`` or ``detected``
            (comma-separated when they came from several).
        step_cap_note: The caps in words, with their sources and how many episodes end there
            (one per environment, cap and source when the run has several).
        step_cap_warning: One line when the run pools environments with different caps
            (``""`` otherwise).
    """

    run: str
    n_trajectories: int
    n_turns: int
    n_empty_actions: int | None
    empty_action_share: float | None
    n_repeated_observations: int | None
    n_turns_with_previous: int | None
    repeated_observation_share: float | None
    turns_min: int
    turns_median: float
    turns_mean: float
    turns_max: int
    n_tasks: int
    samples_min: int
    samples_max: int
    samples_per_task: dict[int, int] = field(default_factory=dict)
    n_unknown_outcome: int = 0
    n_unknown_end_reason: int = 0
    n_unknown: int = 0
    n_left_out: int = 0
    n_budget_hit: int = 0
    budget_hit_share: float = math.nan
    end_reasons: dict[str, int] = field(default_factory=dict)
    budgets: list[int] = field(default_factory=list)
    n_error_turns: int = 0
    error_turn_share: float = math.nan
    error_kinds: dict[str, int] = field(default_factory=dict)
    tasks_below_k: dict[int, int] = field(default_factory=dict)
    empty_action_kinds: dict[str, int] = field(default_factory=dict)
    repeated_observation_kinds: dict[str, int] = field(default_factory=dict)
    step_cap: int | None = None
    step_cap_source: str | None = None
    step_cap_note: str = ""
    step_cap_warning: str = ""


def _share(part: int | None, whole: int) -> float | None:
    if part is None:
        return None
    return part / whole if whole else math.nan


def _run_filter(runs: Sequence[str] | None, column: str = "run") -> tuple[str, list[object]]:
    if not runs:
        return "TRUE", []
    return f"{column} IN ({', '.join('?' for _ in runs)})", list(runs)


def run_quality(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None,
    traj_ids: Sequence[str] | None = None,
) -> dict[str, RunQuality]:
    """The data-quality numbers of each run of the store, computed in SQL.

    Args:
        con: The store.
        runs: Runs to check; ``None`` or empty = every run.
        traj_ids: Only these trajectories (a selection such as ``--where`` or a group);
            ``None`` = every trajectory of the runs.

    Returns:
        Run label -> :class:`RunQuality`, alphabetically; runs without trajectories are absent.
    """
    from recovery.scope import traj_scope

    with traj_scope(con, traj_ids) as scope, \
            traj_scope(con, traj_ids, "tr.traj_id") as tr_scope:
        where, params = _run_filter(runs)
        tr_where, _ = _run_filter(runs, "tr.run")
        return _run_quality(con, f"({where}) AND {scope}", f"({tr_where}) AND {tr_scope}",
                            params)


def _run_quality(
    con: duckdb.DuckDBPyConnection, where: str, tr_where: str, params: list[Any],
) -> dict[str, RunQuality]:
    """The data-quality numbers of each run, read from the store.

    Long because it is a row of SQL aggregates (trajectory heads, end reasons, samples per
    task, turn shares), each read straight into the fields of the runs' RunQuality records;
    side by side they show which query fills which field.
    """
    heads = con.execute(
        f"""
        SELECT run, count(*), coalesce(sum(n_turns), 0), min(n_turns),
               median(n_turns)::DOUBLE, avg(n_turns)::DOUBLE, max(n_turns),
               count(*) FILTER (WHERE success IS NULL),
               count(*) FILTER (WHERE end_reason = 'unknown'),
               count(*) FILTER (WHERE success IS NULL OR end_reason = 'unknown'),
               count(*) FILTER (WHERE {left_out_sql()}),
               list(DISTINCT budget ORDER BY budget) FILTER (WHERE budget IS NOT NULL)
        FROM trajectories WHERE {where} GROUP BY run ORDER BY run
        """,
        params,
    ).fetchall()
    reasons: dict[str, dict[str, int]] = {}
    for run, reason, n in con.execute(
        f"SELECT run, end_reason, count(*) FROM trajectories WHERE {where} "
        "GROUP BY run, end_reason",
        params,
    ).fetchall():
        reasons.setdefault(run, {})[str(reason)] = int(n)
    samples: dict[str, dict[int, int]] = {}
    for run, n_samples, n_tasks in con.execute(
        f"""
        SELECT run, n, count(*) FROM (
            SELECT run, task_id, count(*) AS n FROM trajectories
            WHERE {counted_sql()} AND {where}
            GROUP BY run, task_id)
        GROUP BY run, n ORDER BY run, n
        """,
        params,
    ).fetchall():
        samples.setdefault(run, {})[int(n_samples)] = int(n_tasks)
    turn_stats, kinds, empty_kinds, repeated_kinds = _turn_counts(
        con, tr_where, params, sum(int(row[2]) for row in heads))

    out: dict[str, RunQuality] = {}
    for (run, n_traj, n_turns, t_min, t_median, t_mean, t_max, n_unknown, n_unknown_end,
         n_either, n_left_out, budgets) in heads:
        n_traj, n_turns = int(n_traj), int(n_turns)
        empty, n_with_previous, repeated, n_errors = turn_stats.get(run, (0, 0, 0, 0))
        by_reason = reasons.get(run, {})
        per_task = samples.get(run, {})
        n_budget = by_reason.get("budget", 0)
        out[str(run)] = RunQuality(
            run=str(run),
            n_trajectories=n_traj,
            n_turns=n_turns,
            n_empty_actions=int(empty),
            empty_action_share=_share(int(empty), n_turns),
            n_repeated_observations=int(repeated),
            n_turns_with_previous=int(n_with_previous),
            repeated_observation_share=_share(int(repeated), int(n_with_previous)),
            turns_min=int(t_min),
            turns_median=float(t_median),
            turns_mean=float(t_mean),
            turns_max=int(t_max),
            n_tasks=sum(per_task.values()),
            samples_min=min(per_task, default=0),
            samples_max=max(per_task, default=0),
            samples_per_task=per_task,
            n_unknown_outcome=int(n_unknown),
            n_unknown_end_reason=int(n_unknown_end),
            n_unknown=int(n_either),
            n_left_out=int(n_left_out),
            n_budget_hit=n_budget,
            budget_hit_share=n_budget / n_traj if n_traj else math.nan,
            end_reasons=ordered_reasons(by_reason),
            budgets=[int(b) for b in budgets or []],
            n_error_turns=int(n_errors),
            error_turn_share=int(n_errors) / n_turns if n_turns else math.nan,
            error_kinds=kinds.get(run, {}),
            empty_action_kinds=_most_first(empty_kinds.get(run, {})),
            repeated_observation_kinds=_most_first(repeated_kinds.get(run, {})),
        )
    return out


def _turn_counts(
    con: duckdb.DuckDBPyConnection, tr_where: str, params: list[Any], n_turns: int,
) -> tuple[dict[str, list[int]], dict[str, dict[str, int]], dict[str, dict[str, int]],
           dict[str, dict[str, int]]]:
    """Per run: ``[empty actions, turns with a previous, repeated observations, error
    turns]``, then the error kinds of the error turns, of the empty actions and of the
    repeats (marked turns only; most first).

    One pass over narrow rows, in shards on a large store (:mod:`recovery.quality_turns`).
    """
    from recovery.quality_turns import shard_count, turn_counts

    stats: dict[str, list[int]] = {}
    error_kinds: dict[str, dict[str, int]] = {}
    empty_kinds: dict[str, dict[str, int]] = {}
    repeated_kinds: dict[str, dict[str, int]] = {}
    for (run, kind), counts in turn_counts(con, tr_where, params, shard_count(n_turns)).items():
        totals = stats.setdefault(run, [0, 0, 0, 0])
        for i, n in enumerate(counts):
            totals[i] += n
        if kind is None:
            continue
        empty, _, repeated, errors = counts
        # a kind is only ever given to an error turn: its empty actions and repeats
        for into, n in ((error_kinds, errors), (empty_kinds, empty), (repeated_kinds, repeated)):
            if n:
                into.setdefault(run, {})[kind] = n
    return stats, {run: _most_first(k) for run, k in error_kinds.items()}, empty_kinds, \
        repeated_kinds


def _most_first(counts: dict[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def ordered_reasons(counts: dict[str, int]) -> dict[str, int]:
    """Every end reason of :data:`recovery.schema.END_REASONS` (0 when absent), then any other reason."""
    out = {reason: int(counts.get(reason, 0)) for reason in END_REASONS}
    out.update({k: int(v) for k, v in sorted(counts.items()) if k not in out})
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{100 * value:.1f}%"


def _marked_majority(kinds: dict[str, int], total: int | None) -> tuple[str, int] | None:
    """The most common error kind among some turns, when the marked ones are most of them."""
    marked = sum(kinds.values())
    if not total or marked * 2 < total or not kinds:
        return None
    return next(iter(kinds.items()))


def _empty_actions_warning(name: str, q: RunQuality) -> str:
    """Say what the data shows: empty actions the environment answered with an error notice
    are the agent's failure, not the log's."""
    counts = f"{q.n_empty_actions} of {q.n_turns} turns"
    # `repeat` compares actions, which is what is in doubt here: only marks that come from
    # what the environment answered count as its word
    answered = {k: n for k, n in q.empty_action_kinds.items() if k != "repeat"}
    top = _marked_majority(answered, q.n_empty_actions)
    if top is not None:
        marked = sum(answered.values())
        return (f"{name}: the agent gave no valid action on {_pct(q.empty_action_share)} of "
                f"turns ({counts}; {marked} of them marked as errors by what the environment "
                f"answered, most {top[0]}): the environment answered, the agent failed")
    return (f"{name}: {_pct(q.empty_action_share)} of actions are empty ({counts}) and the "
            "environment's answers mark few of them as errors; the log may have lost the "
            "actions, and error marks that compare actions (repeat) and everything built on "
            "them would then describe the logging, not the agent")


def _repeated_observations_warning(name: str, q: RunQuality) -> str:
    """Repeated observations that are marked errors are an agent stuck on an error, not an
    environment that stopped answering."""
    share = _pct(q.repeated_observation_share)
    top = _marked_majority(q.repeated_observation_kinds, q.n_repeated_observations)
    if top is not None:
        return (f"{name}: {share} of turns got the same observation as the turn before "
                f"({q.n_repeated_observations} turns), most of them error turns ({top[0]}): "
                "the agent repeated a failing step and the environment gave the same answer")
    return (f"{name}: {share} of turns got the same observation as the turn before "
            f"({q.n_repeated_observations} turns) and few of them are marked as errors; the "
            "environment may not be answering the actions")


def quality_warnings(
    quality: RunQuality, thresholds: QualityThresholds | None = None
) -> list[str]:
    """Plain-language warnings, with the numbers, for each extreme share of one run.

    Args:
        quality: The run's numbers.
        thresholds: Where a share counts as extreme; defaults when ``None``.

    Returns:
        One sentence per finding (empty when nothing is extreme).
    """
    th = thresholds or QualityThresholds()
    q = quality
    out: list[str] = []
    name = f"run {q.run}"
    if q.empty_action_share is not None and q.empty_action_share > th.empty_actions:
        out.append(_empty_actions_warning(name, q))
    if (q.repeated_observation_share is not None
            and q.repeated_observation_share > th.repeated_observations):
        out.append(_repeated_observations_warning(name, q))
    if q.n_turns and q.error_turn_share > th.error_turns:
        top = next(iter(q.error_kinds.items()), None)
        kind = (f"; most are {top[0]} ({_pct(top[1] / q.n_turns)} of turns)" if top else "")
        out.append(
            f"{name}: {_pct(q.error_turn_share)} of turns are marked as errors "
            f"({q.n_error_turns} of {q.n_turns}{kind}); check the error rules before reading "
            "the decomposition"
        )
    unknown = max(q.n_unknown, q.n_unknown_outcome, q.n_unknown_end_reason)
    if q.n_trajectories and unknown / q.n_trajectories > th.unknown:
        out.append(
            f"{name}: {unknown} of {q.n_trajectories} trajectories "
            f"({_pct(unknown / q.n_trajectories)}) have an unknown outcome or end reason and "
            "are left out of every number"
        )
    crashed = q.end_reasons.get("crash", 0)
    if q.n_trajectories and crashed / q.n_trajectories > th.crash:
        out.append(
            f"{name}: {crashed} of {q.n_trajectories} trajectories "
            f"({_pct(crashed / q.n_trajectories)}) crashed and are left out of every number"
        )
    if q.n_trajectories and q.budget_hit_share > th.budget_hit:
        out.append(
            f"{name}: {q.n_budget_hit} of {q.n_trajectories} trajectories "
            f"({_pct(q.budget_hit_share)}) stopped at their turn limit; success with no limit "
            "is only success within that limit"
        )
    if q.n_trajectories and q.turns_max <= 1:
        out.append(
            f"{name}: every trajectory has a single turn; there is no multi-turn behaviour "
            "to mark errors and recoveries in"
        )
    if q.step_cap_warning:
        out.append(q.step_cap_warning)
    if q.n_tasks:
        for k, n in sorted(q.tasks_below_k.items()):
            if n / q.n_tasks > th.tasks_below_k:
                out.append(
                    f"{name}: {n} of {q.n_tasks} tasks ({_pct(n / q.n_tasks)}) have fewer than "
                    f"K={k} samples and are left out of Pass@({k},T)"
                )
    return out


def summary_lines(
    quality: dict[str, RunQuality], thresholds: QualityThresholds | None = None
) -> list[str]:
    """What ``recovery ingest`` prints: one data-quality line over the runs, then a warning
    line per extreme share.

    Args:
        quality: :func:`run_quality` of the store.
        thresholds: Where a share counts as extreme.

    Returns:
        The lines (none for an empty store).
    """
    if not quality:
        return []
    runs = list(quality.values())
    n_traj = sum(q.n_trajectories for q in runs)
    n_turns = sum(q.n_turns for q in runs)
    empty = sum(q.n_empty_actions or 0 for q in runs)
    with_previous = sum(q.n_turns_with_previous or 0 for q in runs)
    repeated = sum(q.n_repeated_observations or 0 for q in runs)
    reasons: dict[str, int] = {}
    for q in runs:
        for reason, n in q.end_reasons.items():
            reasons[reason] = reasons.get(reason, 0) + n
    reason_text = ", ".join(f"{k} {v}" for k, v in reasons.items() if v) or "none"
    lo = min(q.turns_min for q in runs)
    hi = max(q.turns_max for q in runs)
    s_lo = min(q.samples_min for q in runs)
    s_hi = max(q.samples_max for q in runs)
    samples = str(s_hi) if s_lo == s_hi else f"{s_lo}-{s_hi}"
    line = (
        f"data quality: {len(runs)} run{'s' if len(runs) != 1 else ''}; "
        f"{n_turns / n_traj if n_traj else 0:.1f} turns per trajectory ({lo}-{hi}); "
        f"samples per task {samples}; empty actions {_pct(_share(empty, n_turns))}; "
        f"observation same as the turn before {_pct(_share(repeated, with_previous))}; "
        f"end reasons: {reason_text}"
    )
    lines = [line]
    for q in runs:
        lines.extend(f"warning: {w}" for w in quality_warnings(q, thresholds))
    return lines
