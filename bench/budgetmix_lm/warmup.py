"""The warm start's scripted conversations, mixing strategies so that GRPO groups vary: each
conversation commits to ``fast`` (``apply_batch``) or ``safe`` (``apply_unit``) with
probability one half, and after an error to ``retry`` (the same tool again) or ``repair``
(``diagnose_and_fix``) with probability one half. The script never looks at the turns left:
the warm-started policy is budget-blind, and only training can make it budget-aware."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

ARGUMENTS: dict[str, dict[str, Any]] = {"apply_batch": {}, "apply_unit": {},
                                        "diagnose_and_fix": {}}
"""The arguments of each tool: none (the environment always works on the next units)."""
FAST, SAFE, REPAIR = "apply_batch", "apply_unit", "diagnose_and_fix"
_ERRORS = ("Error", "Invalid", "Could not")


def next_tool(clean: str, repair: bool, last: str) -> str:
    """The scripted tool after observation ``last``: ``clean`` outside a spell; inside one,
    ``diagnose_and_fix`` when ``repair``, else ``clean`` again (a retry)."""
    if last.startswith(_ERRORS):
        return REPAIR if repair else clean
    return clean


def mixed_conversations(env_factory: Callable[[], Any], rows: list[dict[str, Any]],
                        seed: int) -> list[list[dict[str, Any]]]:
    """One conversation per row (which must carry ``max_turns``), played to the episode's end.

    Returns:
        Message lists: the user prompt with the task, then tool call / tool answer pairs.
    """
    from analyses.budgetmix.reference.tinylm import tool_call

    rng = np.random.default_rng([int(seed), 41])
    conversations = []
    for row in rows:
        clean = FAST if rng.random() < 0.5 else SAFE
        repair = bool(rng.random() < 0.5)
        env = env_factory()
        messages = [{"role": "user", "content": row["prompt"][0]["content"] + env.reset(**row)}]
        last = ""
        for _ in range(int(row["max_turns"])):
            if env.finished is not None:
                break
            name = next_tool(clean, repair, last)
            messages.append(tool_call(name, ARGUMENTS[name]))
            last = getattr(env, name)(**ARGUMENTS[name])
            messages.append({"role": "tool", "name": name, "content": last})
        conversations.append(messages)
    return conversations
