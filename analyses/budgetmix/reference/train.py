"""The reference BudgetMix trainer: a policy gradient with a group baseline (GRPO-style) on the
simulated task of :mod:`analyses.budgetmix.reference.env`.

Each iteration draws ``tasks_per_iteration`` tasks, runs ``group_size`` episodes of each at one
budget, and gives every turn of episode ``i`` the advantage
``(G_t - mean_group(G_1)) / (std_group(G_1) + eps)``, where ``G_t`` is the return from turn
``t`` on (without shaping: the outcome, 1 or 0). Modes:

- ``fixed:T``: every group runs at budget ``T``;
- ``budgetmix``: each group's budget is drawn from a
  :class:`~analyses.budgetmix.schedule.BudgetSchedule` (default: uniform over ``budget_range``);
- ``budgetmix+prm``: as ``budgetmix``, plus PRM-shaped per-turn rewards
  (:func:`analyses.budgetmix.shaping.shape_rewards`) from a PRM fitted on the policy's own
  rollouts: after a warm-up the rollouts of the last iterations are fitted, refitted every
  ``prm_every`` iterations. The PRM is a :class:`~analyses.budgetmix.scorer.StepScorer` the
  caller passes in (``recovery budgetmix train-sim`` builds the prm package's scikit-learn
  baseline). ``phi(s_1)`` is the group's mean outcome. With ``gamma = 1`` the shaped return
  from turn ``t`` is ``R - lambda * phi(s_t)``: the shaping acts as a state-dependent baseline
  (the expected gradient is unchanged; only its variance is), and with ``lambda = 1`` a turn's
  advantage is ``(R - p_(t-1)) / std``.

After training, each mode's policy is run (sampling its actions) on shared held-out tasks at
every ``eval_budgets`` budget, and the episodes are written as canonical JSONL
(``<out>/<mode>.jsonl``, ``run`` = the mode, ``budget`` set) in the simulator's style
(:mod:`analyses.budgetmix.reference.text`). ``recovery analyze --mode budgeted`` measures them.

Example:
    >>> from analyses.budgetmix.reference.train import TrainSimConfig, train_sim
    >>> result = train_sim(TrainSimConfig(modes=["fixed:8", "budgetmix"], out="sim-out"))
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analyses.budgetmix.reference.env import EnvParams, draw_tasks, eval_tasks
from analyses.budgetmix.reference.policy import build_policy, masked_logits
from analyses.budgetmix.reference.rollout import EpisodeBatch, run_episodes
from analyses.budgetmix.reference.text import render_episode
from analyses.budgetmix.schedule import BudgetSchedule, parse_budget_range, uniform_schedule
from analyses.budgetmix.scorer import ScorerFactory, StepScorer
from analyses.budgetmix.shaping import ShapingOptions, discounted_returns, shape_rewards
from recovery.config import CheckedOptions, opt
from recovery.errors import UsageProblem
from recovery.jsonsafe import dumps, write_json
from recovery.schema import Trajectory, write_jsonl

if TYPE_CHECKING:
    import torch

MODE_KINDS = ("fixed", "budgetmix", "budgetmix+prm")
"""Kinds of training mode (``fixed`` takes a budget: ``fixed:T``)."""


@dataclass
class TrainSimConfig(CheckedOptions):
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
        "outcome", "Label source of the trainer's PRM (see prm.data.labels).",
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
        UsageProblem: for an unknown mode or a bad budget.
    """
    if mode.startswith("fixed:"):
        try:
            budget = int(mode.split(":", 1)[1])
        except ValueError:
            raise UsageProblem(f"bad mode {mode!r}: expected fixed:T with an integer T") from None
        if budget < 1:
            raise UsageProblem(f"bad mode {mode!r}: T must be positive")
        return "fixed", budget
    if mode in ("budgetmix", "budgetmix+prm"):
        return mode, None
    raise UsageProblem(f"unknown mode {mode!r}; use fixed:T, budgetmix or budgetmix+prm")


def mode_file_stem(mode: str) -> str:
    """File stem of a mode's outputs (``fixed:8`` -> ``fixed-8``)."""
    return mode.replace(":", "-")



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
    scorer_factory: ScorerFactory | None = None,
    log: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[torch.nn.Module, StepScorer | None]:
    """Train one policy under ``mode``; returns it and its PRM (``budgetmix+prm``).

    Long because it is one training loop whose iteration (rollouts, PRM fit, advantages, update,
    log) shares the set-up's seeds, optimizer and window of trajectories.

    Args:
        mode: The training mode.
        config: What to run.
        env: Environment parameters.
        schedule: The BudgetMix schedule (needed by the BudgetMix modes).
        scorer_factory: Builds the PRM of ``budgetmix+prm``.
        log: Called with one dict per iteration.
    """
    import torch

    kind, fixed_budget = parse_mode(mode)
    if kind != "fixed" and schedule is None:
        raise ValueError(f"mode {mode} needs a schedule")
    use_prm = kind == "budgetmix+prm"
    if use_prm and scorer_factory is None:
        raise ValueError(f"mode {mode} needs a PRM scorer (scorer_factory)")
    seeds = _mode_seed(config.seed, mode)
    rng = np.random.default_rng([*seeds, 1])
    generator = torch.Generator().manual_seed(int(np.random.default_rng([*seeds, 2]).integers(2**62)))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(np.random.default_rng([*seeds, 3]).integers(2**62)))
        policy = build_policy(config.hidden)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.lr)
    prm = scorer_factory() if use_prm else None  # type: ignore[misc]
    window: list[list[Trajectory]] = []
    first_fit = max(1, round(config.prm_warmup * config.iterations))
    g, b = config.group_size, config.tasks_per_iteration
    for it in range(config.iterations):
        length, difficulty = draw_tasks(env, rng, b)
        group_budget = (np.full(b, fixed_budget) if kind == "fixed"
                        else schedule.sample(rng, b))  # type: ignore[union-attr]
        roll = run_episodes(policy, env, EpisodeBatch(np.repeat(length, g),
                                                      np.repeat(difficulty, g),
                                                      np.repeat(group_budget, g)),
                            rng, generator)
        outcome = roll.success.astype(float)
        mask = roll.mask
        texts: list[Trajectory] = []
        if use_prm:
            texts = [render_episode(roll, i, run=mode, task_id=f"it{it:05d}-{i // g:03d}",
                                    sample=i % g, seed=config.seed) for i in range(len(roll))]
            window = [*window[-(config.prm_window - 1):], texts] if config.prm_window > 1 else [texts]
            if it + 1 >= first_fit and (it + 1 - first_fit) % config.prm_every == 0:
                prm.fit([tr for batch in window for tr in batch])  # type: ignore[union-attr]
        if prm is not None and prm.n_fits > 0:
            flat_mask = mask.reshape(-1)
            scores = np.zeros(mask.size)
            scores[flat_mask] = prm.score(texts)  # type: ignore[union-attr]
            t_index = np.broadcast_to(np.arange(mask.shape[1]), mask.shape)
            is_first = (t_index == 0)[mask]
            is_last = (t_index == roll.n_turns[:, None] - 1)[mask]
            group_mean = np.repeat(outcome.reshape(-1, g).mean(axis=1), g)
            shaped = shape_rewards(scores[flat_mask], is_first, is_last,
                                   np.repeat(outcome, roll.n_turns), ShapingOptions(
                                       lam=config.lam, gamma=config.gamma,
                                       initial_potential=np.repeat(group_mean, roll.n_turns)))
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
                "prm": prm is not None and prm.n_fits > 0,
            })
    return policy, prm


def evaluate_policy(
    policy: torch.nn.Module, mode: str, env: EnvParams, config: TrainSimConfig,
) -> list[Trajectory]:
    """Run the policy on the shared held-out tasks (``config.eval_tasks`` of them,
    ``config.eval_samples`` each) at every budget of ``config.eval_budgets``; return the
    episodes.

    Tasks depend only on ``config.seed`` (every mode sees the same ones, ``task_id``
    ``eval0000``...); the episodes' draws depend on the seed, the mode and the budget.
    """
    import torch

    budgets, n_tasks, n_samples = config.eval_budgets, config.eval_tasks, config.eval_samples
    seed = config.seed

    length, difficulty = eval_tasks(env, seed, n_tasks)
    out: list[Trajectory] = []
    width = max(4, len(str(n_tasks - 1)))
    for budget in budgets:
        seeds = [*_mode_seed(seed, mode), 100, int(budget)]
        rng = np.random.default_rng(seeds)
        generator = torch.Generator().manual_seed(int(np.random.default_rng([*seeds, 1]).integers(2**62)))
        roll = run_episodes(policy, env, EpisodeBatch(np.repeat(length, n_samples),
                                                      np.repeat(difficulty, n_samples),
                                                      np.full(n_tasks * n_samples, int(budget))),
                            rng, generator)
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
    config: TrainSimConfig,
    env: EnvParams | None = None,
    *,
    scorer_factory: ScorerFactory | None = None,
    echo: Callable[[str], Any] = print,
) -> TrainSimResult:
    """Train and evaluate every mode of ``config``; write rollouts, policies and a summary.

    Args:
        config: What to run.
        env: Environment parameters (default :class:`EnvParams`).
        scorer_factory: Builds a fresh PRM for ``budgetmix+prm`` (a
            :class:`~analyses.budgetmix.scorer.StepScorer`; the CLI passes the prm package's
            scikit-learn baseline). Needed only when that mode runs.
        echo: Where progress lines go.

    Returns:
        The files written, per mode.

    Raises:
        UsageProblem: for a bad or repeated mode, or iterations, tasks, group size or
            evaluation budgets out of range.
    """
    import torch

    previous_threads = torch.get_num_threads()
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    try:
        return _train_sim(config, env or EnvParams(), scorer_factory, echo)
    finally:
        torch.set_num_threads(previous_threads)


def _train_sim(
    config: TrainSimConfig, env: EnvParams, scorer_factory: ScorerFactory | None,
    echo: Callable[[str], Any],
) -> TrainSimResult:
    from safetensors.torch import save_file

    modes = list(config.modes)
    for mode in modes:
        parse_mode(mode)
    if len(set(modes)) != len(modes):
        raise UsageProblem(f"repeated mode in {modes}")
    if config.iterations < 1 or config.tasks_per_iteration < 1 or config.group_size < 2:
        raise UsageProblem("need iterations >= 1, tasks_per_iteration >= 1 and group_size >= 2")
    if not config.eval_budgets or min(config.eval_budgets) < 1:
        raise UsageProblem(f"eval_budgets must be positive, got {config.eval_budgets}")
    if "budgetmix+prm" in modes and scorer_factory is None:
        raise ValueError("mode budgetmix+prm needs a PRM scorer: pass scorer_factory (the "
                         "`recovery budgetmix train-sim` command builds the prm package's)")
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
                mode, config, env, schedule, scorer_factory=scorer_factory,
                log=lambda row, fh=log_fh: fh.write(dumps(row) + "\n"),
            )
        policy_path = out / f"{stem}.policy.safetensors"
        save_file({k: v.contiguous() for k, v in policy.state_dict().items()}, str(policy_path))
        prm_path = None
        if prm is not None and prm.n_fits > 0:
            prm_path = out / f"{stem}.prm"
            prm.save(prm_path)
        trajectories = evaluate_policy(policy, mode, env, config)
        rollouts = out / f"{stem}.jsonl"
        write_jsonl(trajectories, rollouts)
        success: dict[int, list[bool]] = {}
        for traj in trajectories:
            success.setdefault(int(traj.budget), []).append(bool(traj.success))
        result = ModeResult(
            mode=mode, rollouts=rollouts, policy=policy_path, log=log_path, prm=prm_path,
            wall_s=time.perf_counter() - started,
            eval_success={t: float(np.mean(v)) for t, v in sorted(success.items())},
            n_prm_fits=prm.n_fits if prm is not None else 0,
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
    write_json(summary_path, summary, indent=1)
    return TrainSimResult(out=out, modes=results, summary=summary_path, schedule=schedule_path)
