"""The verl adapter, tested without verl installed: a stand-in for verl's ``ToolAgentLoop``.

The stand-in does what verl's ``tool_agent_loop.py`` does with the turn limit: the limit is set
on the object at construction (from ``multi_turn.max_assistant_turns``), ``run`` is called once
per sample with the row's fields as keyword arguments, and generation stops once
``assistant_turns >= max_assistant_turns``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json

import pytest

from analyses.budgetmix.adapters import verl as adapter
from recovery.errors import InputProblem


class _ToolAgentLoop:
    """A stand-in for verl's ToolAgentLoop: the model always asks for one more tool call."""

    def __init__(self, max_assistant_turns: int):
        self.max_assistant_turns = max_assistant_turns

    async def run(self, sampling_params, **kwargs):
        assistant_turns = 0
        while True:
            await asyncio.sleep(0)  # a generation (other samples run meanwhile)
            assistant_turns += 1
            if self.max_assistant_turns and assistant_turns >= self.max_assistant_turns:
                return {"assistant_turns": assistant_turns, "raw_prompt": kwargs["raw_prompt"]}


def test_each_sample_stops_at_its_rows_budget():
    loop_cls = adapter.budgeted_agent_loop(_ToolAgentLoop)
    rows = [
        {"raw_prompt": "a", "extra_info": {"index": 0, "max_turns": 2}},
        {"raw_prompt": "b", "extra_info": {"index": 1, "max_turns": 7}},
        {"raw_prompt": "c", "extra_info": {"index": 2}},  # no budget: the configured limit
        {"raw_prompt": "d", "extra_info": None, "max_turns": 3},  # a top-level column works too
    ]

    async def rollout():  # verl builds one loop object per sample and runs them concurrently
        return await asyncio.gather(*[loop_cls(max_assistant_turns=5).run({}, **row)
                                      for row in rows])

    outputs = asyncio.run(rollout())
    assert [o["assistant_turns"] for o in outputs] == [2, 7, 5, 3]
    assert [o["raw_prompt"] for o in outputs] == ["a", "b", "c", "d"]
    with pytest.raises(InputProblem, match="positive integer"):
        asyncio.run(loop_cls(max_assistant_turns=5).run({}, raw_prompt="e",
                                                        extra_info={"max_turns": 0}))


def test_the_registry_target_resolves_to_the_class(tmp_path, monkeypatch):
    cls = adapter.budgeted_agent_loop(_ToolAgentLoop)
    assert f"{cls.__module__}.{cls.__qualname__}" == adapter.TARGET  # what verl's register records
    monkeypatch.setattr(adapter, "_verl_class", lambda: cls)
    module_name, _, attribute = adapter.TARGET.rpartition(".")
    assert getattr(importlib.import_module(module_name), attribute) is cls  # hydra's lookup
    path = adapter.write_agent_loop_config(tmp_path / "agent_loops.yaml")
    entries = json.loads(path.read_text())
    assert entries == [{"name": "budgetmix_tool_agent", "_target_": adapter.TARGET}]
    yaml = pytest.importorskip("yaml")  # verl reads the file with OmegaConf (YAML)
    assert yaml.safe_load(path.read_text()) == entries


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl is installed")
def test_without_verl_the_class_says_what_is_missing():
    with pytest.raises(ImportError, match="verl"):
        adapter.BudgetedToolAgentLoop  # noqa: B018
