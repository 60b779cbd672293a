"""The SQL text of the store's tables, views and macros (no logic: read by the schema code in
:mod:`recovery.store.ddl` and by the catalog check in :mod:`recovery.store.catalog`)."""

from __future__ import annotations

from recovery.population import counted_sql
from recovery.schema import success_turn_sql
from recovery.store.columns import table_ddl

TABLES_DDL = table_ddl()
"""Every table of the store (from the column registry, :mod:`recovery.store.columns`)."""

COUNTED = counted_sql()
"""The trajectories every view counts, by the one rule (:mod:`recovery.population`) that every
analysis applies too (``analyses.frames``): a known outcome, and an end that is neither a
crash of the harness nor of unknown reason."""

VIEWS_DDL = """
-- One score per scored turn and model: duplicate rows of step_scores (a turn scored twice by
-- the same model) are averaged, a second estimate of the same probability. Marking (prm
-- errors) and BudgetMix's shaped rewards both read this view.
CREATE OR REPLACE VIEW step_score_means AS
SELECT traj_id, t, model, avg(score) AS score, count(*) AS n_scores
FROM step_scores
GROUP BY traj_id, t, model;

-- task_outcomes and recovery_stats count what every number of the toolkit counts: episodes
-- with a known outcome that did not crash (a crash is the harness's failure, not the agent's;
-- analyses.frames leaves out the same ones; in recovery_stats its columns are trajectories',
-- error_spells has none of those names).
CREATE OR REPLACE VIEW task_outcomes AS
SELECT run, task_id, budget,
       count(*)                          AS n_samples,
       count(*) FILTER (WHERE success)   AS n_success,
       avg(success::INTEGER)             AS success_rate,
       avg(n_turns)                      AS mean_turns
FROM trajectories
WHERE {COUNTED}
GROUP BY run, task_id, budget;

CREATE OR REPLACE VIEW recovery_stats AS
SELECT tr.run,
       count(DISTINCT tr.traj_id)                              AS n_trajectories,
       count(s.traj_id)                                        AS n_spells,
       count(s.traj_id) FILTER (WHERE s.recovered)             AS n_recovered,
       count(s.traj_id) FILTER (WHERE s.fatal)                 AS n_fatal,
       avg(s.recovered::INTEGER)                               AS recovery_rate,
       avg(s.latency) FILTER (WHERE s.recovered)               AS mean_latency
FROM trajectories tr LEFT JOIN error_spells s USING (traj_id)
WHERE {COUNTED}
GROUP BY tr.run;

-- One task's pass@k and pass^k from its n samples of which c succeeded: the unbiased
-- estimators 1 - C(n - c, k) / C(n, k) and C(c, k) / C(n, k) in the product form
-- prod(1 - k/j), which stays exact where the binomials would overflow (the same formula as
-- analyses.passkt.pass_at_k). Every Pass@(K,T) view and macro below averages them over tasks.
CREATE OR REPLACE MACRO pass_at_k(n, c, k) AS
    CASE WHEN n - c < k THEN 1.0
         ELSE 1.0 - coalesce(list_product(list_transform(
             range(n - c + 1, n + 1), lambda j: 1.0 - k / j)), 1.0) END;

CREATE OR REPLACE MACRO pass_hat_k(n, c, k) AS
    CASE WHEN c < k THEN 0.0
         ELSE coalesce(list_product(list_transform(
             range(c + 1, n + 1), lambda j: 1.0 - k / j)), 1.0) END;

-- Pass@(K,T) and pass^(K,T) in truncation mode; the SQL face of analyses.passkt,
-- which adds budgeted mode and bootstrap intervals. Per (run, task): n = trajectories with a
-- known outcome that did not crash (nor end for an unknown reason), whatever their budget; c = those that succeeded by turn t (a success without
-- success_turn succeeds at its last turn). t takes every distinct success turn of the run (the
-- only turns where the surface can change: between two listed t it keeps the lower one's
-- value) and NULL = no turn limit. k runs from 1 to the most samples a task of the run has;
-- tasks with n < k are left out of value and counted in n_tasks_left_out. The ratios use the
-- product form C(n - a, k) / C(n, k) = prod(1 - k/j, j = a+1..n).
CREATE OR REPLACE VIEW pass_kt_task_counts AS
WITH outcomes AS (
    SELECT run, task_id,
           {WON_AT} AS won_at
    FROM trajectories
    WHERE {COUNTED}
),
limits AS (
    SELECT DISTINCT run, won_at AS t FROM outcomes WHERE won_at IS NOT NULL
    UNION ALL
    SELECT DISTINCT run, NULL::INTEGER AS t FROM outcomes
)
SELECT o.run, o.task_id, l.t,
       count(*)                                                   AS n,
       count(*) FILTER (WHERE o.won_at <= coalesce(l.t, o.won_at)) AS c
FROM outcomes o JOIN limits l USING (run)
GROUP BY o.run, o.task_id, l.t;

CREATE OR REPLACE VIEW pass_at_kt AS
WITH widths AS (
    SELECT run, unnest(range(1, max(n) + 1)) AS k FROM pass_kt_task_counts GROUP BY run
)
SELECT w.run, w.k, p.t,
       avg(pass_at_k(p.n, p.c, w.k)) FILTER (WHERE p.n >= w.k)     AS value,
       count(*) FILTER (WHERE p.n >= w.k)                          AS n_tasks,
       count(*) FILTER (WHERE p.n < w.k)                           AS n_tasks_left_out
FROM widths w JOIN pass_kt_task_counts p USING (run)
GROUP BY w.run, w.k, p.t;

CREATE OR REPLACE VIEW pass_hat_kt AS
WITH widths AS (
    SELECT run, unnest(range(1, max(n) + 1)) AS k FROM pass_kt_task_counts GROUP BY run
)
SELECT w.run, w.k, p.t,
       avg(pass_hat_k(p.n, p.c, w.k)) FILTER (WHERE p.n >= w.k)    AS value,
       count(*) FILTER (WHERE p.n >= w.k)                          AS n_tasks,
       count(*) FILTER (WHERE p.n < w.k)                           AS n_tasks_left_out
FROM widths w JOIN pass_kt_task_counts p USING (run)
GROUP BY w.run, w.k, p.t;

-- Pass@(K,T) and pass^(K,T) at any turn limit T, for every run and every k from 1 to the most
-- samples a task of the run has: SELECT * FROM pass_at_kt_at(10) (NULL = no limit). The same
-- numbers as the views above where their grid has T, and a row for every run at every T.
-- pass_kt_task_counts_at(T) gives their per-task counts n and c: sums over trajectories, so
-- counts computed on parts of a store add up to the whole store's; pass_kt_values_at(T) gives
-- both values side by side, and the two macros select from it.
CREATE OR REPLACE MACRO pass_kt_task_counts_at(t_limit) AS TABLE
SELECT run, task_id, count(*) AS n,
       count(*) FILTER (WHERE won_at <= coalesce(t_limit, won_at)) AS c
FROM (SELECT run, task_id, {WON_AT} AS won_at FROM trajectories
      WHERE {COUNTED})
GROUP BY run, task_id;

CREATE OR REPLACE MACRO pass_kt_values_at(t_limit) AS TABLE
WITH counts AS (SELECT * FROM pass_kt_task_counts_at(t_limit)),
widths AS (SELECT run, unnest(range(1, max(n) + 1)) AS k FROM counts GROUP BY run)
SELECT w.run, w.k, t_limit::INTEGER AS t,
       avg(pass_at_k(p.n, p.c, w.k)) FILTER (WHERE p.n >= w.k)     AS pass_at,
       avg(pass_hat_k(p.n, p.c, w.k)) FILTER (WHERE p.n >= w.k)    AS pass_hat,
       count(*) FILTER (WHERE p.n >= w.k)                          AS n_tasks,
       count(*) FILTER (WHERE p.n < w.k)                           AS n_tasks_left_out
FROM widths w JOIN counts p USING (run)
GROUP BY ALL;

CREATE OR REPLACE MACRO pass_at_kt_at(t_limit) AS TABLE
SELECT run, k, t, pass_at AS value, n_tasks, n_tasks_left_out
FROM pass_kt_values_at(t_limit) ORDER BY run, k;

CREATE OR REPLACE MACRO pass_hat_kt_at(t_limit) AS TABLE
SELECT run, k, t, pass_hat AS value, n_tasks, n_tasks_left_out
FROM pass_kt_values_at(t_limit) ORDER BY run, k;
""".replace(
    "{WON_AT}", success_turn_sql("success", "n_turns", "success_turn")
).replace("{COUNTED}", COUNTED)

