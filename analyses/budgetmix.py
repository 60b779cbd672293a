"""BudgetMix signals (DESIGN 8): budget schedules and PRM-shaped per-turn rewards.

**Budget schedules.** A :class:`BudgetSchedule` is a distribution over training turn budgets
that an RL trainer samples from, one budget per episode (or per group of episodes that share a
prompt). Three strategies:

- ``uniform``: every budget of a list (or of an integer range) equally likely;
- ``mixture``: given budgets with given weights (normalised to sum to 1);
- ``adaptive``: weights from the evidence in a store, of one of two kinds, per budget ``T``:

  * ``shortfall``: how far Pass@(1,T) falls below Pass@(1,T_ref) at the reference (large)
    budget, ``max(0, pass1(T_ref) - pass1(T))``: train more where short budgets cost success;
  * ``unrecovered``: how much larger the share of error spells still unrecovered at ``T`` is
    than at ``T_ref``, ``max(0, u(T) - u(T_ref))`` with ``u(T)`` = spells started by ``T`` and
    not recovered by ``T`` / spells started by ``T``: train more where the budget cuts
    recoveries off.

  With ``x_T`` the evidence, ``w_T = floor / m + (1 - floor) * x_T / sum(x)`` over the ``m``
  budgets (uniform when every ``x_T`` is 0): a ``floor`` share of the mass stays uniform so no
  budget is dropped, and the rest follows the evidence. Every budget's numbers (both kinds,
  whichever drives the weights) are kept in the schedule as its ``evidence``.

A schedule is written as JSON (:meth:`BudgetSchedule.save`; schema in ``docs/budgetmix.md``)
and read back with :meth:`BudgetSchedule.load`; :meth:`BudgetSchedule.sample` draws budgets.

**Shaped rewards.** Potential-based shaping (Ng, Harada and Russell, 1999) with the PRM score as
the potential. For a trajectory of ``n`` turns with PRM scores ``p_1..p_n`` (``p_t`` judges turn
``t`` having seen its action and observation) and outcome ``R``:

- the state ``s_t`` is the history before the agent's ``t``-th action, so
  ``phi(s_t) = p_{t-1}`` for ``t >= 2`` (the score of the turn before ``t``),
  ``phi(s_1) = initial_potential`` (a constant, default 0.5, or the mean score of the export),
  and the terminal state ``s_{n+1}`` has ``phi = 0``;
- ``r_t = R * [t = n] + lambda * (gamma * phi(s_{t+1}) - phi(s_t))``.

The discounted shaped return telescopes: ``sum_t gamma^(t-1) r_t = gamma^(n-1) R +
lambda * (gamma^n * phi(s_{n+1}) - phi(s_1)) = gamma^(n-1) R - lambda * phi(s_1)``, so for every
``gamma`` it differs from the unshaped return only by the constant ``-lambda * phi(s_1)`` (with
``gamma = 1``: shaped return = ``R - lambda * phi(s_1)``). That is why the optimal policy is
unchanged, and also why a trainer that only uses each episode's summed reward (GRPO, RLOO)
gets nothing from the shaping: it helps estimators that use per-turn returns (reward-to-go,
GAE). The last turn's own score ``p_n`` never enters: the outcome judges the last step.

Example:
    >>> from analyses.budgetmix import adaptive_schedule, export_shaped_rewards
    >>> schedule = adaptive_schedule(con, budgets=[8, 16, 32], evidence="shortfall")
    >>> schedule.save("schedule.json"); schedule.sample(0, 4)
    >>> export_shaped_rewards(con, "prm-ckpt", "rewards.parquet", lam=1.0)
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from recovery.jsonsafe import json_safe

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

SCHEDULE_FORMAT = "budgetmix-schedule"
"""Value of the ``format`` key of a schedule file."""

SCHEDULE_VERSION = 1
"""Version of the schedule file layout."""

STRATEGIES = ("uniform", "mixture", "adaptive")
"""Schedule strategies."""

EVIDENCE_KINDS = ("shortfall", "unrecovered")
"""What drives the weights of an ``adaptive`` schedule."""

EVIDENCE_MODES = ("auto", "budgeted", "truncation")
"""How Pass@(1,T) and spells are read at each budget (see :func:`budget_evidence`)."""

REWARD_LAYOUTS = ("turns", "trajectories")
"""Shapes of a rewards file: one row per turn, or one row per trajectory with lists."""

DEFAULT_INITIAL_POTENTIAL = 0.5
"""Default ``phi(s_1)``: the potential of the state before the first turn."""


# --------------------------------------------------------------------------------------------
# Budget schedules


@dataclass(slots=True)
class BudgetEvidence:
    """What the store says about one training budget ``T``.

    Attributes:
        budget: The budget ``T``.
        n_trajectories: Trajectories read at ``T`` (budgeted mode: run with budget ``T``;
            truncation mode: all of them, cut at ``T``).
        n_tasks: Tasks among them.
        pass_at_1: Pass@(1,T); ``None`` when no trajectory counts at ``T``.
        shortfall: ``max(0, pass1(T_ref) - pass1(T))``.
        n_spells: Error spells started by turn ``T``.
        n_unrecovered: Those not recovered by turn ``T`` (budgeted mode: not recovered at all).
        unrecovered_share: ``n_unrecovered / n_spells`` (``None`` when there are no spells).
        unrecovered_excess: ``max(0, unrecovered_share(T) - unrecovered_share(T_ref))``.
    """

    budget: int
    n_trajectories: int = 0
    n_tasks: int = 0
    pass_at_1: float | None = None
    shortfall: float | None = None
    n_spells: int = 0
    n_unrecovered: int = 0
    unrecovered_share: float | None = None
    unrecovered_excess: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN becomes ``None``)."""
        return {k: json_safe(v) for k, v in asdict(self).items()}


@dataclass(slots=True)
class BudgetSchedule:
    """A distribution over training turn budgets.

    Attributes:
        budgets: Distinct positive budgets, increasing.
        weights: Their probabilities; non-negative, summing to 1.
        strategy: ``uniform``, ``mixture`` or ``adaptive``.
        evidence_kind: For ``adaptive``: ``shortfall`` or ``unrecovered``; else ``None``.
        evidence: For ``adaptive``: one :class:`BudgetEvidence` per budget, in budget order.
        params: How the weights were made (floor, mode, reference budget, runs...).
    """

    budgets: list[int]
    weights: list[float]
    strategy: str = "mixture"
    evidence_kind: str | None = None
    evidence: list[BudgetEvidence] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        budgets = [int(b) for b in self.budgets]
        weights = np.asarray(self.weights, dtype=float)
        if not budgets:
            raise ValueError("a schedule needs at least one budget")
        if len(budgets) != len(weights):
            raise ValueError(
                f"{len(budgets)} budgets but {len(weights)} weights: give one weight per budget"
            )
        if min(budgets) < 1:
            raise ValueError(f"budgets must be positive, got {budgets}")
        if len(set(budgets)) != len(budgets):
            raise ValueError(f"repeated budget in {budgets}")
        if not np.all(np.isfinite(weights)) or weights.min() < 0 or weights.sum() <= 0:
            raise ValueError(f"weights must be non-negative with a positive sum, got {list(weights)}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; known: {', '.join(STRATEGIES)}")
        order = np.argsort(budgets, kind="stable")
        self.budgets = [budgets[i] for i in order]
        normalised = weights[order] / weights.sum()
        self.weights = [float(w) for w in normalised]

    def sample(self, rng: np.random.Generator | int | None, n: int) -> np.ndarray:
        """Draw ``n`` budgets (with replacement) from the schedule.

        Args:
            rng: A numpy ``Generator``, or a seed for one.
            n: How many budgets.

        Returns:
            Integer array of ``n`` budgets.
        """
        rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        return rng.choice(np.asarray(self.budgets, dtype=np.int64), size=int(n),
                          p=np.asarray(self.weights))

    def mean_budget(self) -> float:
        """Expected budget under the schedule."""
        return float(np.dot(self.budgets, self.weights))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object a trainer reads (schema in ``docs/budgetmix.md``)."""
        return {
            "format": SCHEDULE_FORMAT,
            "version": SCHEDULE_VERSION,
            "strategy": self.strategy,
            "budgets": list(self.budgets),
            "weights": list(self.weights),
            "evidence_kind": self.evidence_kind,
            "params": {k: json_safe(v) for k, v in self.params.items()},
            "evidence": [e.to_dict() for e in self.evidence],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BudgetSchedule:
        """Rebuild a schedule from :meth:`to_dict` output.

        Raises:
            ValueError: when the object is not a schedule or is inconsistent.
        """
        if not isinstance(data, dict) or data.get("format") != SCHEDULE_FORMAT:
            raise ValueError(f"not a BudgetMix schedule (expected format {SCHEDULE_FORMAT!r})")
        if data.get("version") != SCHEDULE_VERSION:
            raise ValueError(f"unsupported schedule version {data.get('version')!r}")
        return cls(
            budgets=list(data["budgets"]),
            weights=list(data["weights"]),
            strategy=data.get("strategy", "mixture"),
            evidence_kind=data.get("evidence_kind"),
            evidence=[BudgetEvidence(**e) for e in data.get("evidence", [])],
            params=dict(data.get("params", {})),
        )

    def save(self, path: str | Path) -> Path:
        """Write the schedule as JSON; returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> BudgetSchedule:
        """Read a schedule written by :meth:`save`.

        Raises:
            ValueError: naming the file when it is not a valid schedule.
        """
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}: {err}") from None


def budget_range(low: int, high: int, step: int = 1) -> list[int]:
    """The budgets ``low, low + step, ...`` up to ``high`` included.

    Raises:
        ValueError: when ``low < 1``, ``high < low`` or ``step < 1``.
    """
    if low < 1 or high < low or step < 1:
        raise ValueError(f"need 1 <= low <= high and step >= 1, got {low}, {high}, {step}")
    return list(range(int(low), int(high) + 1, int(step)))


def parse_budget_range(text: str) -> list[int]:
    """``"4:32"`` or ``"4:32:4"`` (low:high[:step], high included) -> budgets.

    Raises:
        ValueError: for anything else.
    """
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"expected LOW:HIGH or LOW:HIGH:STEP, got {text!r}")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"expected integers in {text!r}") from None
    return budget_range(*numbers)


def uniform_schedule(budgets: Sequence[int]) -> BudgetSchedule:
    """Every budget equally likely.

    Args:
        budgets: Distinct positive budgets (e.g. :func:`budget_range` for a range).
    """
    return BudgetSchedule(budgets=list(budgets), weights=[1.0] * len(budgets),
                          strategy="uniform")


def mixture_schedule(budgets: Sequence[int], weights: Sequence[float]) -> BudgetSchedule:
    """Given budgets with given (unnormalised) weights.

    Raises:
        ValueError: when lengths differ, a weight is negative or all are 0.
    """
    return BudgetSchedule(budgets=list(budgets), weights=list(weights), strategy="mixture")


def evidence_weights(evidence: Sequence[float], floor: float = 0.2) -> np.ndarray:
    """Weights from non-negative evidence: ``floor / m + (1 - floor) * x / sum(x)``.

    Uniform when every ``x`` is 0 (or ``floor`` is 1). Missing values (NaN) count as 0.

    Args:
        evidence: One non-negative number per budget.
        floor: Share of the mass spread uniformly, in [0, 1].

    Returns:
        Weights summing to 1.
    """
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must lie in [0, 1], got {floor}")
    x = np.nan_to_num(np.asarray(evidence, dtype=float), nan=0.0)
    if x.size == 0:
        raise ValueError("no budgets")
    if x.min() < 0:
        raise ValueError("evidence must be non-negative")
    uniform = np.full(x.size, 1.0 / x.size)
    if x.sum() <= 0:
        return uniform
    return floor * uniform + (1.0 - floor) * x / x.sum()


def _selected_trajectories(
    con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None
) -> pd.DataFrame:
    from analyses.frames import trajectories_frame

    traj = trajectories_frame(con, runs)
    if traj.empty:
        which = f" of runs {', '.join(runs)}" if runs else ""
        raise ValueError(f"no trajectories with a known outcome{which} in the store")
    return traj


def _resolve_mode(traj: pd.DataFrame, wanted: Sequence[int], mode: str) -> str:
    if mode not in EVIDENCE_MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(EVIDENCE_MODES)}")
    present = set(traj["budget"].dropna().astype(int).tolist())
    if mode == "budgeted":
        missing = sorted(set(wanted) - present)
        if missing:
            raise ValueError(
                f"budgeted mode: no trajectories run with budget(s) {missing} "
                f"(present: {sorted(present) or 'none'}); use --mode truncation"
            )
        return mode
    if mode == "auto":
        return "budgeted" if set(wanted) <= present else "truncation"
    return mode


def default_budgets(con: duckdb.DuckDBPyConnection, runs: Sequence[str] | None = None) -> list[int]:
    """Budgets to weigh when none are given: the distinct budgets of the store when there are
    at least two, else turn limits at quantiles of the turn counts
    (:func:`analyses.passkt.default_ts`)."""
    from analyses.passkt import default_ts

    traj = _selected_trajectories(con, runs)
    present = sorted(set(traj["budget"].dropna().astype(int).tolist()))
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
    """
    from analyses.passkt import pass_at_kt

    budgets = sorted({int(b) for b in budgets})
    if not budgets or budgets[0] < 1:
        raise ValueError(f"budgets must be positive integers, got {budgets}")
    reference = int(reference_budget) if reference_budget is not None else budgets[-1]
    traj = _selected_trajectories(con, runs)
    wanted = sorted({*budgets, reference})
    used = _resolve_mode(traj, wanted, mode)
    pooled = traj.assign(run="pooled")
    if used == "budgeted":
        budget_col = pooled["budget"].astype("Float64")
        pooled = pooled[budget_col.isin(wanted).fillna(False).to_numpy(dtype=bool)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # mixed budgets: the mode is reported
        grid = pass_at_kt(pooled, ks=[1], ts=wanted, mode=used, n_boot=0)
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
    if mode == "budgeted":
        at = traj[(traj["budget"].astype("Float64") == t).fillna(False).to_numpy(dtype=bool)]
    else:
        at = traj
    return len(at), int(at["task_id"].nunique())


def _spell_counts(
    con: duckdb.DuckDBPyConnection, traj: pd.DataFrame, budgets: list[int], mode: str
) -> dict[int, tuple[int, int, float | None]]:
    """Per budget: spells started by ``T``, those not recovered by ``T``, and their share."""
    import pyarrow as pa

    con.register("_bm_traj", pa.table({
        "traj_id": pa.array(traj["traj_id"].astype(str).tolist(), pa.string()),
        "budget": pa.array(_int_list(traj["budget"]), pa.int64()),
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


def _int_list(column: pd.Series) -> list[int | None]:
    import pandas as pd

    return [None if pd.isna(v) else int(v) for v in column.tolist()]


def adaptive_schedule(
    con: duckdb.DuckDBPyConnection,
    budgets: Sequence[int] | None = None,
    *,
    evidence: str = "shortfall",
    runs: Sequence[str] | None = None,
    mode: str = "auto",
    reference_budget: int | None = None,
    floor: float = 0.2,
) -> BudgetSchedule:
    """A schedule weighted by where the policy in the store falls short (see module docstring).

    Args:
        con: The store.
        budgets: Budgets to weigh; ``None`` = :func:`default_budgets`.
        evidence: ``shortfall`` (Pass@(1,T) below the reference) or ``unrecovered`` (error
            spells left unrecovered at ``T`` beyond the reference's share).
        runs: Runs to read (pooled); ``None`` = all.
        mode: ``auto``, ``budgeted`` or ``truncation`` (see :func:`budget_evidence`).
        reference_budget: The large budget compared with; default the largest budget.
        floor: Share of the mass kept uniform, in [0, 1].

    Returns:
        The schedule, with its evidence and parameters.
    """
    if evidence not in EVIDENCE_KINDS:
        raise ValueError(f"unknown evidence {evidence!r}; known: {', '.join(EVIDENCE_KINDS)}")
    if budgets is None:
        budgets = default_budgets(con, runs)
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


# --------------------------------------------------------------------------------------------
# Shaped rewards


@dataclass(slots=True)
class ShapedRewards:
    """Per-turn terms of the shaped reward, flat over turns (see :func:`shape_rewards`).

    Attributes:
        potential_before: ``phi(s_t)``.
        potential_after: ``phi(s_{t+1})`` (0 after the last turn).
        outcome: ``R * [t = last]``.
        shaping: ``lambda * (gamma * phi(s_{t+1}) - phi(s_t))``.
        total: ``outcome + shaping``.
    """

    potential_before: np.ndarray
    potential_after: np.ndarray
    outcome: np.ndarray
    shaping: np.ndarray
    total: np.ndarray


def shape_rewards(
    scores: Sequence[float] | np.ndarray,
    is_first: Sequence[bool] | np.ndarray,
    is_last: Sequence[bool] | np.ndarray,
    episode_outcome: Sequence[float] | np.ndarray,
    *,
    lam: float = 1.0,
    gamma: float = 1.0,
    initial_potential: float | Sequence[float] | np.ndarray = DEFAULT_INITIAL_POTENTIAL,
) -> ShapedRewards:
    """Potential-based shaped rewards for turns laid out trajectory by trajectory.

    The arrays run over every turn of several trajectories, each trajectory's turns
    contiguous and in order. ``phi(s_t)`` is the previous turn's score (``initial_potential``
    at a trajectory's first turn) and the potential after the last turn is 0, so
    ``r_t = R [t = last] + lam * (gamma * phi(s_{t+1}) - phi(s_t))``.

    Args:
        scores: PRM score ``p_t`` of each turn.
        is_first: Whether the turn is its trajectory's first.
        is_last: Whether it is its trajectory's last.
        episode_outcome: The trajectory's outcome ``R``, repeated on each of its turns (only
            the last turn's value is used).
        lam: Shaping weight ``lambda``.
        gamma: Discount ``gamma`` of the shaping term.
        initial_potential: ``phi(s_1)``: one number, or one per turn (only the values at first
            turns are used: a potential may depend on the initial state, e.g. on the task).

    Returns:
        The per-turn terms.
    """
    p = np.asarray(scores, dtype=float)
    first = np.asarray(is_first, dtype=bool)
    last = np.asarray(is_last, dtype=bool)
    outcome_r = np.asarray(episode_outcome, dtype=float)
    if not (p.shape == first.shape == last.shape == outcome_r.shape):
        raise ValueError("scores, is_first, is_last and episode_outcome must have one shape")
    if p.size and not (first[0] and last[-1]):
        raise ValueError("the turns must start with a first turn and end with a last turn")
    before = np.empty_like(p)
    before[1:] = p[:-1]
    phi0 = np.broadcast_to(np.asarray(initial_potential, dtype=float), p.shape)
    before[first] = phi0[first]
    after = np.where(last, 0.0, p)
    outcome = np.where(last, outcome_r, 0.0)
    shaping = lam * (gamma * after - before)
    return ShapedRewards(before, after, outcome, shaping, outcome + shaping)


def discounted_returns(
    rewards: np.ndarray, mask: np.ndarray, gamma: float = 1.0
) -> np.ndarray:
    """Reward-to-go ``G_t = sum_{k >= t} gamma^(k-t) r_k`` of padded trajectories.

    Args:
        rewards: ``(n_trajectories, max_turns)`` per-turn rewards (padding ignored).
        mask: Same shape, true on real turns (each row's real turns come first).
        gamma: Discount.

    Returns:
        ``(n_trajectories, max_turns)`` returns, 0 on padding.
    """
    r = np.where(mask, np.asarray(rewards, dtype=float), 0.0)
    out = np.zeros_like(r)
    running = np.zeros(r.shape[0])
    for t in range(r.shape[1] - 1, -1, -1):  # one step per turn index, all trajectories at once
        running = r[:, t] + gamma * running
        out[:, t] = running
    return np.where(mask, out, 0.0)


def render_offsets(
    prompt_chars: Sequence[int] | np.ndarray,
    action_chars: Sequence[int] | np.ndarray,
    observation_chars: Sequence[int] | np.ndarray,
    is_first: Sequence[bool] | np.ndarray,
) -> dict[str, np.ndarray]:
    """Character offsets of each turn within the plain rendering of its trajectory.

    The rendering (:func:`render_trajectory`) is the prompt followed by a newline (nothing when
    the prompt is empty), then per turn the action, a newline, the observation, a newline.
    Offsets are Python ``str`` indices (code points); ends are exclusive.

    Returns:
        ``action_start, action_end, observation_start, observation_end`` arrays.
    """
    prompt = np.asarray(prompt_chars, dtype=np.int64)
    action = np.asarray(action_chars, dtype=np.int64)
    observation = np.asarray(observation_chars, dtype=np.int64)
    first = np.asarray(is_first, dtype=bool)
    head = np.where(prompt > 0, prompt + 1, 0)
    span = action + observation + 2
    total = np.cumsum(span)
    group = np.cumsum(first) - 1
    start_of_group = np.flatnonzero(first)
    before_group = np.concatenate([[0], total])[start_of_group]
    action_start = head + total - span - before_group[group]
    action_end = action_start + action
    return {
        "action_start": action_start,
        "action_end": action_end,
        "observation_start": action_end + 1,
        "observation_end": action_end + 1 + observation,
    }


def render_trajectory(prompt: str, actions: Sequence[str], observations: Sequence[str]) -> str:
    """The plain text rendering that the offsets of a rewards file index into."""
    parts = [prompt + "\n"] if prompt else []
    for action, observation in zip(actions, observations, strict=True):
        parts.append(f"{action}\n{observation}\n")
    return "".join(parts)


def last_token_indices(
    offset_mapping: Sequence[tuple[int, int]] | np.ndarray, char_ends: Sequence[int] | np.ndarray
) -> np.ndarray:
    """For each character end (exclusive), the index of the token holding its last character.

    Use with a Hugging Face fast tokenizer's ``return_offsets_mapping=True`` over the same text
    the offsets refer to: it gives the token at which a per-turn reward is placed (e.g. verl's
    token-level reward tensor). Tokens with an empty span (special tokens) are skipped.

    Args:
        offset_mapping: ``(start, end)`` character span of each token, in order.
        char_ends: Exclusive character ends (e.g. a rewards file's ``action_end``).

    Returns:
        Token indices; -1 where no token covers the character before the end.
    """
    spans = np.asarray(offset_mapping, dtype=np.int64).reshape(-1, 2)
    ends = np.asarray(char_ends, dtype=np.int64)
    real = np.flatnonzero(spans[:, 1] > spans[:, 0])
    if real.size == 0:
        return np.full(ends.shape, -1, dtype=np.int64)
    token_ends = spans[real, 1]
    pos = np.searchsorted(token_ends, ends, side="left")  # first token ending at or after it
    pos_clipped = np.minimum(pos, real.size - 1)
    covered = (pos < real.size) & (spans[real[pos_clipped], 0] < ends) & (ends > 0)
    return np.where(covered, real[pos_clipped], -1)


@dataclass(slots=True)
class RewardsExport:
    """What :func:`export_shaped_rewards` wrote.

    Attributes:
        path: The file.
        model: PRM name in ``step_scores``.
        n_trajectories: Trajectories written.
        n_turns: Turns written.
        n_unscored: Trajectories left out because a turn had no score (``skip_unscored``).
        n_unknown_outcome: Trajectories left out because neither reward nor success is known.
        initial_potential: ``phi(s_1)`` used.
    """

    path: Path
    model: str
    n_trajectories: int
    n_turns: int
    n_unscored: int
    n_unknown_outcome: int
    initial_potential: float


REWARD_COLUMNS = (
    "traj_id", "t", "run", "task_id", "sample", "budget", "n_turns", "is_last", "score",
    "potential_before", "potential_after", "outcome", "shaping", "reward", "action_chars",
    "observation_chars", "action_start", "action_end", "observation_start", "observation_end",
)
"""Columns of a rewards file in the ``turns`` layout, in order."""


def shaped_rewards_frame(
    con: duckdb.DuckDBPyConnection,
    model: str,
    *,
    lam: float = 1.0,
    gamma: float = 1.0,
    initial_potential: float | str = DEFAULT_INITIAL_POTENTIAL,
    runs: Sequence[str] | None = None,
    skip_unscored: bool = False,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Shaped per-turn rewards of the store's trajectories from PRM ``model``'s scores.

    The outcome ``R`` is the trajectory's ``reward`` when stored, else ``success`` as 1/0;
    trajectories with neither are left out and counted.

    Args:
        con: The store, with ``step_scores`` rows of ``model``.
        model: PRM name in ``step_scores`` (``prm score`` uses the model directory's name).
        lam: Shaping weight.
        gamma: Discount of the shaping term.
        initial_potential: ``phi(s_1)``: a number, or ``"mean"`` for the mean score of the
            exported turns.
        runs: Runs to export; ``None`` = all.
        skip_unscored: Leave out trajectories with an unscored turn (else it is an error).

    Returns:
        The frame (columns :data:`REWARD_COLUMNS`, ordered by ``traj_id, t``) and counts
        ``n_unscored``, ``n_unknown_outcome``, ``initial_potential``.

    Raises:
        ValueError: when the model has no scores, or a turn is unscored and not
            ``skip_unscored``.
    """
    if not con.execute("SELECT 1 FROM step_scores WHERE model = ? LIMIT 1", [model]).fetchone():
        known = [r[0] for r in con.execute(
            "SELECT DISTINCT model FROM step_scores ORDER BY 1").fetchall()]
        raise ValueError(
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
            SELECT traj_id, t, avg(score) AS score FROM step_scores WHERE model = ?
            GROUP BY traj_id, t
        ),
        chosen AS (
            SELECT traj_id, run, task_id, sample, budget, n_turns, coalesce(prompt, '') AS prompt,
                   coalesce(reward, CASE WHEN success THEN 1.0 WHEN NOT success THEN 0.0 END)
                       AS episode_outcome
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
               f.episode_outcome, f.n_scored, length(f.prompt) AS prompt_chars,
               s.score, length(coalesce(u.action, '')) AS action_chars,
               length(coalesce(u.observation, '')) AS observation_chars
        FROM flagged f
        JOIN turns u ON u.traj_id = f.traj_id
        LEFT JOIN scores s ON s.traj_id = u.traj_id AND s.t = u.t
        ORDER BY f.traj_id, u.t
        """,
        params,
    ).df()
    unknown = frame["episode_outcome"].isna()
    n_unknown = int(frame.loc[unknown, "traj_id"].nunique())
    frame = frame[~unknown]
    unscored = frame["n_scored"] < frame["n_turns"]
    n_unscored = int(frame.loc[unscored, "traj_id"].nunique())
    if n_unscored and not skip_unscored:
        example = frame.loc[unscored, "traj_id"].iloc[0]
        raise ValueError(
            f"{n_unscored} trajectories have turns without a score from model {model!r} "
            f"(e.g. {example}); score them with `prm score` or pass --skip-unscored"
        )
    frame = frame[~unscored].reset_index(drop=True)
    if isinstance(initial_potential, str):
        if initial_potential != "mean":
            raise ValueError(f"initial_potential must be a number or 'mean', got {initial_potential!r}")
        phi0 = float(frame["score"].mean()) if len(frame) else DEFAULT_INITIAL_POTENTIAL
    else:
        phi0 = float(initial_potential)
    t = frame["t"].to_numpy(dtype=np.int64)
    n_turns = frame["n_turns"].to_numpy(dtype=np.int64)
    is_first, is_last = t == 1, t == n_turns
    shaped = shape_rewards(
        frame["score"].to_numpy(dtype=float), is_first, is_last,
        frame["episode_outcome"].to_numpy(dtype=float),
        lam=lam, gamma=gamma, initial_potential=phi0,
    )
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
    info = {"n_unscored": n_unscored, "n_unknown_outcome": n_unknown, "initial_potential": phi0}
    return frame[list(REWARD_COLUMNS)], info


def export_shaped_rewards(
    con: duckdb.DuckDBPyConnection,
    model: str,
    out: str | Path,
    *,
    lam: float = 1.0,
    gamma: float = 1.0,
    initial_potential: float | str = DEFAULT_INITIAL_POTENTIAL,
    runs: Sequence[str] | None = None,
    skip_unscored: bool = False,
    layout: str = "turns",
) -> RewardsExport:
    """Write shaped per-turn rewards to JSONL (``.jsonl``/``.json``) or Parquet (``.parquet``).

    Layout ``turns``: one row per ``(traj_id, t)`` with :data:`REWARD_COLUMNS`. Layout
    ``trajectories``: one row per trajectory (``traj_id, run, task_id, sample, budget,
    n_turns, episode_outcome, shaped_return``) with the per-turn columns as lists in turn order
    (``score, potential_before, potential_after, outcome, shaping, reward, action_start,
    action_end, observation_start, observation_end``). See :func:`shaped_rewards_frame` for
    the arguments.

    Returns:
        What was written.
    """
    import pyarrow as pa

    if layout not in REWARD_LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; known: {', '.join(REWARD_LAYOUTS)}")
    out = Path(out)
    suffix = out.suffix.lower()
    if suffix not in (".jsonl", ".json", ".parquet"):
        raise ValueError(f"{out}: the file must end in .jsonl, .json or .parquet")
    frame, info = shaped_rewards_frame(
        con, model, lam=lam, gamma=gamma, initial_potential=initial_potential, runs=runs,
        skip_unscored=skip_unscored,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    con.register("_bm_rewards", pa.Table.from_pandas(frame, preserve_index=False))
    try:
        if layout == "turns":
            query = "SELECT * FROM _bm_rewards ORDER BY traj_id, t"
        else:
            lists = ", ".join(
                f"list({c} ORDER BY t) AS {c}"
                for c in ("score", "potential_before", "potential_after", "outcome", "shaping",
                          "reward", "action_start", "action_end", "observation_start",
                          "observation_end")
            )
            query = (
                "SELECT traj_id, any_value(run) AS run, any_value(task_id) AS task_id, "
                "any_value(sample) AS sample, any_value(budget) AS budget, "
                "any_value(n_turns) AS n_turns, sum(outcome) AS episode_outcome, "
                f"sum(reward) AS shaped_return, {lists} "
                "FROM _bm_rewards GROUP BY traj_id ORDER BY traj_id"
            )
        fmt = "parquet" if suffix == ".parquet" else "json"
        target = str(out).replace("'", "''")
        con.execute(f"COPY ({query}) TO '{target}' (FORMAT {fmt})")
    finally:
        con.unregister("_bm_rewards")
    return RewardsExport(
        path=out,
        model=model,
        n_trajectories=int(frame["traj_id"].nunique()),
        n_turns=len(frame),
        n_unscored=info["n_unscored"],
        n_unknown_outcome=info["n_unknown_outcome"],
        initial_potential=info["initial_potential"],
    )
