"""Shaped per-turn rewards of a store's trajectories, from a PRM's ``step_scores``: the library
face of ``recovery budgetmix rewards``.

The formula is :func:`analyses.budgetmix.shaping.shape_rewards`; the offsets are
:func:`analyses.budgetmix.alignment.render_offsets`. Rows are keyed by ``(traj_id, t)`` and join
the store's ``turns`` one to one.

Duplicate scores: when ``step_scores`` holds several rows for one ``(traj_id, t, model)``,
their mean is the turn's score (the store's ``step_score_means`` view): a duplicate is a second estimate of
the same probability, and the mean does not move with the number of copies.

The outcome ``R`` is the episode's success as 1/0: the store's ``success``, made at ingest by
the one rule (:func:`recovery.schema.derive_success`: the record's flag wins over its reward,
else ``reward >= threshold``), the same column analyze and the PRM's ``outcome`` targets read.
A graded reward does not pass through. The exported episodes are those every analysis counts
(:mod:`recovery.population`): an unknown outcome or end, and a crash (the harness's failure, not
the agent's), are left out of the file and counted, never given ``R = 0`` as failures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analyses.budgetmix.alignment import render_offsets
from analyses.budgetmix.shaping import DEFAULT_INITIAL_POTENTIAL, ShapingOptions, shape_rewards
from recovery.config import CheckedOptions, opt
from recovery.errors import InputProblem, UsageProblem
from recovery.outputs import atomic_output, check_output_path
from recovery.population import counted_sql

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

REWARD_LAYOUTS = ("turns", "trajectories")
"""Shapes of a rewards file: one row per turn, or one row per trajectory with lists."""

REWARD_COLUMNS = (
    "traj_id", "t", "run", "task_id", "sample", "budget", "n_turns", "is_last", "score",
    "potential_before", "potential_after", "outcome", "shaping", "reward", "action_chars",
    "observation_chars", "action_start", "action_end", "observation_start", "observation_end",
)
"""Columns of a rewards file in the ``turns`` layout, in order."""

_LIST_COLUMNS = ("score", "potential_before", "potential_after", "outcome", "shaping", "reward",
                 "action_start", "action_end", "observation_start", "observation_end")


@dataclass
class RewardsConfig(CheckedOptions):
    """Options of ``recovery budgetmix rewards`` (and of :func:`export_rewards`)."""

    store: Path | None = opt(None, "Store (DuckDB file or Parquet folder) with step_scores (prm score).", required=True)
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
        choices=REWARD_LAYOUTS,
    )
    skip_unscored: bool = opt(
        False, "Leave out trajectories with a turn the model did not score (else an error)."
    )


@dataclass(slots=True)
class RewardsExport:
    """What :func:`export_shaped_rewards` wrote.

    Attributes:
        path: The file.
        model: PRM name in ``step_scores``.
        n_trajectories: Trajectories written.
        n_turns: Turns written.
        n_unscored: Trajectories left out because a turn had no score (``skip_unscored``).
        n_unknown_outcome: Trajectories left out because their outcome (neither flag nor
            reward) or their end is unknown.
        initial_potential: ``phi(s_1)`` used.
        n_crashed: Trajectories left out because the harness crashed.
    """

    path: Path
    model: str
    n_trajectories: int
    n_turns: int
    n_unscored: int
    n_unknown_outcome: int
    initial_potential: float
    n_crashed: int = 0

    def summary(self) -> str:
        """One line saying what was written and what was left out."""
        line = (f"{self.path}: {self.n_turns} turns of {self.n_trajectories} trajectories "
                f"(model {self.model!r}, phi(s_1) = {self.initial_potential:.4g})")
        if self.n_unscored:
            line += f"; {self.n_unscored} trajectories with unscored turns left out"
        if self.n_unknown_outcome:
            line += f"; {self.n_unknown_outcome} with an unknown outcome left out"
        if self.n_crashed:
            line += f"; {self.n_crashed} crashed left out"
        return line


@dataclass(frozen=True)
class ShapedRewardOptions:
    """How the shaped rewards are computed and laid out."""

    lam: float = field(default=1.0, metadata={"help": "Shaping weight lambda."})
    gamma: float = field(default=1.0, metadata={"help": "Discount of the shaping term."})
    initial_potential: float | str = field(default=DEFAULT_INITIAL_POTENTIAL, metadata={
        "help": "phi(s_1): a number, or 'mean' for the mean score of the exported turns."})
    runs: Sequence[str] | None = field(default=None, metadata={
        "help": "Runs to export; None = all."})
    skip_unscored: bool = field(default=False, metadata={
        "help": "Leave out trajectories with an unscored turn (else it is an error)."})
    layout: str = field(default="turns", metadata={
        "help": "turns (a row per turn) or trajectories (a row per trajectory, lists)."})


def shaped_rewards_frame(
    con: duckdb.DuckDBPyConnection,
    model: str,
    options: ShapedRewardOptions = ShapedRewardOptions(),
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Shaped per-turn rewards of the store's trajectories from PRM ``model``'s scores.

    The outcome ``R`` is the trajectory's ``success`` as 1/0 (see the module's docstring);
    trajectories every analysis leaves out (unknown outcome or end, crash) are left out here
    too and counted.

    Long because most of it is one SQL text (the turns with their PRM scores and episode
    outcomes) and the counts of what it left out.

    Args:
        con: The store, with ``step_scores`` rows of ``model``.
        model: PRM name in ``step_scores`` (``prm score`` uses the model directory's name).
        options: The shaping (``layout`` is not used here).

    Returns:
        The frame (columns :data:`REWARD_COLUMNS`, ordered by ``traj_id, t``) and counts
        ``n_unscored``, ``n_unknown_outcome``, ``n_crashed``, ``initial_potential``.

    Raises:
        InputProblem: when the store has no scores of the model, or a turn is unscored and not
            ``skip_unscored``.
        UsageProblem: for an ``initial_potential`` that is neither a number nor ``"mean"``.
    """
    lam, gamma, runs = options.lam, options.gamma, options.runs
    skip_unscored, initial_potential = options.skip_unscored, options.initial_potential
    if not con.execute("SELECT 1 FROM step_scores WHERE model = ? LIMIT 1", [model]).fetchone():
        known = [r[0] for r in con.execute(
            "SELECT DISTINCT model FROM step_scores ORDER BY 1").fetchall()]
        raise InputProblem(
            f"no step_scores for model {model!r} (models: {', '.join(known) or 'none'}); "
            "run `prm score` first"
        )
    params: list[Any] = [model]
    run_filter = "TRUE"
    if runs:
        run_filter = f"tr.run IN ({', '.join('?' for _ in runs)})"
        params.extend(runs)
    frame = con.execute(
        f"""
        WITH scores AS (
            SELECT traj_id, t, score FROM step_score_means WHERE model = ?
        ),
        chosen AS (
            SELECT traj_id, run, task_id, sample, budget, n_turns, coalesce(prompt, '') AS prompt,
                   success, coalesce({counted_sql('tr')}, FALSE) AS counted,
                   success IS NOT NULL AND end_reason = 'crash' AS crashed
            FROM trajectories tr WHERE {run_filter}
        ),
        scored AS (
            SELECT u.traj_id, count(*) AS n_scored
            FROM turns u JOIN scores s ON s.traj_id = u.traj_id AND s.t = u.t
            GROUP BY u.traj_id
        ),
        flagged AS (
            SELECT c.*, coalesce(sc.n_scored, 0) AS n_scored
            FROM chosen c LEFT JOIN scored sc ON sc.traj_id = c.traj_id
        )
        SELECT f.traj_id, u.t, f.run, f.task_id, f.sample, f.budget, f.n_turns,
               f.success, f.counted, f.crashed, f.n_scored, length(f.prompt) AS prompt_chars,
               s.score, length(coalesce(u.action, '')) AS action_chars,
               length(coalesce(u.observation, '')) AS observation_chars
        FROM flagged f
        JOIN turns u ON u.traj_id = f.traj_id
        LEFT JOIN scores s ON s.traj_id = u.traj_id AND s.t = u.t
        ORDER BY f.traj_id, u.t
        """,
        params,
    ).df()
    frame, left_out = _counted_only(frame)
    unscored = (frame["n_scored"] < frame["n_turns"]).to_numpy(dtype=bool)
    n_unscored = int(frame.loc[unscored, "traj_id"].nunique())
    if n_unscored and not skip_unscored:
        example = frame.loc[unscored, "traj_id"].iloc[0]
        raise InputProblem(
            f"{n_unscored} trajectories have turns without a score from model {model!r} "
            f"(e.g. {example}); score them with `prm score` or pass --skip-unscored"
        )
    frame = frame[~unscored].reset_index(drop=True)
    check_probabilities(frame, model)
    if isinstance(initial_potential, str):
        if initial_potential != "mean":
            raise UsageProblem(
                f"initial_potential must be a number or 'mean', got {initial_potential!r}")
        phi0 = float(frame["score"].mean()) if len(frame) else DEFAULT_INITIAL_POTENTIAL
    else:
        phi0 = float(initial_potential)
    t = frame["t"].to_numpy(dtype=np.int64)
    n_turns = frame["n_turns"].to_numpy(dtype=np.int64)
    is_first, is_last = t == 1, t == n_turns
    shaped = shape_rewards(
        frame["score"].to_numpy(dtype=float), is_first, is_last,
        frame["success"].to_numpy(dtype=bool).astype(float),
        ShapingOptions(lam=lam, gamma=gamma, initial_potential=phi0),
    )
    check_finite_rewards(frame, shaped.total, lam, gamma)
    offsets = render_offsets(
        frame["prompt_chars"].to_numpy(), frame["action_chars"].to_numpy(),
        frame["observation_chars"].to_numpy(), is_first,
    )
    frame = frame.assign(
        is_last=is_last,
        potential_before=shaped.potential_before,
        potential_after=shaped.potential_after,
        outcome=shaped.outcome,
        shaping=shaped.shaping,
        reward=shaped.total,
        **offsets,
    )
    info = {"n_unscored": n_unscored, **left_out, "initial_potential": phi0}
    return frame[list(REWARD_COLUMNS)], info


def _counted_only(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """The turns of the episodes every analysis counts, and how many episodes were left out
    (``n_crashed``; ``n_unknown_outcome``: unknown outcome or end)."""
    counted = frame["counted"].to_numpy(dtype=bool)
    left = frame[~counted]
    n_crashed = int(left.loc[left["crashed"].to_numpy(dtype=bool), "traj_id"].nunique())
    counts = {"n_unknown_outcome": int(left["traj_id"].nunique()) - n_crashed,
              "n_crashed": n_crashed}
    return frame[counted], counts


def check_probabilities(frame: pd.DataFrame, model: str) -> None:
    """Refuse a step score (of the turns to export) that is NaN or outside [0, 1].

    Raises:
        InputProblem: naming the model and the first such trajectory and turn.
    """
    score = frame["score"].to_numpy(dtype=float)
    bad = ~((score >= 0.0) & (score <= 1.0))  # NaN fails both comparisons
    if bad.any():
        row = frame.iloc[int(np.argmax(bad))]
        raise InputProblem(
            f"step_scores of model {model!r}: trajectory {row['traj_id']} turn {row['t']} has "
            f"score {row['score']}, not a probability in [0, 1]; rescore it with `prm score`"
        )


def check_finite_rewards(frame: pd.DataFrame, total: np.ndarray, lam: float,
                         gamma: float) -> None:
    """Refuse rewards that overflowed (JSON has no Infinity; a trainer cannot use one; the
    outcome is 1/0, so only the weights can overflow).

    Raises:
        UsageProblem: for ``lam`` and ``gamma`` whose product overflows.
    """
    if not np.isfinite(total).all():
        row = frame.iloc[int(np.argmax(~np.isfinite(total)))]
        raise UsageProblem(
            f"--lambda {lam:g} and --gamma {gamma:g} make the reward of trajectory "
            f"{row['traj_id']} turn {row['t']} overflow; use smaller values"
        )


def _copy_out(frame: pd.DataFrame, query: str, out: Path, fmt: str) -> None:
    """Write ``query`` over the rewards (``_bm_rewards``) to ``out`` whole or not at all, from
    a connection of its own: a store's connection reaches no file but the store."""
    import duckdb
    import pyarrow as pa

    with duckdb.connect(":memory:") as con:
        con.register("_bm_rewards", pa.Table.from_pandas(frame, preserve_index=False))
        with atomic_output(out) as temp:
            target = str(temp).replace("'", "''")
            con.execute(f"COPY ({query}) TO '{target}' (FORMAT {fmt})")


def export_shaped_rewards(
    con: duckdb.DuckDBPyConnection,
    model: str,
    out: str | Path,
    options: ShapedRewardOptions = ShapedRewardOptions(),
) -> RewardsExport:
    """Write shaped per-turn rewards to JSONL (``.jsonl``/``.json``) or Parquet (``.parquet``).

    Layout ``turns``: one row per ``(traj_id, t)`` with :data:`REWARD_COLUMNS`. Layout
    ``trajectories``: one row per trajectory (``traj_id, run, task_id, sample, budget,
    n_turns, episode_outcome, shaped_return``) with the per-turn columns as lists in turn order
    (``score, potential_before, potential_after, outcome, shaping, reward, action_start,
    action_end, observation_start, observation_end``). See :func:`shaped_rewards_frame` for
    the other arguments.

    Args:
        con: The store.
        model: PRM name in ``step_scores``.
        out: The file to write.
        options: The shaping and the layout.

    Returns:
        What was written.

    Raises:
        UsageProblem: for an unknown ``layout`` or ``initial_potential``.
        InputProblem: for an ``out`` that is not ``.jsonl``, ``.json`` or ``.parquet``, or a
            store that cannot give the rewards (see :func:`shaped_rewards_frame`).
    """
    layout = options.layout
    if layout not in REWARD_LAYOUTS:
        raise UsageProblem(f"unknown layout {layout!r}; known: {', '.join(REWARD_LAYOUTS)}")
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".jsonl", ".json", ".parquet"):
        raise UsageProblem(f"{out}: the file must end in .jsonl, .json or .parquet")
    check_output_path(out, "--out")
    frame, info = shaped_rewards_frame(con, model, options)
    if layout == "turns":
        query = "SELECT * FROM _bm_rewards ORDER BY traj_id, t"
    else:
        lists = ", ".join(f"list({c} ORDER BY t) AS {c}" for c in _LIST_COLUMNS)
        query = (
            "SELECT traj_id, any_value(run) AS run, any_value(task_id) AS task_id, "
            "any_value(sample) AS sample, any_value(budget) AS budget, "
            "any_value(n_turns) AS n_turns, sum(outcome) AS episode_outcome, "
            f"sum(reward) AS shaped_return, {lists} "
            "FROM _bm_rewards GROUP BY traj_id ORDER BY traj_id"
        )
    _copy_out(frame, query, out, "parquet" if suffix == ".parquet" else "json")
    return RewardsExport(
        path=out,
        model=model,
        n_trajectories=int(frame["traj_id"].nunique()),
        n_turns=len(frame),
        n_unscored=info["n_unscored"],
        n_unknown_outcome=info["n_unknown_outcome"],
        initial_potential=info["initial_potential"],
        n_crashed=info["n_crashed"],
    )


def parse_initial_potential(text: str) -> float | str:
    """``"0.5"`` -> ``0.5``; ``"mean"`` stays ``"mean"``.

    Raises:
        UsageProblem: for anything else.
    """
    if text == "mean":
        return text
    try:
        value = float(text)
    except ValueError:
        raise UsageProblem(
            f"--initial-potential must be a number or 'mean', got {text!r}") from None
    if not np.isfinite(value):
        raise UsageProblem(f"--initial-potential must be finite, got {text!r}")
    return value


def export_rewards(config: RewardsConfig) -> RewardsExport:
    """``recovery budgetmix rewards``: open the store read-only and write the rewards file.

    Args:
        config: The command's options.

    Returns:
        What was written.

    Raises:
        UsageProblem: for an option that cannot be used.
        InputProblem: for a store that is missing or cannot give the rewards.
    """
    initial = parse_initial_potential(config.initial_potential)
    for flag, value in (("--lambda", config.lam), ("--gamma", config.gamma)):
        if not np.isfinite(value):
            raise UsageProblem(f"{flag} must be a finite number, got {value}")
    check_output_path(config.out, "--out")
    if config.store is None:
        raise UsageProblem("--store is required")
    from recovery.store import open_store

    store = open_store(config.store, read_only=True)
    try:
        return export_shaped_rewards(store.con, str(config.model), Path(config.out),
                                     ShapedRewardOptions(
            lam=config.lam, gamma=config.gamma, initial_potential=initial, runs=config.runs,
            skip_unscored=config.skip_unscored, layout=config.layout))
    finally:
        store.close()
