"""The verl adapter against verl's own agent-loop classes (``make test-integrations``).

verl is not installed in the project's venv (it pulls Ray and a CUDA build of torch); these
tests run in ``.venv-integrations`` and skip elsewhere. They check what the stand-in of
``tests/analyses/budgetmix/adapters/test_verl.py`` assumes: ``ToolAgentLoop`` keeps its turn
limit in ``self.max_assistant_turns`` and has an async ``run(sampling_params, **kwargs)``; the
adapter's class is a ``ToolAgentLoop`` that sets the limit from the row before running; and
verl's ``register`` files it under its name.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest

verl_loop = pytest.importorskip(
    "verl.experimental.agent_loop.tool_agent_loop",
    reason="verl is not installed (make test-integrations installs it in .venv-integrations)")
from verl.experimental.agent_loop import agent_loop as verl_agent_loop  # noqa: E402

from analyses.budgetmix.adapters import verl as adapter  # noqa: E402


def test_tool_agent_loop_has_what_the_adapter_relies_on():
    source = inspect.getsource(verl_loop.ToolAgentLoop)
    assert "self.max_assistant_turns" in source
    assert inspect.iscoroutinefunction(verl_loop.ToolAgentLoop.run)
    assert list(inspect.signature(verl_loop.ToolAgentLoop.run).parameters)[:2] == \
        ["self", "sampling_params"]


def test_the_budgeted_loop_is_a_tool_agent_loop_that_sets_the_rows_limit(monkeypatch):
    cls = adapter.BudgetedToolAgentLoop
    assert issubclass(cls, verl_loop.ToolAgentLoop)
    assert f"{cls.__module__}.{cls.__qualname__}" == adapter.TARGET
    seen = []

    async def run(self, sampling_params, **kwargs):  # verl's run, minus the model server
        seen.append(self.max_assistant_turns)
        return kwargs["raw_prompt"]

    monkeypatch.setattr(verl_loop.ToolAgentLoop, "run", run)
    loop = object.__new__(cls)  # __init__ needs a running trainer (server manager, tokenizer)
    loop.max_assistant_turns = 5
    assert asyncio.run(loop.run({}, raw_prompt="a", extra_info={"max_turns": 2})) == "a"
    asyncio.run(loop.run({}, raw_prompt="b", extra_info={}))
    assert seen == [2, 2]  # a row without a budget keeps the loop's current limit


def test_register_files_the_class_in_verls_registry():
    cls = adapter.register_agent_loop()
    assert cls is adapter.BudgetedToolAgentLoop
    assert verl_agent_loop._agent_loop_registry[adapter.AGENT_NAME] == {"_target_": adapter.TARGET}
