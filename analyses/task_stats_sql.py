"""The SQL of the per-task sufficient statistics (:mod:`analyses.task_stats`): one query over
``trajectories`` and one over ``turns``, each a ``GROUP BY run, task_id, budget, stat, x``
that DuckDB streams, so only the grouped rows reach Python.

Each query answers rows ``run, task_id, budget, stat, x, n``: ``n`` trajectories (or error
spells) of the task that add one to statistic ``stat`` (a code into :data:`STATISTICS`) at
index ``x``. Which trajectories count, their last counted turn and which marked turns belong to
a spell are the toolkit's one rules (:func:`recovery.population.counted_sql`,
:func:`recovery.marking.spells.last_counted_turn_sql` and
:func:`~recovery.marking.spells.in_spell_sql`).

The hazard statistics are histograms, not turns: a trajectory adds its number of clean turns
(and, where its last turn is clean, how it ended there), an error spell its length and the clean
turns before it (and, where the episode ended inside it, how). Every count of
:func:`analyses.hazards.event_counts` is a sum of these (:mod:`analyses.task_stats_measures`),
so the turns query reads only the error turns: O(trajectories + spells) rows, not O(turns).
"""

from __future__ import annotations

from collections.abc import Sequence

from recovery.marking.spells import in_spell_sql, last_counted_turn_sql
from recovery.population import counted_sql

STATISTICS = (
    # by turn t (the trajectories query)
    "ended",              # trajectories whose last counted turn is t (their sum: samples n_i)
    "won",                # successes whose success turn is t (cumulated: c_i(T))
    # by turn t (the turns query)
    "first_error",        # trajectories whose first error spell starts at turn t
    "won_after_error",    # successes at turn t that had an error spell before
    # by clean turns n
    "clean_turns",        # trajectories with at least one turn, by their clean turns
    "clean_end_success",  # ... whose last turn is clean and ended in success
    "clean_end_failure",  # ... in failure
    "clean_end_budget",   # ... by the budget (censored)
    "spell_starts",       # error spells, by the clean turns before their first turn
    # by spell length d
    "spells",             # error spells, by their length (error turns)
    "spell_end_failure",  # ... still open at the episode's last turn, which failed
    "spell_end_budget",   # ... which the budget ended (censored)
)
"""The statistics, in the order of their codes."""

CODE = {name: code for code, name in enumerate(STATISTICS)}

SUCCESS, FAILURE, BUDGET = 1, 2, 3
"""How a trajectory ended, as the SQL's ``kind`` codes it."""

NO_BUDGET = -1
"""The ``budget`` key of every cell in truncation mode (budgets pooled), and of a trajectory
of unknown budget in budgeted mode."""


def _trajectories_cte(runs: Sequence[str] | None, with_caps: bool, by_budget: bool,
                      scope: str) -> str:
    """One row per counted trajectory: its keys, a number ``id`` (1, 2, ... in this query),
    last counted turn ``last_t`` and ``kind``.

    With caps, a failure of at least its task's cap of turns ends by the budget, as
    :func:`recovery.caps.capped_frame` moves it; the caps come as three list parameters.
    """
    run_filter = f"run IN ({', '.join('?' for _ in runs)})" if runs else "TRUE"
    budget = "coalesce(budget, -1)" if by_budget else str(NO_BUDGET)
    capped = " OR (end_reason = 'failure' AND n_turns >= caps.cap)" if with_caps else ""
    join = ("LEFT JOIN (SELECT unnest(?::VARCHAR[]) AS cap_run, "
            "unnest(?::VARCHAR[]) AS cap_task, unnest(?::BIGINT[]) AS cap) caps "
            "ON run = caps.cap_run AND CAST(task_id AS VARCHAR) = caps.cap_task"
            if with_caps else "")
    last_t = last_counted_turn_sql("success", "success_turn", "n_turns")
    return f"""
        SELECT traj_id, row_number() OVER () AS id, run, CAST(task_id AS VARCHAR) AS task_id,
               {budget}::BIGINT AS budget,
               success, success_turn, n_turns, {last_t}::BIGINT AS last_t,
               CASE WHEN success THEN {SUCCESS}
                    WHEN end_reason = 'budget'{capped} THEN {BUDGET}
                    ELSE {FAILURE} END AS kind
        FROM trajectories {join}
        WHERE {counted_sql()} AND {run_filter} AND {scope}"""


def trajectories_sql(runs: Sequence[str] | None, with_caps: bool, by_budget: bool,
                     scope: str = "TRUE") -> str:
    """The query over ``trajectories``: ``ended`` and ``won`` by turn.

    Parameters, in order: the three cap lists (with caps), then the runs. ``scope``: a
    condition on ``traj_id`` that keeps some trajectories
    (:func:`recovery.scope.traj_scope`).
    """
    return f"""
        WITH tr AS ({_trajectories_cte(runs, with_caps, by_budget, scope)})
        SELECT run, task_id, budget, stat, x, count(*) AS n
        FROM (SELECT run, task_id, budget,
                     unnest([{CODE['ended']}, {CODE['won']}]) AS stat,
                     unnest([last_t, CASE WHEN kind = {SUCCESS} THEN last_t END]) AS x
              FROM tr)
        WHERE x IS NOT NULL
        GROUP BY run, task_id, budget, stat, x"""


def turns_sql(runs: Sequence[str] | None, with_caps: bool, by_budget: bool,
              scope: str = "TRUE") -> str:
    """The query over ``turns``: the error and hazard statistics.

    Spells are islands of consecutive counted error turns: ``t - row_number()`` is constant
    along one, and equals the clean turns before it. Past the join with the turns a trajectory
    is its number ``id``, not its id string: the error turns' rows, sorted for the window and
    grouped, stay narrow (at 100M turns the id strings took about a GB). Parameters as
    :func:`trajectories_sql`.
    """
    counted = in_spell_sql("u.t", "tr.success", "tr.success_turn", "tr.n_turns")
    clean_end = f"{CODE['clean_end_success']} + tr.kind - {SUCCESS}"
    spell_end = f"{CODE['spell_end_failure']} + tr.kind - {FAILURE}"
    return f"""
        WITH tr AS MATERIALIZED ({_trajectories_cte(runs, with_caps, by_budget, scope)}),
        err AS (
            SELECT DISTINCT tr.id, u.t FROM turns u JOIN tr ON u.traj_id = tr.traj_id
            WHERE u.is_error AND {counted}),
        spells AS (
            SELECT id, n_before, min(t) AS start_t, max(t) AS end_t, count(*) AS len
            FROM (SELECT id, t, t - row_number() OVER (PARTITION BY id ORDER BY t) AS n_before
                  FROM err)
            GROUP BY id, n_before),
        errs AS (
            SELECT id, sum(len) AS n_err, max(end_t) AS last_err, min(start_t) AS first_err
            FROM spells GROUP BY id),
        cells AS (
            SELECT tr.run, tr.task_id, tr.budget,
                   unnest([{CODE['clean_turns']}, {clean_end}, {CODE['first_error']},
                           {CODE['won_after_error']}]) AS stat,
                   unnest([tr.last_t - coalesce(e.n_err, 0),
                           CASE WHEN coalesce(e.last_err, 0) < tr.last_t
                                THEN tr.last_t - coalesce(e.n_err, 0) END,
                           e.first_err,
                           CASE WHEN tr.kind = {SUCCESS} AND e.n_err > 0
                                THEN tr.last_t END]) AS x
            FROM tr LEFT JOIN errs e ON e.id = tr.id
            WHERE tr.last_t >= 1
            UNION ALL
            SELECT tr.run, tr.task_id, tr.budget,
                   unnest([{CODE['spells']}, {CODE['spell_starts']}, {spell_end}]) AS stat,
                   unnest([s.len, s.n_before,
                           CASE WHEN s.end_t = tr.last_t THEN s.len END]) AS x
            FROM spells s JOIN tr ON s.id = tr.id)
        SELECT run, task_id, budget, stat, x, count(*) AS n
        FROM cells WHERE x IS NOT NULL
        GROUP BY run, task_id, budget, stat, x"""
