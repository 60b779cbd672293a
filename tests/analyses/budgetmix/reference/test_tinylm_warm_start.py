"""The tiny chat model's warm-up data and steps (``analyses.budgetmix.reference.tinylm``):
scripted episodes played to their end, and mini-batch warm-up steps."""

from __future__ import annotations

import math

import pytest


def _rows(n: int, budget: int) -> list[dict]:
    return [{"prompt": [{"role": "user", "content": "Call one tool per turn.\n"}],
             "task_id": f"t{i}", "task_length": 2 + i % 4, "difficulty": 0.5, "seed": i,
             "max_turns": budget} for i in range(n)]


def test_scripted_episodes_played_to_their_end_stop_at_the_finish_or_the_budget():
    from analyses.budgetmix.reference.textenv import UnitsTaskEnv
    from analyses.budgetmix.reference.tinylm import scripted_conversations

    for budget in (2, 8):
        conversations = scripted_conversations(UnitsTaskEnv, _rows(12, budget), n_turns=None)
        for row, messages in zip(_rows(12, budget), conversations, strict=True):
            env = UnitsTaskEnv()
            env.reset(**row)
            calls = [m for m in messages if m["role"] == "assistant"]
            for message in calls:
                call = message["tool_calls"][0]["function"]
                getattr(env, call["name"])(**call["arguments"])
            assert len(calls) <= budget
            assert env.finished is not None or len(calls) == budget  # nothing cut short
            if len(calls) < budget:
                assert "finished" not in messages[-1]["content"]  # no call after the end
    # a fixed number of turns is still what it was
    fixed = scripted_conversations(UnitsTaskEnv, _rows(3, 8), n_turns=3)
    assert [len(m) for m in fixed] == [7, 7, 7]


def test_mini_batch_warm_up_steps_train():
    pytest.importorskip("transformers")
    from analyses.budgetmix.reference.textenv import UnitsTaskEnv
    from analyses.budgetmix.reference.tinylm import (
        WarmStartOptions,
        build_model,
        chat_tokenizer,
        scripted_conversations,
        supervised_warm_start,
    )

    tools = [{"type": "function", "function": {"name": "apply_unit", "description": "x",
                                               "parameters": {"type": "object",
                                                              "properties": {}}}}]
    conversations = scripted_conversations(UnitsTaskEnv, _rows(6, 4), n_turns=None)
    tokenizer = chat_tokenizer(conversations, tools)
    model = build_model(tokenizer)
    first = supervised_warm_start(model, tokenizer, conversations, tools,
                                  WarmStartOptions(steps=1, batch_size=2))
    last = supervised_warm_start(model, tokenizer, conversations, tools,
                                 WarmStartOptions(steps=30, batch_size=2))
    assert math.isfinite(first) and last < first
