"""TRL: per-turn PRM credit inside ``GRPOTrainer``: each turn's tokens get that turn's advantage.

With ``gamma = 1`` the PRM-shaped episode reward is ``R - lambda phi(s_1)`` whatever the PRM
says about the turns in between, and GRPO's group-normalised advantage (one number per
sequence) cannot see the shaping. Credit per turn needs the advantage to vary along the
sequence. trl 1.13's ``GRPOTrainer._compute_loss`` takes an ``advantages`` tensor of shape
``(B,)`` or ``(B, T)`` (it unsqueezes only a 1-d one; ``T`` = completion tokens), and
``_prepare_inputs`` shuffles and splits every tensor of the generation batch along the first
dimension, so a subclass that overrides ``_generate_and_score_completions`` and replaces
``advantages`` by a ``(B, T)`` tensor is enough: no other method changes.

The per-turn advantage (:func:`turn_advantages`) uses the PRM as the value function: with
``phi(s_t)`` the potential of the shaping (``initial_potential`` before the first turn, then
the previous turn's PRM score, 0 after the last turn) and the TD error
``delta_t = R [t = n] + gamma phi(s_t+1) - phi(s_t)`` (the shaped reward with ``lambda = 1``),

    A_t = sum_k (gamma * gae_lambda)^k delta_{t+k}

(GAE with the PRM as critic). ``gamma = gae_lambda = 1`` gives ``A_t = R - phi(s_t)``: the
outcome against the PRM's estimate before turn ``t``; ``gae_lambda = 0`` gives the one-step
``phi(s_t+1) - phi(s_t)`` (``R - phi(s_n)`` on the last turn). The advantages are then
normalised over the turns of each GRPO group (``normalise="group"``: minus the mean, over the
standard deviation + 1e-4, as GRPO does per sequence), over the batch, or not at all.

Tokens to turns (:func:`~analyses.budgetmix.alignment.generation_segments`): TRL's
``tool_mask`` marks the model's tokens; the ``k``-th generation issued the ``k``-th tool call,
which is the ``k``-th turn while the budget lasts. Generations after the last accepted turn
(refused calls, the final answer) get the last turn's advantage; an episode without a turn is
one step with ``A = R - phi(s_1)``. The mapping assumes one tool call per generation (TRL
allows several; then later turns shift onto earlier generations).

The outcome ``R`` is the wrapped environment's ``get_reward`` (the episode's ``outcome``), and
the scores are the ones :func:`~analyses.budgetmix.adapters.trl.budgeted_environment` computed
with its ``scorer``: build the environment with a scorer. That scorer must be blind (the score
of turn ``t`` reads turns ``1..t`` only): ``phi(s_t)`` is a baseline, and a baseline that
depends on later actions, the episode's length or its outcome (the hindsight setting) biases
the policy gradient, so the trainer refuses such a scorer (:func:`check_blind_scorer`).

Two other modes (:class:`TurnCreditConfig`): ``step-groups``, GiGPO's step-level groups
(:mod:`analyses.budgetmix.step_groups`: turns of a group's rollouts in the same state share a
baseline; no PRM), and ``none``, GRPO's episode advantage on every turn.

Example:
    >>> from analyses.budgetmix.adapters.trl_credit import TurnCreditConfig, TurnCreditGRPOTrainer
    >>> env_cls = budgeted_environment(MyToolEnv, BudgetedEnvOptions(scorer=my_prm))
    >>> trainer = TurnCreditGRPOTrainer(model, args=GRPOConfig(...), train_dataset=rows,
    ...                                 environment_factory=env_cls,
    ...                                 turn_credit=TurnCreditConfig(gae_lambda=1.0))
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analyses.budgetmix.adapters.trl import BudgetedEpisode
from analyses.budgetmix.alignment import generation_segments
from analyses.budgetmix.shaping import (
    DEFAULT_INITIAL_POTENTIAL,
    ShapingOptions,
    discounted_returns,
    shape_rewards,
)
from analyses.budgetmix.step_groups import STATE_KEYS, STEP_NORMS, gigpo_advantages, state_keys
from recovery.errors import UsageProblem

CLASS_NAME = "TurnCreditGRPOTrainer"
"""The trainer's name in this module."""

MODES = ("prm", "step-groups", "none")
"""Per-turn credit modes (:class:`TurnCreditConfig`)."""

NORMALISE = ("group", "batch", "none")
"""How turn advantages are normalised."""

EPSILON = 1e-4
"""Added to the standard deviation before dividing (GRPO's value)."""


@dataclass
class TurnCreditConfig:
    """How per-turn advantages are built (:data:`MODES`).

    ``prm``: GAE with the PRM as the value (module docstring), normalised by ``normalise``;
    the environment's scorer must be blind (:func:`check_blind_scorer`). ``step-groups``:
    GiGPO's ``A^E + w A^S`` (:mod:`analyses.budgetmix.step_groups`; ``step_weight``,
    ``step_norm``, ``state_key`` and ``gamma``; ``normalise`` is not applied, GiGPO
    normalises itself). ``none``: no per-turn credit, GRPO's episode advantage on every turn
    (the outcome normalised over each group's episodes by ``normalise``).

    Attributes:
        mode: ``prm``, ``step-groups`` or ``none``.
        gamma: Discount between turns.
        gae_lambda: GAE's lambda: 1 = outcome minus the PRM's value before the turn, 0 = the
            one-step change of the PRM's value.
        initial_potential: ``phi(s_1)``, the value before the first turn.
        normalise: ``group`` (over each GRPO group's turns), ``batch`` or ``none``.
        step_weight: GiGPO's ``w``.
        step_norm: GiGPO's ``F_norm``: ``mean`` (1) or ``std``.
        state_key: What makes two turns the same state: ``history`` or ``observation``.
        zero_tied: ``prm``: a group whose outcomes are all equal gets 0 on every turn. With
            ``gae_lambda = 1`` such a group's advantage is ``-phi(s_t)`` alone: zero in
            expectation (a blind ``phi`` is a baseline) but, normalised, noise at the scale
            of a signal; GRPO gives a tied group no gradient.
    """

    mode: str = field(default="prm", metadata={
        "help": "Per-turn credit: prm (blind PRM as value), step-groups (GiGPO) or none."})
    gamma: float = field(default=1.0, metadata={"help": "Discount between turns."})
    gae_lambda: float = field(default=1.0, metadata={
        "help": "GAE lambda: 1 = R - phi(s_t); 0 = phi(s_t+1) - phi(s_t)."})
    initial_potential: float = field(default=DEFAULT_INITIAL_POTENTIAL, metadata={
        "help": "The PRM value before the first turn."})
    normalise: str = field(default="group", metadata={
        "help": "Normalise turn advantages over each group, the batch, or not (none)."})
    step_weight: float = field(default=1.0, metadata={
        "help": "step-groups: weight w of the step advantage (A = A_episode + w A_step)."})
    step_norm: str = field(default="mean", metadata={
        "help": "step-groups: F_norm, mean (divide by 1) or std."})
    state_key: str = field(default="history", metadata={
        "help": "step-groups: a turn's state, history (everything before it) or observation."})
    zero_tied: bool = field(default=False, metadata={
        "help": "prm: a group whose outcomes are all equal gets advantage 0 (as in GRPO)."})

    def __post_init__(self) -> None:
        """Check the options.

        Raises:
            UsageProblem: for an unknown ``mode``, ``normalise``, ``step_norm`` or
                ``state_key``, or ``gamma`` or ``gae_lambda`` outside [0, 1].
        """
        for name, allowed in (("mode", MODES), ("normalise", NORMALISE),
                              ("step_norm", STEP_NORMS), ("state_key", STATE_KEYS)):
            if getattr(self, name) not in allowed:
                raise UsageProblem(f"{name} must be one of {', '.join(allowed)}, "
                                   f"not {getattr(self, name)!r}")
        if not (0.0 <= self.gamma <= 1.0 and 0.0 <= self.gae_lambda <= 1.0):
            raise UsageProblem("gamma and gae_lambda must lie in [0, 1]")


def future_reads(scorer: Any) -> str | None:
    """What a scorer reads beyond the turns so far (``None`` when nothing: it is blind).

    A scorer says so by ``setting == "hindsight"`` (:class:`prm.online.StructuredStepScorer`:
    the episode's length and end, and its outcome with ``outcome_at_scoring``); blind
    features never read the outcome, whatever ``outcome_at_scoring`` says.
    """
    if getattr(scorer, "setting", None) != "hindsight":
        return None
    outcome = " and its outcome" if getattr(scorer, "outcome_at_scoring", False) else ""
    return f"the hindsight setting (the episode's length and end{outcome})"


def check_blind_scorer(scorer: Any) -> None:
    """Refuse a PRM for per-turn credit that reads anything after the turn it scores.

    Refused rather than warned about: a value ``phi(s_t)`` that depends on later actions is
    not a baseline, it biases the policy gradient (in a tied group the advantage becomes
    ``-phi(s_t)`` rescaled: noise scaled like a signal), and a warning in a training log does
    not stop a run whose result is then wrong. Hindsight scores stay available for analysis.

    Raises:
        UsageProblem: the scorer reads the future (:func:`future_reads`).
    """
    reads = future_reads(scorer)
    if reads is not None:
        raise UsageProblem(f"per-turn credit needs a blind PRM, but this scorer reads {reads}: "
                           "a baseline that depends on later turns biases the policy "
                           "gradient; use StructuredStepScorer(setting='blind')")


def turn_advantages(scores: Sequence[float] | np.ndarray, outcome: float,
                    config: TurnCreditConfig) -> np.ndarray:
    """GAE advantages of one episode's turns with the PRM as the value (see the module).

    Args:
        scores: PRM score of each turn (the last one is never used: the outcome judges it).
        outcome: The episode's outcome ``R``.
        config: Discount, GAE lambda and the initial value.

    Returns:
        One advantage per turn; one value (``R - phi(s_1)``) for an episode without a turn.
    """
    p = np.asarray(scores, dtype=float)
    if p.size == 0:
        return np.array([outcome - config.initial_potential])
    first = np.arange(p.size) == 0
    deltas = shape_rewards(p, first, first[::-1], np.full(p.size, float(outcome)), ShapingOptions(
        lam=1.0, gamma=config.gamma, initial_potential=config.initial_potential)).total
    return discounted_returns(deltas[None, :], np.ones((1, p.size), dtype=bool),
                              gamma=config.gamma * config.gae_lambda)[0]


def normalise_advantages(advantages: Sequence[np.ndarray], group_size: int,
                         how: str) -> list[np.ndarray]:
    """Normalise per-turn advantages over each group of ``group_size`` consecutive episodes.

    Args:
        advantages: One array per episode (GRPO's order: a group's episodes are consecutive).
        group_size: Episodes per group (``num_generations``).
        how: ``group``, ``batch`` or ``none``.

    Returns:
        The normalised arrays (minus the mean, over the standard deviation + 1e-4).
    """
    if how == "none":
        return [np.asarray(a, dtype=float) for a in advantages]
    size = group_size if how == "group" else len(advantages)
    if size < 1 or len(advantages) % size:
        raise ValueError(f"{len(advantages)} episodes do not split into groups of {size}")
    out: list[np.ndarray] = []
    for start in range(0, len(advantages), size):
        group = [np.asarray(a, dtype=float) for a in advantages[start:start + size]]
        flat = np.concatenate(group)
        mean, std = flat.mean(), flat.std(ddof=1) if flat.size > 1 else 0.0
        out += [(a - mean) / (std + EPSILON) for a in group]
    return out


def token_advantages(model_mask: np.ndarray, advantages: Sequence[np.ndarray]) -> np.ndarray:
    """Spread per-turn advantages over tokens: the ``k``-th generation gets turn ``k``'s.

    Args:
        model_mask: ``(B, T)`` 1 on the model's own completion tokens (TRL's ``completion_mask
            * tool_mask``), 0 on tool results and padding.
        advantages: Per episode, one advantage per turn (at least one).

    Returns:
        ``(B, T)`` advantages; 0 where the mask is 0. Generations past the last turn get the
        last turn's advantage.
    """
    segments = generation_segments(model_mask)
    if segments.shape[0] != len(advantages):
        raise ValueError(f"{segments.shape[0]} sequences but {len(advantages)} episodes")
    out = np.zeros(segments.shape, dtype=float)
    for i, adv in enumerate(advantages):
        adv = np.asarray(adv, dtype=float)
        if adv.size == 0:
            raise ValueError("every episode needs at least one advantage")
        seg = segments[i]
        real = seg >= 0
        out[i, real] = adv[np.minimum(seg[real], adv.size - 1)]
    return out


def episode_advantages(episodes: Sequence[BudgetedEpisode], config: TurnCreditConfig,
                       group_size: int) -> list[np.ndarray]:
    """Per-turn advantages of a batch's episodes (in the trainer's order), by ``config.mode``
    (:class:`TurnCreditConfig`); a group is ``group_size`` consecutive episodes.

    Raises:
        ValueError: An episode was not rewarded, has no PRM score per turn (``prm``), or the
            episodes do not split into groups.
    """
    for episode in episodes:
        if episode.outcome is None:
            raise ValueError("an episode was not rewarded: the environment's get_reward must run")
    if config.mode == "none":
        return _episode_level(episodes, config, group_size)
    if config.mode == "step-groups":
        return _step_group_level(episodes, config, group_size)
    raw = []
    for episode in episodes:
        if len(episode.scores) != episode.n_turns:
            raise ValueError("per-turn credit needs a PRM score per turn: build the environment "
                             "with budgeted_environment(..., BudgetedEnvOptions(scorer=...))")
        raw.append(turn_advantages(episode.scores, episode.outcome, config))
    out = normalise_advantages(raw, group_size, config.normalise)
    return _zero_tied_groups(out, episodes, group_size) if config.zero_tied else out


def _zero_tied_groups(advantages: list[np.ndarray], episodes: Sequence[BudgetedEpisode],
                      group_size: int) -> list[np.ndarray]:
    """``advantages`` with every group of equal outcomes set to 0."""
    out = list(advantages)
    for start in range(0, len(episodes), group_size):
        outcomes = {e.outcome for e in episodes[start:start + group_size]}
        if len(outcomes) == 1:
            out[start:start + group_size] = [np.zeros_like(a)
                                              for a in out[start:start + group_size]]
    return out


def _episode_level(episodes: Sequence[BudgetedEpisode], config: TurnCreditConfig,
                   group_size: int) -> list[np.ndarray]:
    """GRPO's advantage (the outcome normalised over the group's episodes) on every turn."""
    outcomes = [np.array([float(e.outcome)]) for e in episodes]  # type: ignore[arg-type]
    normalised = normalise_advantages(outcomes, group_size, config.normalise)
    return [np.full(max(e.n_turns, 1), a[0]) for e, a in zip(episodes, normalised, strict=True)]


def _step_group_level(episodes: Sequence[BudgetedEpisode], config: TurnCreditConfig,
                      group_size: int) -> list[np.ndarray]:
    """GiGPO's ``A^E + w A^S`` over each group of ``group_size`` consecutive episodes."""
    if group_size < 1 or len(episodes) % group_size:
        raise ValueError(f"{len(episodes)} episodes do not split into groups of {group_size}")
    out: list[np.ndarray] = []
    for start in range(0, len(episodes), group_size):
        group = episodes[start:start + group_size]
        keys = [state_keys(e.prompt, e.actions, e.observations, config.state_key) for e in group]
        out += gigpo_advantages([float(e.outcome) for e in group],  # type: ignore[arg-type]
                                keys, weight=config.step_weight, gamma=config.gamma,
                                norm=config.step_norm)
    return out


def turn_credit_trainer(base: type) -> type:
    """A subclass of TRL's ``GRPOTrainer`` (``base``) whose advantages are per turn, per token.

    The subclass takes one more keyword, ``turn_credit`` (a :class:`TurnCreditConfig`), and
    needs ``environment_factory`` built by
    :func:`~analyses.budgetmix.adapters.trl.budgeted_environment` (with a blind scorer in
    ``prm`` mode; ``step-groups`` and ``none`` read no PRM).

    Its constructor raises :class:`~recovery.errors.UsageProblem` for training arguments per-turn
    credit cannot work with (``use_liger_kernel``; ``normalise="group"`` over several
    processes) and, in ``prm`` mode, for an environment whose scorer reads the future (the
    hindsight setting, :func:`check_blind_scorer`). A batch whose environments were not built by ``budgeted_environment``, or
    whose episodes lack a reward or a score per turn, is a ``ValueError``: the trainer was
    wired wrongly in code.
    """

    class TurnCreditGRPOTrainer(base):  # type: ignore[misc, valid-type]
        """TRL's GRPOTrainer with per-turn credit (blind PRM, step groups or none) on each
        turn's tokens."""

        def __init__(self, *args: Any, turn_credit: TurnCreditConfig | None = None,
                     **kwargs: Any) -> None:
            credit = turn_credit or TurnCreditConfig()
            if credit.mode == "prm":  # before the model loads: a hindsight PRM is refused
                check_blind_scorer(getattr(kwargs.get("environment_factory"),
                                           "budgetmix_scorer", None))
            super().__init__(*args, **kwargs)
            self.turn_credit = credit
            if getattr(self.args, "use_liger_kernel", False):
                raise UsageProblem("per-turn credit does not work with use_liger_kernel "
                                   "(its loss takes one advantage per sequence)")
            processes = getattr(getattr(self, "accelerator", None), "num_processes", 1)
            if processes > 1 and self.turn_credit.normalise == "group":
                raise UsageProblem("normalise='group' needs one process (a group may span "
                                   "processes); use normalise='batch'")
            if processes > 1 and self.turn_credit.mode == "step-groups":
                raise UsageProblem("mode='step-groups' needs one process (a group's rollouts "
                                   "may span processes)")

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            import torch

            output = super()._generate_and_score_completions(inputs)
            environments = getattr(self, "environments", None) or []
            episodes = [getattr(env, "budgetmix_episode", None) for env in environments]
            if not episodes or any(e is None for e in episodes):
                raise ValueError("per-turn credit needs environment_factory=budgeted_environment(...)")
            mask = output["completion_mask"]
            if output.get("tool_mask") is not None:
                mask = mask * output["tool_mask"]
            group = self.num_generations if self.model.training else self.num_generations_eval
            per_turn = episode_advantages(episodes, self.turn_credit, group)
            values = token_advantages(mask.detach().cpu().numpy(), per_turn)
            advantages = output["advantages"]
            output["advantages"] = torch.as_tensor(values, dtype=advantages.dtype,
                                                   device=advantages.device)
            self.budgetmix_turn_advantages = per_turn  # the last batch's, for inspection
            return output

    TurnCreditGRPOTrainer.__module__ = __name__
    TurnCreditGRPOTrainer.__qualname__ = CLASS_NAME
    return TurnCreditGRPOTrainer


@functools.cache
def _trl_class() -> type:
    """The trainer built on trl's ``GRPOTrainer`` (one class per process)."""
    from trl import GRPOTrainer

    return turn_credit_trainer(GRPOTrainer)


def __getattr__(name: str) -> Any:
    """``TurnCreditGRPOTrainer`` is built (importing trl) when first asked for."""
    if name == CLASS_NAME:
        return _trl_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
