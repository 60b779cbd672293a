"""A reference BudgetMix trainer on a small simulated agent task (DESIGN 8).

The environment follows the simulator's idea (DESIGN 9): a task needs ``L`` units of progress
and has a difficulty ``d`` in [0, 1] that raises its error rates. At each turn outside an error
spell the policy picks

- ``fast``: ``fast_progress`` units at once, but a high error rate;
- ``safe``: one unit, a low error rate;

and inside a spell (after an error) it picks

- ``retry``: redo the failed step at once: it recovers (and makes one unit of progress) with
  ``p_recover_retry``, ends the episode with ``p_fatal_retry``, else the spell goes on;
- ``repair``: diagnose and fix: recovers more often (``p_recover_repair``, no progress that
  turn) and ends the episode less often (``p_fatal_repair``).

The episode ends on success (progress reaches ``L``), on a fatal turn, or at the budget ``T``.
The best play depends on the turns left: with few, fast play and quick retries pay; with many,
safe play and careful repairs do. The policy is a small torch MLP over the state (units left,
turns left, in a spell, spell age, errors per turn so far), so it sees its budget.

Training is a policy gradient with a group baseline (GRPO-style): each iteration draws
``tasks_per_iteration`` tasks, runs ``group_size`` episodes of each at one budget, and gives
every turn of episode ``i`` the advantage ``(G_t - mean_group(G_1)) / (std_group(G_1) + eps)``,
where ``G_t`` is the return from turn ``t`` on (without shaping: the outcome, 1 or 0). Modes:

- ``fixed:T``: every group runs at budget ``T``;
- ``budgetmix``: each group's budget is drawn from a :class:`~analyses.budgetmix.BudgetSchedule`
  (default: uniform over ``budget_range``);
- ``budgetmix+prm``: as ``budgetmix``, plus PRM-shaped per-turn rewards
  (:func:`analyses.budgetmix.shape_rewards`) from a PRM trained on the policy's own rollouts:
  after a warm-up the rollouts of the last iterations are ingested into an in-memory store and
  the prm package's scikit-learn baseline is fitted on them (label source ``prm_labels``),
  refitted every ``prm_every`` iterations. ``phi(s_1)`` is the group's mean outcome. With
  ``gamma = 1`` the shaped return from turn ``t`` is ``R - lambda * phi(s_t)``: the shaping acts
  as a state-dependent baseline (the expected gradient is unchanged; only its variance is), and
  with ``lambda = 1`` a turn's advantage is ``(R - p_(t-1)) / std``.

After training, each mode's policy is run (sampling its actions) on shared held-out tasks at
every ``eval_budgets`` budget, and the episodes are written as canonical JSONL
(``<out>/<mode>.jsonl``, ``run`` = the mode, ``budget`` set) in the simulator's style: visible
errors are worded so that the built-in error rules mark them, and the ground truth is in each
turn's ``meta``. ``recovery analyze --mode budgeted`` measures them.

Example:
    >>> from analyses.budgetmix_train import TrainSimConfig, train_sim
    >>> result = train_sim(TrainSimConfig(modes=["fixed:8", "budgetmix"], out="sim-out"))
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analyses.budgetmix import (
    BudgetSchedule,
    discounted_returns,
    parse_budget_range,
    shape_rewards,
    uniform_schedule,
)
from recovery.config import opt
from recovery.schema import Trajectory, Turn, write_jsonl

if TYPE_CHECKING:
    import torch

ACTIONS = ("fast", "safe", "retry", "repair")
"""Action names, by index. ``fast``/``safe`` outside a spell, ``retry``/``repair`` inside."""

EVENTS = ("progress", "error", "repeat", "recover", "fatal")
"""Turn events (``meta.event``): the first two outside a spell, the last three inside."""

ENDS = ("success", "fatal", "budget")
"""How an episode ended (trajectory ``meta.end``)."""

FEATURES = ("units_left", "turns_left", "in_spell", "spell_age", "error_rate")
"""The policy's state features, in order (units and turns scaled by :data:`SCALE`)."""

SCALE = 32.0
"""Units and turns are divided by this in the features."""

MODE_KINDS = ("fixed", "budgetmix", "budgetmix+prm")


@dataclass(frozen=True)
class EnvParams:
    """The simulated task and the effect of each action.

    Attributes:
        length_min: Smallest ``L`` (units of progress a task needs).
        length_max: Largest ``L``.
        fast_progress: Units a ``fast`` turn makes.
        p_error_fast: Error probability of a ``fast`` turn on a task of middle difficulty.
        p_error_safe: Error probability of a ``safe`` turn on a task of middle difficulty.
        error_spread: Error probabilities are multiplied by ``1 + error_spread * (2 d - 1)``.
        p_recover_retry: ``retry``: probability that it recovers (with one unit of progress).
        p_fatal_retry: ``retry``: probability that the episode ends in failure.
        p_recover_repair: ``repair``: probability that it recovers (no progress).
        p_fatal_repair: ``repair``: probability that the episode ends in failure.
    """

    length_min: int = 3
    length_max: int = 14
    fast_progress: int = 2
    p_error_fast: float = 0.30
    p_error_safe: float = 0.06
    error_spread: float = 0.5
    p_recover_retry: float = 0.5
    p_fatal_retry: float = 0.15
    p_recover_repair: float = 0.8
    p_fatal_repair: float = 0.1

    def __post_init__(self) -> None:
        if not 1 <= self.length_min <= self.length_max:
            raise ValueError("EnvParams: need 1 <= length_min <= length_max")
        if self.fast_progress < 1:
            raise ValueError("EnvParams: fast_progress must be at least 1")
        for a, b in (("p_recover_retry", "p_fatal_retry"), ("p_recover_repair", "p_fatal_repair")):
            pa, pb = getattr(self, a), getattr(self, b)
            if min(pa, pb) < 0 or pa + pb > 1:
                raise ValueError(f"EnvParams: {a} and {b} must be non-negative, summing to <= 1")
        top = max(self.p_error_fast, self.p_error_safe) * (1 + self.error_spread)
        if min(self.p_error_fast, self.p_error_safe) < 0 or top > 1 or not 0 <= self.error_spread <= 1:
            raise ValueError("EnvParams: error probabilities must stay in [0, 1] on every task")


@dataclass
class TrainSimConfig:
    """Options of ``recovery budgetmix train-sim`` (and of :func:`train_sim`)."""

    modes: list[str] = opt(
        default_factory=lambda: ["fixed:8", "fixed:24", "budgetmix", "budgetmix+prm"],
        help="Training modes, comma-separated: fixed:T (any T), budgetmix, budgetmix+prm.",
        flag="--mode",
    )
    out: Path = opt(Path("budgetmix-sim"), "Output folder (rollouts, policies, summary).")
    seed: int = opt(0, "Seed of tasks, episodes and initialisation.")
    iterations: int = opt(300, "Policy-gradient iterations per mode.")
    tasks_per_iteration: int = opt(16, "Tasks (groups) per iteration.")
    group_size: int = opt(8, "Episodes per task in a group (the group baseline).")
    lr: float = opt(3e-3, "Adam learning rate.")
    hidden: int = opt(64, "Width of the policy's two hidden layers.")
    entropy_coef: float = opt(0.01, "Entropy bonus weight.")
    std_normalise: bool = opt(
        True, "Divide advantages by the group's std (GRPO); off = mean only (Dr. GRPO).",
        flag="--std-normalise/--no-std-normalise",
    )
    budget_range: str = opt(
        "4:32", "Budgets of the default BudgetMix schedule (uniform): LOW:HIGH[:STEP]."
    )
    schedule: Path | None = opt(
        None, "BudgetMix schedule JSON (from `recovery budgetmix plan`) instead of the range."
    )
    eval_budgets: list[int] = opt(
        default_factory=lambda: [4, 8, 12, 16, 24, 32], help="Budgets of the evaluation rollouts."
    )
    eval_tasks: int = opt(200, "Held-out evaluation tasks (shared by all modes).")
    eval_samples: int = opt(4, "Evaluation episodes per task and budget.")
    lam: float = opt(1.0, "Shaping weight lambda (budgetmix+prm).", flag="--lambda")
    gamma: float = opt(1.0, "Discount gamma of returns and shaping (budgetmix+prm).")
    prm_labels: str = opt(
        "outcome", "Label source of the trainer's PRM (see prm.labels).",
        choices=("outcome", "error", "recovery", "mc"),
    )
    prm_warmup: float = opt(0.25, "Share of iterations before the first PRM fit.")
    prm_every: int = opt(50, "Refit the PRM every N iterations.")
    prm_window: int = opt(10, "Iterations of recent rollouts the PRM is fitted on.")
    threads: int = opt(
        1, "torch CPU threads while training (tiny matrices: 1 is fastest); 0 = torch's default."
    )


@dataclass
class ModeResult:
    """What one training mode produced.

    Attributes:
        mode: The mode (also the ``run`` label of its rollouts).
        rollouts: The evaluation JSONL file.
        policy: The policy weights (safetensors).
        log: The training log (JSONL, one line per iteration).
        prm: The last PRM (``budgetmix+prm``), a directory ``prm score --model`` reads.
        wall_s: Seconds of training and evaluation.
        eval_success: Budget -> success rate of the evaluation episodes.
        n_prm_fits: PRM fits made.
    """

    mode: str
    rollouts: Path
    policy: Path
    log: Path
    prm: Path | None = None
    wall_s: float = 0.0
    eval_success: dict[int, float] = field(default_factory=dict)
    n_prm_fits: int = 0


@dataclass
class TrainSimResult:
    """What :func:`train_sim` wrote.

    Attributes:
        out: The output folder.
        modes: One result per mode, in the order given.
        summary: The summary JSON file.
        schedule: The schedule the BudgetMix modes used (JSON), if any ran.
    """

    out: Path
    modes: list[ModeResult]
    summary: Path
    schedule: Path | None = None


def parse_mode(mode: str) -> tuple[str, int | None]:
    """``"fixed:8"`` -> ``("fixed", 8)``; ``"budgetmix"`` -> ``("budgetmix", None)``.

    Raises:
        ValueError: for an unknown mode or a bad budget.
    """
    if mode.startswith("fixed:"):
        try:
            budget = int(mode.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"bad mode {mode!r}: expected fixed:T with an integer T") from None
        if budget < 1:
            raise ValueError(f"bad mode {mode!r}: T must be positive")
        return "fixed", budget
    if mode in ("budgetmix", "budgetmix+prm"):
        return mode, None
    raise ValueError(f"unknown mode {mode!r}; use fixed:T, budgetmix or budgetmix+prm")


def mode_file_stem(mode: str) -> str:
    """File stem of a mode's outputs (``fixed:8`` -> ``fixed-8``)."""
    return mode.replace(":", "-")


# --------------------------------------------------------------------------------------------
# Environment


@dataclass
class Rollouts:
    """A batch of episodes as padded arrays, ``N`` episodes by ``max_turns`` turns.

    Attributes:
        length: ``L`` per episode.
        difficulty: ``d`` per episode.
        budget: Budget per episode.
        features: ``(N, max_turns, len(FEATURES))`` state before each turn.
        in_spell: ``(N, max_turns)`` whether the turn was taken inside a spell.
        actions: ``(N, max_turns)`` action index (:data:`ACTIONS`).
        events: ``(N, max_turns)`` event index (:data:`EVENTS`).
        progress_before: ``(N, max_turns)`` units done before the turn.
        progress_after: ``(N, max_turns)`` units done after it.
        mask: ``(N, max_turns)`` true on real turns.
        n_turns: Turns per episode.
        success: Whether each episode succeeded.
        end: Index into :data:`ENDS` per episode.
    """

    length: np.ndarray
    difficulty: np.ndarray
    budget: np.ndarray
    features: np.ndarray
    in_spell: np.ndarray
    actions: np.ndarray
    events: np.ndarray
    progress_before: np.ndarray
    progress_after: np.ndarray
    mask: np.ndarray
    n_turns: np.ndarray
    success: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.length)


def draw_tasks(env: EnvParams, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` tasks: lengths uniform on ``[length_min, length_max]``, difficulties on [0, 1]."""
    length = rng.integers(env.length_min, env.length_max + 1, size=n)
    difficulty = np.round(rng.random(n), 4)
    return length, difficulty


def eval_tasks(env: EnvParams, seed: int, n_tasks: int) -> tuple[np.ndarray, np.ndarray]:
    """The held-out evaluation tasks of ``seed`` (lengths, difficulties), shared by all modes."""
    return draw_tasks(env, np.random.default_rng([seed, 99]), n_tasks)


def optimal_success(
    env: EnvParams, length: np.ndarray, difficulty: np.ndarray, budget: int
) -> np.ndarray:
    """Success probability of the best budget-aware policy on each task, by dynamic programming.

    The state is (units left, turns left, in a spell); the in-spell probabilities do not depend
    on the spell's age, so this state is Markov. The optimum knows each task's difficulty, which
    the trained policy only infers from its errors: it is an upper bound for the trainer.

    Args:
        env: Environment parameters.
        length: ``L`` per task.
        difficulty: ``d`` per task.
        budget: The turn budget.

    Returns:
        One probability per task.
    """
    length = np.asarray(length, dtype=np.int64)
    m = 2.0 * np.asarray(difficulty, dtype=float) - 1.0
    e_fast = env.p_error_fast * (1 + env.error_spread * m)
    e_safe = env.p_error_safe * (1 + env.error_spread * m)
    n, top = len(length), int(length.max()) if len(length) else 0
    units = np.arange(top + 1)
    # value[k][task, u, s]: success probability with k turns left, u units left, s = in spell
    value = np.zeros((n, top + 1, 2))
    value[:, 0, :] = 1.0
    fast_to = np.maximum(units - env.fast_progress, 0)
    one_to = np.maximum(units - 1, 0)
    for _ in range(int(budget)):
        clean, spell = value[:, :, 0], value[:, :, 1]
        fast = (1 - e_fast)[:, None] * clean[:, fast_to] + e_fast[:, None] * spell
        safe = (1 - e_safe)[:, None] * clean[:, one_to] + e_safe[:, None] * spell
        stay_retry = 1 - env.p_recover_retry - env.p_fatal_retry
        stay_repair = 1 - env.p_recover_repair - env.p_fatal_repair
        retry = env.p_recover_retry * clean[:, one_to] + stay_retry * spell
        repair = env.p_recover_repair * clean + stay_repair * spell
        new = np.stack([np.maximum(fast, safe), np.maximum(retry, repair)], axis=2)
        new[:, 0, :] = 1.0
        value = new
    return value[np.arange(n), length, 0]


def state_features(
    units_left: np.ndarray,
    turns_left: np.ndarray,
    in_spell: np.ndarray,
    spell_age: np.ndarray,
    errors: np.ndarray,
    turns_taken: np.ndarray,
) -> np.ndarray:
    """The policy's input (:data:`FEATURES`), ``(N, 5)`` float32."""
    return np.stack(
        [
            units_left / SCALE,
            turns_left / SCALE,
            in_spell.astype(float),
            np.minimum(spell_age, 4) / 4.0,
            errors / np.maximum(turns_taken, 1),
        ],
        axis=1,
    ).astype(np.float32)


def build_policy(hidden: int = 64) -> torch.nn.Module:
    """The policy network: an MLP from :data:`FEATURES` to one logit per action."""
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(len(FEATURES), hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, len(ACTIONS)),
    )


def masked_logits(policy: torch.nn.Module, features: torch.Tensor, in_spell: torch.Tensor
                  ) -> torch.Tensor:
    """Logits with the actions not allowed in the state set to ``-inf``.

    ``fast``/``safe`` are allowed outside a spell, ``retry``/``repair`` inside.
    """
    import torch

    logits = policy(features)
    spell_action = torch.tensor([False, False, True, True])
    allowed = spell_action[None, :] == in_spell[..., None]
    return logits.masked_fill(~allowed, float("-inf"))


def run_episodes(
    policy: torch.nn.Module,
    env: EnvParams,
    length: np.ndarray,
    difficulty: np.ndarray,
    budget: np.ndarray,
    rng: np.random.Generator,
    generator: torch.Generator,
) -> Rollouts:
    """Run one episode per entry, all at once (one policy call per turn index).

    Args:
        policy: The policy network.
        env: Environment parameters.
        length: ``L`` per episode.
        difficulty: ``d`` per episode.
        budget: Turn budget per episode.
        rng: Draws of the environment.
        generator: Draws of the policy's actions.

    Returns:
        The episodes.
    """
    import torch

    n = len(length)
    max_turns = int(budget.max()) if n else 0
    m = 2.0 * difficulty - 1.0
    p_error = np.stack([env.p_error_fast * (1 + env.error_spread * m),
                        env.p_error_safe * (1 + env.error_spread * m)], axis=1)
    gain = np.array([env.fast_progress, 1])
    features = np.zeros((n, max_turns, len(FEATURES)), np.float32)
    in_spell_log = np.zeros((n, max_turns), bool)
    actions = np.zeros((n, max_turns), np.int64)
    events = np.zeros((n, max_turns), np.int8)
    before = np.zeros((n, max_turns), np.int16)
    after = np.zeros((n, max_turns), np.int16)
    mask = np.zeros((n, max_turns), bool)
    progress = np.zeros(n, np.int64)
    in_spell = np.zeros(n, bool)
    spell_age = np.zeros(n, np.int64)
    errors = np.zeros(n, np.int64)
    active = np.ones(n, bool)
    end = np.full(n, ENDS.index("budget"), np.int8)
    rows = np.arange(n)
    for t in range(max_turns):
        active &= t < budget
        if not active.any():
            break
        idx = rows[active]
        feats = state_features(length[idx] - progress[idx], budget[idx] - t, in_spell[idx],
                               spell_age[idx], errors[idx], np.full(len(idx), t))
        with torch.no_grad():
            logits = masked_logits(policy, torch.from_numpy(feats),
                                   torch.from_numpy(in_spell[idx]))
            choice = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
        act = choice[:, 0].numpy()
        u = rng.random(len(idx))
        spell = in_spell[idx]
        event = np.empty(len(idx), np.int8)
        new_progress = progress[idx].copy()
        # outside a spell: error, else progress
        out = ~spell
        err = out & (u < p_error[idx, np.minimum(act, 1)])
        event[err] = EVENTS.index("error")
        ok = out & ~err
        event[ok] = EVENTS.index("progress")
        new_progress[ok] += gain[act[ok]]
        # inside a spell: recover, fatal, or repeat
        retry = act == ACTIONS.index("retry")
        p_rec = np.where(retry, env.p_recover_retry, env.p_recover_repair)
        p_fat = np.where(retry, env.p_fatal_retry, env.p_fatal_repair)
        rec = spell & (u < p_rec)
        fat = spell & ~rec & (u < p_rec + p_fat)
        rep = spell & ~rec & ~fat
        event[rec] = EVENTS.index("recover")
        event[fat] = EVENTS.index("fatal")
        event[rep] = EVENTS.index("repeat")
        new_progress[rec & retry] += 1
        new_progress = np.minimum(new_progress, length[idx])
        features[idx, t] = feats
        in_spell_log[idx, t] = spell
        actions[idx, t] = act
        events[idx, t] = event
        before[idx, t] = progress[idx]
        after[idx, t] = new_progress
        mask[idx, t] = True
        progress[idx] = new_progress
        errors[idx] += err | rep | fat
        spell_age[idx] = np.where(err, 1, np.where(rep, spell_age[idx] + 1, 0))
        in_spell[idx] = err | rep
        won = new_progress >= length[idx]
        end[idx[won]] = ENDS.index("success")
        end[idx[fat]] = ENDS.index("fatal")
        active[idx[won | fat]] = False
    n_turns = mask.sum(axis=1)
    return Rollouts(
        length=length, difficulty=difficulty, budget=budget, features=features,
        in_spell=in_spell_log, actions=actions, events=events, progress_before=before,
        progress_after=after, mask=mask, n_turns=n_turns,
        success=end == ENDS.index("success"), end=end,
    )


# --------------------------------------------------------------------------------------------
# Text: the simulator's style, with errors worded for the built-in rules


_ERROR_OBS = {
    "tool_error": "Error: unit {u} conflicts with a concurrent change ({k} left)",
    "invalid_action": "Invalid action: unit {u} needs a verified predecessor ({k} left)",
    "parse_error": "Could not parse action: batch payload truncated at unit {u} ({k} left)",
}
_REPAIR_FAILED = "Error: the fix for unit {u} did not hold; state still inconsistent ({k} left)"
_FATAL = "Error: unit {u} left the account in an unrecoverable state; session closed."
_ERROR_KINDS = ("tool_error", "invalid_action", "parse_error")


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _units(a: int, b: int) -> str:
    return f"unit {a}" if a == b else f"units {a}-{b}"


def render_episode(
    rollouts: Rollouts, i: int, *, run: str, task_id: str, sample: int, seed: int
) -> Trajectory:
    """Episode ``i`` of ``rollouts`` as a canonical :class:`~recovery.schema.Trajectory`.

    Actions are tool calls; observations say what happened and how many units and turns are
    left. Error observations start with ``Error:``, ``Invalid action:`` or ``Could not parse
    action:``, which the built-in rules mark. Each turn's ``meta`` holds the truth:
    ``choice``, ``event``, ``true_error``, ``true_kind``, ``progress_before``,
    ``progress_after``, ``turns_left`` (before the turn).
    """
    length = int(rollouts.length[i])
    budget = int(rollouts.budget[i])
    n = int(rollouts.n_turns[i])
    kind_rng = np.random.default_rng([seed, 7, zlib.crc32(task_id.encode()), sample, budget])
    kinds = kind_rng.integers(len(_ERROR_KINDS), size=max(n, 1))
    turns: list[Turn] = []
    failed_action = ""
    spell_kind: str | None = None
    for t in range(n):
        act = ACTIONS[int(rollouts.actions[i, t])]
        event = EVENTS[int(rollouts.events[i, t])]
        p0, p1 = int(rollouts.progress_before[i, t]), int(rollouts.progress_after[i, t])
        left = budget - t - 1
        status = f"{_plural(length - p1, 'unit')} to go, {_plural(left, 'turn')} left."
        nxt = p0 + 1
        if act == "fast":
            last = min(p0 + 2, length)
            span = f"{nxt}" if last == nxt else f"{nxt}-{last}"
            action = f'apply_batch(units="{span}", verify=false)'
        elif act == "safe":
            action = f"apply_unit(unit={nxt}, verify=true)"
        elif act == "retry":
            action = failed_action
        else:
            action = f"diagnose_and_fix(unit={nxt})"
        if event == "progress":
            obs = f"Applied {_units(nxt, p1)}" + (" and verified it. " if act == "safe" else ". ")
            obs += status
        elif event == "error":
            spell_kind = _ERROR_KINDS[int(kinds[t])]
            failed_action = action
            obs = _ERROR_OBS[spell_kind].format(u=nxt, k=_plural(left, "turn"))
        elif event == "repeat":
            obs = (_ERROR_OBS[spell_kind or "tool_error"] if act == "retry"
                   else _REPAIR_FAILED).format(u=nxt, k=_plural(left, "turn"))
        elif event == "fatal":
            obs = _FATAL.format(u=nxt)
        elif act == "retry":  # recover with progress
            obs = f"Applied {_units(nxt, p1)} on retry. {status}"
        else:
            obs = f"Fixed: unit {nxt} is consistent again. {status}"
        is_error = event in ("error", "repeat", "fatal")
        turns.append(Turn(action=action, observation=obs, meta={
            "choice": act,
            "event": event,
            "true_error": "visible" if is_error else None,
            "true_kind": spell_kind if is_error else None,
            "progress_before": p0,
            "progress_after": p1,
            "turns_left": budget - t,
        }))
        if event == "recover":
            spell_kind = None
    success = bool(rollouts.success[i])
    return Trajectory(
        run=run,
        task_id=task_id,
        turns=turns,
        success=success,
        sample=sample,
        budget=budget,
        reward=1.0 if success else 0.0,
        prompt=f"Task {task_id}: apply {length} change units to the account within {budget} turns.",
        meta={
            "generator": "budgetmix-train-sim",
            "policy": run,
            "seed": seed,
            "task": {"length": length, "difficulty": float(rollouts.difficulty[i])},
            "end": ENDS[int(rollouts.end[i])],
        },
    )


# --------------------------------------------------------------------------------------------
# The trainer's PRM


class _TrainerPRM:
    """The prm package's scikit-learn baseline, fitted on recent rollouts via a store."""

    def __init__(self, labels: str):
        self.labels = labels

    def fit(self, trajectories: list[Trajectory]) -> _TrainerPRM:
        """Ingest into an in-memory store, read targets, fit (refit keeps the last model when
        the targets are all one class: nothing to learn).

        Returns:
            ``self``.
        """
        if not hasattr(self, "n_fits_"):
            self.baseline_: Any = None
            self.n_fits_ = 0
        from prm.baseline import TfidfStepBaseline, turn_frame
        from prm.data import load_step_examples
        from recovery.store import connect, ingest_trajectories

        con = connect(None)
        try:
            ingest_trajectories(con, trajectories, source="train-sim")
            examples = load_step_examples(con, labels=self.labels, base="outcome")
        finally:
            con.close()
        frame = turn_frame(examples)
        try:
            self.baseline_ = TfidfStepBaseline(max_features=5000).fit(
                frame, frame["target"].to_numpy()
            )
        except ValueError:  # all one class: keep the previous model
            return self
        self.n_fits_ += 1
        return self

    def score(self, trajectories: list[Trajectory]) -> np.ndarray:
        """Scores of every turn, trajectory by trajectory (flat, in turn order).

        Turns with the same four text fields get the same score, so each distinct one is
        scored once (the episodes repeat a small vocabulary of texts).
        """
        import pandas as pd

        from prm.baseline import FIELDS, turn_frame
        from prm.data import StepExample, step_text

        examples = [
            StepExample(traj_id=str(k), run=tr.run, task_id=tr.task_id, prompt=tr.prompt,
                        steps=[step_text(u.action, u.observation) for u in tr.turns],
                        targets=[float("nan")] * len(tr.turns))
            for k, tr in enumerate(trajectories)
        ]
        frame = turn_frame(examples)
        codes, _ = pd.factorize(pd.Series(
            ["\x1f".join(row) for row in frame[list(FIELDS)].itertuples(index=False)]))
        _, first = np.unique(codes, return_index=True)  # first row of each distinct text
        scores = np.asarray(self.baseline_.score_steps(frame.iloc[first]), dtype=float)
        return scores[codes]

    def save(self, directory: Path) -> None:
        """Write a model directory that ``prm score --model`` reads."""
        import joblib

        from prm.baseline import BASELINE_FILE
        from prm.model import PRMSpec

        directory.mkdir(parents=True, exist_ok=True)
        joblib.dump(self.baseline_, directory / BASELINE_FILE)
        PRMSpec(kind="sklearn", backbone="sklearn", labels=self.labels,
                label_base="outcome").save(directory)


# --------------------------------------------------------------------------------------------
# Training


def group_advantages(
    returns: np.ndarray, mask: np.ndarray, group_size: int, std_normalise: bool = True,
    eps: float = 1e-6,
) -> np.ndarray:
    """Per-turn advantages ``(G_t - mean_g(G_1)) / (std_g(G_1) + eps)`` over groups.

    A group whose ``G_1`` are all equal (std below ``eps``) is not divided by its std: without
    shaping its advantages are then 0, as in GRPO; with shaping they keep the per-turn terms.

    Args:
        returns: ``(N, max_turns)`` returns-to-go; episodes of a group are consecutive rows.
        mask: True on real turns.
        group_size: Episodes per group (``N`` is a multiple of it).
        std_normalise: Divide by the group's standard deviation of ``G_1``.
        eps: Added to the standard deviation.

    Returns:
        ``(N, max_turns)`` advantages, 0 on padding.
    """
    first = returns[:, 0].reshape(-1, group_size)
    mean = np.repeat(first.mean(axis=1), group_size)
    adv = returns - mean[:, None]
    if std_normalise:
        std = first.std(axis=1)
        std = np.repeat(np.where(std < eps, 1.0, std + eps), group_size)
        adv = adv / std[:, None]
    return np.where(mask, adv, 0.0)


def _mode_seed(seed: int, mode: str) -> list[int]:
    return [int(seed), zlib.crc32(mode.encode("utf-8"))]


def train_policy(
    mode: str,
    config: TrainSimConfig,
    env: EnvParams,
    schedule: BudgetSchedule | None,
    *,
    log: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[torch.nn.Module, _TrainerPRM | None]:
    """Train one policy under ``mode``; returns it and its PRM (``budgetmix+prm``)."""
    import torch

    kind, fixed_budget = parse_mode(mode)
    if kind != "fixed" and schedule is None:
        raise ValueError(f"mode {mode} needs a schedule")
    seeds = _mode_seed(config.seed, mode)
    rng = np.random.default_rng([*seeds, 1])
    generator = torch.Generator().manual_seed(int(np.random.default_rng([*seeds, 2]).integers(2**62)))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(np.random.default_rng([*seeds, 3]).integers(2**62)))
        policy = build_policy(config.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    use_prm = kind == "budgetmix+prm"
    prm = _TrainerPRM(config.prm_labels) if use_prm else None
    window: list[list[Trajectory]] = []
    first_fit = max(1, round(config.prm_warmup * config.iterations))
    g, b = config.group_size, config.tasks_per_iteration
    for it in range(config.iterations):
        length, difficulty = draw_tasks(env, rng, b)
        group_budget = (np.full(b, fixed_budget) if kind == "fixed"
                        else schedule.sample(rng, b))  # type: ignore[union-attr]
        roll = run_episodes(policy, env, np.repeat(length, g), np.repeat(difficulty, g),
                            np.repeat(group_budget, g), rng, generator)
        outcome = roll.success.astype(float)
        mask = roll.mask
        texts: list[Trajectory] = []
        if use_prm:
            texts = [render_episode(roll, i, run=mode, task_id=f"it{it:05d}-{i // g:03d}",
                                    sample=i % g, seed=config.seed) for i in range(len(roll))]
            window = [*window[-(config.prm_window - 1):], texts] if config.prm_window > 1 else [texts]
            if it + 1 >= first_fit and (it + 1 - first_fit) % config.prm_every == 0:
                prm.fit([tr for batch in window for tr in batch])  # type: ignore[union-attr]
        if use_prm and getattr(prm, "baseline_", None) is not None:
            flat_mask = mask.reshape(-1)
            scores = np.zeros(mask.size)
            scores[flat_mask] = prm.score(texts)  # type: ignore[union-attr]
            t_index = np.broadcast_to(np.arange(mask.shape[1]), mask.shape)
            is_first = (t_index == 0)[mask]
            is_last = (t_index == roll.n_turns[:, None] - 1)[mask]
            group_mean = np.repeat(outcome.reshape(-1, g).mean(axis=1), g)
            shaped = shape_rewards(scores[flat_mask], is_first, is_last,
                                   np.repeat(outcome, roll.n_turns), lam=config.lam,
                                   gamma=config.gamma,
                                   initial_potential=np.repeat(group_mean, roll.n_turns))
            rewards = np.zeros(mask.shape)
            rewards[mask] = shaped.total
        else:
            rewards = np.zeros(mask.shape)
            rewards[np.arange(len(roll)), roll.n_turns - 1] = outcome
        returns = discounted_returns(rewards, mask, config.gamma if use_prm else 1.0)
        adv = group_advantages(returns, mask, g, config.std_normalise)
        feats = torch.from_numpy(roll.features[mask])
        logits = masked_logits(policy, feats, torch.from_numpy(roll.in_spell[mask]))
        logp_all = torch.log_softmax(logits, -1)
        acts = torch.from_numpy(roll.actions[mask])
        logp = logp_all.gather(1, acts[:, None])[:, 0]
        probs = logp_all.exp()
        entropy = -(probs * logp_all.masked_fill(probs == 0, 0.0)).sum(-1)
        adv_t = torch.from_numpy(adv[mask]).float()
        loss = -(adv_t * logp).mean() - config.entropy_coef * entropy.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if log is not None:
            log({
                "iteration": it,
                "success": float(outcome.mean()),
                "mean_budget": float(group_budget.mean()),
                "mean_turns": float(roll.n_turns.mean()),
                "fast_share": float((roll.actions[mask & ~roll.in_spell] == 0).mean())
                if (mask & ~roll.in_spell).any() else None,
                "retry_share": float((roll.actions[mask & roll.in_spell] == 2).mean())
                if (mask & roll.in_spell).any() else None,
                "loss": float(loss.detach()),
                "prm": getattr(prm, "baseline_", None) is not None,
            })
    return policy, prm


def evaluate_policy(
    policy: torch.nn.Module,
    mode: str,
    env: EnvParams,
    budgets: Sequence[int],
    n_tasks: int,
    n_samples: int,
    seed: int,
) -> list[Trajectory]:
    """Run the policy on the shared held-out tasks at every budget; return the episodes.

    Tasks depend only on ``seed`` (every mode sees the same ones, ``task_id`` ``eval0000``...);
    the episodes' draws depend on ``seed``, the mode and the budget.
    """
    import torch

    length, difficulty = eval_tasks(env, seed, n_tasks)
    out: list[Trajectory] = []
    width = max(4, len(str(n_tasks - 1)))
    for budget in budgets:
        seeds = [*_mode_seed(seed, mode), 100, int(budget)]
        rng = np.random.default_rng(seeds)
        generator = torch.Generator().manual_seed(int(np.random.default_rng([*seeds, 1]).integers(2**62)))
        roll = run_episodes(policy, env, np.repeat(length, n_samples),
                            np.repeat(difficulty, n_samples),
                            np.full(n_tasks * n_samples, int(budget)), rng, generator)
        for i in range(len(roll)):
            out.append(render_episode(roll, i, run=mode, task_id=f"eval{i // n_samples:0{width}d}",
                                      sample=i % n_samples, seed=seed))
    return out


def resolve_schedule(config: TrainSimConfig) -> BudgetSchedule:
    """The BudgetMix schedule: ``config.schedule`` when given, else uniform over the range."""
    if config.schedule is not None:
        return BudgetSchedule.load(config.schedule)
    return uniform_schedule(parse_budget_range(config.budget_range))


def train_sim(
    config: TrainSimConfig, env: EnvParams | None = None, *, echo: Callable[[str], Any] = print
) -> TrainSimResult:
    """Train and evaluate every mode of ``config``; write rollouts, policies and a summary.

    Args:
        config: What to run.
        env: Environment parameters (default :class:`EnvParams`).
        echo: Where progress lines go.

    Returns:
        The files written, per mode.
    """
    import torch

    previous_threads = torch.get_num_threads()
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    try:
        return _train_sim(config, env or EnvParams(), echo)
    finally:
        torch.set_num_threads(previous_threads)


def _train_sim(config: TrainSimConfig, env: EnvParams, echo: Callable[[str], Any]) -> TrainSimResult:
    from safetensors.torch import save_file

    modes = list(config.modes)
    for mode in modes:
        parse_mode(mode)
    if len(set(modes)) != len(modes):
        raise ValueError(f"repeated mode in {modes}")
    if config.iterations < 1 or config.tasks_per_iteration < 1 or config.group_size < 2:
        raise ValueError("need iterations >= 1, tasks_per_iteration >= 1 and group_size >= 2")
    if not config.eval_budgets or min(config.eval_budgets) < 1:
        raise ValueError(f"eval_budgets must be positive, got {config.eval_budgets}")
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    needs_schedule = any(parse_mode(m)[0] != "fixed" for m in modes)
    schedule = resolve_schedule(config) if needs_schedule else None
    schedule_path = schedule.save(out / "schedule.json") if schedule is not None else None
    results = []
    for mode in modes:
        started = time.perf_counter()
        stem = mode_file_stem(mode)
        log_path = out / f"{stem}.train.jsonl"
        with open(log_path, "w", encoding="utf-8") as log_fh:
            policy, prm = train_policy(
                mode, config, env, schedule,
                log=lambda row, fh=log_fh: fh.write(json.dumps(row) + "\n"),
            )
        policy_path = out / f"{stem}.policy.safetensors"
        save_file({k: v.contiguous() for k, v in policy.state_dict().items()}, str(policy_path))
        prm_path = None
        if getattr(prm, "baseline_", None) is not None:
            prm_path = out / f"{stem}.prm"
            prm.save(prm_path)
        trajectories = evaluate_policy(policy, mode, env, config.eval_budgets, config.eval_tasks,
                                       config.eval_samples, config.seed)
        rollouts = out / f"{stem}.jsonl"
        write_jsonl(trajectories, rollouts)
        success: dict[int, list[bool]] = {}
        for traj in trajectories:
            success.setdefault(int(traj.budget), []).append(bool(traj.success))
        result = ModeResult(
            mode=mode, rollouts=rollouts, policy=policy_path, log=log_path, prm=prm_path,
            wall_s=time.perf_counter() - started,
            eval_success={t: float(np.mean(v)) for t, v in sorted(success.items())},
            n_prm_fits=getattr(prm, "n_fits_", 0),
        )
        results.append(result)
        rates = ", ".join(f"T={t}: {v:.2f}" for t, v in result.eval_success.items())
        echo(f"{mode}: {rollouts} ({result.wall_s:.1f} s); success {rates}")
    summary_path = out / "train_sim.json"
    summary = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()},
        "env": asdict(env),
        "schedule": schedule.to_dict() if schedule is not None else None,
        "modes": [
            {
                "mode": r.mode,
                "rollouts": r.rollouts.name,
                "policy": r.policy.name,
                "log": r.log.name,
                "prm": r.prm.name if r.prm else None,
                "wall_s": round(r.wall_s, 3),
                "eval_success": {str(t): v for t, v in r.eval_success.items()},
                "n_prm_fits": r.n_prm_fits,
            }
            for r in results
        ],
    }
    summary_path.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return TrainSimResult(out=out, modes=results, summary=summary_path, schedule=schedule_path)
