"""verl: a tool agent loop whose assistant-turn limit is the row's ``extra_info.max_turns``.

Written against verl's agent loop as in ``verl-project/verl``
(``verl/experimental/agent_loop/tool_agent_loop.py`` at commit ``f60d13d4``,
``verl/experimental/agent_loop/agent_loop.py`` at ``2994fde4``) and tested inside verl 0.9.1's
own ``AgentLoopWorker`` (``make test-integrations``; only the generation server is a stand-in
there). In verl, ``AgentLoopWorker``
builds one agent-loop object per sample (``hydra.utils.instantiate`` of the registry entry
named by the row's ``agent_name``, or ``actor_rollout_ref.rollout.agent.default_agent_loop``)
and calls ``run(sampling_params, **kwargs)`` with the row's fields, ``extra_info`` among them;
``ToolAgentLoop`` stops when ``self.max_assistant_turns`` generations are made (set from
``actor_rollout_ref.rollout.multi_turn.max_assistant_turns``, one value for every row).

:class:`BudgetedToolAgentLoop` (built on first use, importing verl then) sets that attribute
from the row before running, so each sample stops at its own budget; a row without a budget
keeps the configured one. Register it either way:

- in the trainer's config, ``actor_rollout_ref.rollout.agent.agent_loop_config_path`` naming a
  file written by :func:`write_agent_loop_config` (entries ``name`` and ``_target_``, which
  every Ray worker reads), then ``agent_name: budgetmix_tool_agent`` in the rows or
  ``actor_rollout_ref.rollout.agent.default_agent_loop=budgetmix_tool_agent``;
- or in-process with :func:`register_agent_loop` (verl's own ``@register`` decorator).

verl counts assistant generations, including one whose tool call is then not run: with a
budget of ``T``, at most ``T - 1`` tool calls get an answer.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from analyses.budgetmix.assign import BUDGET_KEY, row_budget
from recovery.jsonsafe import write_json

AGENT_NAME = "budgetmix_tool_agent"
"""The name the agent loop is registered under."""

CLASS_NAME = "BudgetedToolAgentLoop"
"""The class's name in this module (what ``_target_`` points at)."""

TARGET = f"{__name__}.{CLASS_NAME}"
"""The import path hydra instantiates."""


def budgeted_agent_loop(base: type, *, key: str = BUDGET_KEY) -> type:
    """A subclass of verl's agent loop ``base`` whose turn limit comes from each row.

    Args:
        base: ``ToolAgentLoop`` (or any agent loop that reads ``self.max_assistant_turns``).
        key: The budget's name inside ``extra_info`` (or at the row's top level).

    Returns:
        The subclass; its ``run`` sets ``max_assistant_turns`` to the row's budget, then runs.
    """

    class BudgetedToolAgentLoop(base):  # type: ignore[misc, valid-type]
        """verl's tool agent loop, stopping each sample at its row's ``max_turns``."""

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
            budget = row_budget(kwargs, key)
            if budget is not None:
                self.max_assistant_turns = budget
            return await super().run(sampling_params, **kwargs)

    BudgetedToolAgentLoop.__module__ = __name__
    BudgetedToolAgentLoop.__qualname__ = CLASS_NAME
    return BudgetedToolAgentLoop


@functools.cache
def _verl_class() -> type:
    """The agent loop built on verl's ``ToolAgentLoop`` (one class per process)."""
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    return budgeted_agent_loop(ToolAgentLoop)


def __getattr__(name: str) -> Any:
    """``BudgetedToolAgentLoop`` is built (importing verl) when hydra or a user asks for it."""
    if name == CLASS_NAME:
        return _verl_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_agent_loop(name: str = AGENT_NAME) -> type:
    """Register :class:`BudgetedToolAgentLoop` in verl's agent-loop registry under ``name``.

    Only reaches the process it runs in; for Ray workers use :func:`write_agent_loop_config`.

    Args:
        name: The registry name (the rows' ``agent_name`` or ``default_agent_loop``).

    Returns:
        The class.
    """
    from verl.experimental.agent_loop.agent_loop import register

    return register(name)(_verl_class())


def agent_loop_config(name: str = AGENT_NAME) -> list[dict[str, str]]:
    """The entries of an ``agent_loop_config_path`` file: the name and the class to build.

    Args:
        name: The registry name.

    Returns:
        One entry, ``{"name": name, "_target_": TARGET}``.
    """
    return [{"name": name, "_target_": TARGET}]


def write_agent_loop_config(path: str | Path, name: str = AGENT_NAME) -> Path:
    """Write :func:`agent_loop_config` for ``actor_rollout_ref.rollout.agent.agent_loop_config_path``.

    The file is JSON, which is also YAML (verl reads it with ``OmegaConf.load``).

    Args:
        path: Where to write the file.
        name: The registry name.

    Returns:
        The path.
    """
    return write_json(path, agent_loop_config(name), indent=1)
