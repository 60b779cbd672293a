"""TRL: an environment wrapper that ends each episode at its row's ``max_turns`` and returns the
PRM-shaped reward.

Written against trl 1.13.0 (``trl/trainer/grpo_trainer.py``). With ``environment_factory``,
``GRPOTrainer`` makes one environment per rollout, calls ``reset(**row)`` with the dataset row
(so a ``max_turns`` column from ``recovery budgetmix assign`` arrives there), exposes the
environment's public methods as tools, and, when the environment has ``get_reward()``, calls
it once per finished rollout as one more reward source (logged as
``rewards/<class name>/mean``).

TRL's tool loop has no per-rollout stop: it goes on while the model calls tools, up to
``GRPOConfig.max_tool_calling_iterations`` (one cap for every row). So the wrapper ends the
episode itself: after ``max_turns`` tool calls every further call is refused with a fixed
message and changes nothing, the episode's turns stop there, and its reward is computed from
them. Set ``max_tool_calling_iterations`` to the schedule's largest budget so that no rollout
runs longer than any row needs.

The reward: with outcome ``R`` (the wrapped environment's own ``get_reward()``, 0 when it has
none: then add the outcome through ``reward_funcs``) and PRM scores ``p_1..p_n`` of the ``n``
accepted turns, the per-turn rewards are :func:`analyses.budgetmix.shaping.shape_rewards`'s
``r_t = R [t = n] + lambda (gamma phi(s_t+1) - phi(s_t))``, and ``get_reward()`` returns their
sum (an episode without a turn gets ``R - lambda phi(s_1)``). With ``gamma = 1`` that sum is
``R - lambda phi(s_1)`` for every episode: GRPO's group-normalised advantage is then unchanged
by the shaping (a constant shift), as ``docs/budgetmix.md`` explains; the per-turn rewards
are kept on each environment (``budgetmix_episode``), where a reward function reads them
through TRL's ``environments`` argument, and
:class:`~analyses.budgetmix.adapters.trl_credit.TurnCreditGRPOTrainer` turns them into one
advantage per turn, on that turn's tokens.

Example:
    >>> from analyses.budgetmix.adapters.trl import BudgetedEnvOptions, budgeted_environment
    >>> env_cls = budgeted_environment(MyToolEnv, BudgetedEnvOptions(scorer=my_prm, lam=1.0))
    >>> trainer = GRPOTrainer(model, args=GRPOConfig(max_tool_calling_iterations=32, ...),
    ...                       train_dataset=dataset_with_max_turns, environment_factory=env_cls)
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analyses.budgetmix.assign import BUDGET_KEY, row_budget
from analyses.budgetmix.scorer import TurnScorer
from analyses.budgetmix.shaping import DEFAULT_INITIAL_POTENTIAL, ShapingOptions, shape_rewards
from recovery.config import opt
from recovery.errors import InputProblem
from recovery.schema import Trajectory, Turn

REFUSAL = "No turns left: this episode's budget of {budget} turns is used up."
"""What a tool call past the budget returns (nothing else happens)."""

_NOT_TOOLS = frozenset({"reset", "get_reward"})


@dataclass
class BudgetedEpisode:
    """One rollout as the wrapper saw it (the environment's ``budgetmix_episode``).

    Attributes:
        max_turns: The row's budget.
        prompt: What ``reset`` returned (the text the model saw first).
        actions: Each accepted tool call, as ``name({json arguments})``.
        observations: What each accepted call returned.
        refused: Tool calls refused because the budget was used up.
        outcome: ``R``, from the wrapped environment's ``get_reward`` (set when rewarded).
        scores: PRM score of each accepted turn (empty without a scorer).
        rewards: Per-turn shaped rewards (set when rewarded).
        reward: What ``get_reward`` returned: the sum of ``rewards`` (see the module).
        calls: Each tool call in order: ``turn``, ``refused`` or ``malformed`` (arguments that
            do not fit the tool, when the wrapper was built with ``free_malformed``).
        ended_at: Calls (counted in ``calls``) up to the one that ended the episode (the
            environment's ``finished`` set, or the budget used up); ``None`` while it runs.
    """

    max_turns: int
    prompt: str = ""
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    refused: int = 0
    outcome: float | None = None
    scores: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    reward: float | None = None
    calls: list[str] = field(default_factory=list)
    ended_at: int | None = None

    @property
    def n_turns(self) -> int:
        """Accepted turns (never more than ``max_turns``)."""
        return len(self.actions)

    def trajectory(self, run: str = "trl") -> Trajectory:
        """The accepted turns as a :class:`~recovery.schema.Trajectory` (what the PRM reads)."""
        turns = [Turn(action=a, observation=o)
                 for a, o in zip(self.actions, self.observations, strict=True)]
        return Trajectory(run=run, task_id="rollout", turns=turns, success=None,
                          budget=self.max_turns, prompt=self.prompt)


def call_text(name: str, arguments: Mapping[str, Any]) -> str:
    """A tool call as text: ``name({json arguments})`` (the canonical schema's convention)."""
    return f"{name}({json.dumps(dict(arguments), sort_keys=True, ensure_ascii=False, default=str)})"


def _tool_names(env_cls: type) -> list[str]:
    """The public methods TRL would expose as tools (``reset`` and ``get_reward`` are not)."""
    return [name for name, _ in inspect.getmembers(env_cls, predicate=inspect.isfunction)
            if not name.startswith("_") and name not in _NOT_TOOLS]


@dataclass(frozen=True)
class BudgetedEnvOptions:
    """How :func:`budgeted_environment` budgets and rewards an environment."""

    scorer: TurnScorer | None = opt(None, "The PRM (analyses.budgetmix.scorer.TurnScorer); "
                                          "None = no shaping (the reward is the outcome).")
    lam: float = opt(1.0, "Shaping weight lambda.")
    gamma: float = opt(1.0, "Discount gamma of the shaping term.")
    initial_potential: float = opt(DEFAULT_INITIAL_POTENTIAL, "phi(s_1).")
    key: str = opt(BUDGET_KEY, "The row's budget column.")
    default_max_turns: int | None = opt(None, "Budget of a row without one; None = such a row "
                                              "is an error.")
    announce: bool = opt(True, "Append 'You have N turns.' to what reset returns (an "
                               "environment that states its budget itself passes False).")
    on_episode: Callable[[BudgetedEpisode], None] | None = opt(
        None, "Called with each rewarded episode (e.g. to log per-turn rewards).")
    free_malformed: bool = opt(
        False, "A call whose arguments do not fit the tool's signature costs no turn (it "
        "raises TypeError, which TRL reports to the model); by default it is a turn.")


def budgeted_environment(
    env_cls: type, options: BudgetedEnvOptions = BudgetedEnvOptions(),
) -> type:
    """A subclass of ``env_cls`` (named ``Budgeted<name>``) for
    ``GRPOTrainer(environment_factory=...)`` with per-row budgets.

    ``env_cls`` is a TRL environment class (``reset(**row)``, tool methods, optionally
    ``get_reward()`` for the outcome), constructible without arguments (wrap it in a subclass
    to bind arguments). Every public method of it (the tools TRL exposes, except ``reset``
    and ``get_reward``) is wrapped, keeping its name, signature and docstring (TRL builds the
    tool schema from them): a call within the budget runs and is recorded as a turn; a call
    past it returns :data:`REFUSAL` and runs nothing.

    Long because the environment's methods (reset, the reward) are defined inside, closing
    over the options.
    """
    scorer, key, announce = options.scorer, options.key, options.announce
    default_max_turns, on_episode = options.default_max_turns, options.on_episode
    shaping = ShapingOptions(lam=options.lam if scorer is not None else 0.0,
                             gamma=options.gamma, initial_potential=options.initial_potential)
    tools = _tool_names(env_cls)
    if not tools:
        raise ValueError(f"{env_cls.__name__} has no public tool methods to budget")
    has_reward = callable(getattr(env_cls, "get_reward", None))

    def reset(self: Any, **row: Any) -> str | None:
        budget = row_budget(row, key)
        if budget is None:
            budget = default_max_turns
        if budget is None:
            raise InputProblem(f"the dataset row has no {key}; add one with "
                               "`recovery budgetmix assign`, or give default_max_turns")
        observation = env_cls.reset(self, **row)
        note = f"You have {budget} turns." if announce else ""
        text = "\n".join(part for part in (observation, note) if part)
        self.budgetmix_episode = BudgetedEpisode(max_turns=int(budget), prompt=text)
        return text or None

    def get_reward(self: Any) -> float:
        episode: BudgetedEpisode = self.budgetmix_episode
        outcome = float(env_cls.get_reward(self)) if has_reward else 0.0
        n = episode.n_turns
        if n == 0:
            rewards: list[float] = []
            total = outcome - (options.lam * options.initial_potential if scorer is not None
                               else 0.0)
        else:
            scores = (np.asarray(scorer.score([episode.trajectory()]), dtype=float)
                      if scorer is not None else np.zeros(n))
            if scores.shape != (n,):
                raise ValueError(f"the scorer gave {scores.shape} scores for {n} turns")
            first = np.arange(n) == 0
            shaped = shape_rewards(scores, first, first[::-1], np.full(n, outcome), shaping)
            episode.scores = scores.tolist() if scorer is not None else []
            rewards = shaped.total.tolist()
            total = float(shaped.total.sum())
        episode.outcome, episode.rewards, episode.reward = outcome, rewards, total
        if on_episode is not None:
            on_episode(episode)
        return total

    namespace: dict[str, Any] = {"reset": reset, "get_reward": get_reward,
                                 "__doc__": env_cls.__doc__, "__module__": env_cls.__module__,
                                 "budgetmix_scorer": scorer}
    for name in tools:
        namespace[name] = _budgeted_tool(name, getattr(env_cls, name), options.free_malformed)
    return type(f"Budgeted{env_cls.__name__}", (env_cls,), namespace)


def _budgeted_tool(name: str, method: Callable[..., Any],
                   free_malformed: bool = False) -> Callable[..., Any]:
    """``method`` with the budget check in front; async methods stay async (TRL awaits them)."""
    signature = inspect.signature(method)

    def before(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        episode: BudgetedEpisode = self.budgetmix_episode
        if episode.n_turns >= episode.max_turns:
            episode.refused += 1
            episode.calls.append("refused")
            return REFUSAL.format(budget=episode.max_turns)
        try:
            bound = signature.bind(self, *args, **kwargs).arguments
        except TypeError:  # wrong arguments: a turn unless free_malformed; the call reports it
            if free_malformed:
                episode.calls.append("malformed")
                raise
            bound = dict(kwargs)
        episode.calls.append("turn")
        episode.actions.append(call_text(name, {k: v for k, v in bound.items() if k != "self"}))
        return None

    def after(self: Any, result: Any) -> Any:
        episode: BudgetedEpisode = self.budgetmix_episode
        episode.observations.append(result if isinstance(result, str) else str(result))
        if episode.ended_at is None and (episode.n_turns >= episode.max_turns
                                         or getattr(self, "finished", None) is not None):
            episode.ended_at = len(episode.calls)
        return result

    def failed(self: Any, err: Exception) -> None:
        after(self, f"Error: {err}")

    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def async_tool(self: Any, *args: Any, **kwargs: Any) -> Any:
            refusal = before(self, args, kwargs)
            if refusal is not None:
                return refusal
            try:
                result = await method(self, *args, **kwargs)
            except Exception as err:  # the call was made: it is a turn; TRL reports the error
                failed(self, err)
                raise
            return after(self, result)

        return async_tool

    @functools.wraps(method)
    def tool(self: Any, *args: Any, **kwargs: Any) -> Any:
        refusal = before(self, args, kwargs)
        if refusal is not None:
            return refusal
        try:
            result = method(self, *args, **kwargs)
        except Exception as err:  # the call was made: it is a turn; TRL reports the error
            failed(self, err)
            raise
        return after(self, result)

    return tool
