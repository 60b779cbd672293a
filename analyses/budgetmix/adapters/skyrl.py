"""SkyRL: a generator whose turn limit is the row's ``max_turns`` (from its ``env_extras``).

Written against ``NovaSky-AI/SkyRL``'s ``skyrl-train`` 0.1.0
(``skyrl-train/skyrl_train/generators/skyrl_gym_generator.py`` at commit ``63bda56b``,
``skyrl-train/skyrl_train/entrypoints/main_base.py`` at ``02a74979``). There, the prompt dataset
puts every column of a row but the prompt and the environment class into the row's
``env_extras``; ``SkyRLGymGenerator.agent_loop`` then sets ``env_extras["max_turns"] =
self.max_turns`` (``generator.max_turns``, one value for every row) before building the
environment with ``skyrl_gym.make(env_class, env_config=..., extras=env_extras)``, and the
environments stop after ``extras["max_turns"]`` turns. So a ``max_turns`` column alone is
overwritten by the global value.

:class:`BudgetedSkyRLGymGenerator` (built on first use, importing SkyRL then) makes
``self.max_turns`` the row's budget while that row's ``agent_loop`` runs (a context variable,
so the concurrent trajectories of one batch each see their own), and the configured
``generator.max_turns`` for a row without one. Install it from your entrypoint::

    from skyrl_train.entrypoints.main_base import BasePPOExp
    from analyses.budgetmix.adapters.skyrl import BudgetedSkyRLGymGenerator

    class BudgetMixPPOExp(BasePPOExp):
        def get_generator(self, cfg, tokenizer, inference_engine_client):
            return BudgetedSkyRLGymGenerator(
                generator_cfg=cfg.generator, skyrl_gym_cfg=cfg.environment.skyrl_gym,
                inference_engine_client=inference_engine_client, tokenizer=tokenizer,
                model_name=cfg.trainer.policy.model.path)
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any

from analyses.budgetmix.assign import BUDGET_KEY, row_budget

CLASS_NAME = "BudgetedSkyRLGymGenerator"
"""The class's name in this module."""


def budgeted_generator(base: type, *, key: str = BUDGET_KEY) -> type:
    """A subclass of SkyRL's generator ``base`` whose ``max_turns`` is each row's budget.

    Args:
        base: ``SkyRLGymGenerator`` (or any generator whose ``agent_loop(prompt, env_class,
            env_extras, ...)`` reads ``self.max_turns``).
        key: The budget's name in ``env_extras``.

    Returns:
        The subclass.
    """
    row_turns: contextvars.ContextVar[int | None] = contextvars.ContextVar(
        f"budgetmix_row_turns_{base.__name__}", default=None)

    class BudgetedSkyRLGymGenerator(base):  # type: ignore[misc, valid-type]
        """SkyRL's generator, stopping each trajectory at its row's ``max_turns``."""

        @property
        def max_turns(self) -> Any:
            """The row's budget inside its ``agent_loop``; else ``generator.max_turns``."""
            budget = row_turns.get()
            return self.__dict__.get("_configured_max_turns") if budget is None else budget

        @max_turns.setter
        def max_turns(self, value: Any) -> None:
            self.__dict__["_configured_max_turns"] = value

        async def agent_loop(self, prompt: Any, env_class: str, env_extras: dict[str, Any],
                             *args: Any, **kwargs: Any) -> Any:
            token = row_turns.set(row_budget(env_extras, key))
            try:
                return await super().agent_loop(prompt, env_class, env_extras, *args, **kwargs)
            finally:
                row_turns.reset(token)

    BudgetedSkyRLGymGenerator.__module__ = __name__
    BudgetedSkyRLGymGenerator.__qualname__ = CLASS_NAME
    return BudgetedSkyRLGymGenerator


@functools.cache
def _skyrl_class() -> type:
    """The generator built on SkyRL's ``SkyRLGymGenerator`` (one class per process)."""
    from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator

    return budgeted_generator(SkyRLGymGenerator)


def __getattr__(name: str) -> Any:
    """``BudgetedSkyRLGymGenerator`` is built (importing SkyRL) when first asked for."""
    if name == CLASS_NAME:
        return _skyrl_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
