"""The pilot's fixed bank of states and the teacher-forced P(fast | state) of a policy."""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.budgetmix_lm.warmup import ARGUMENTS, FAST, SAFE, next_tool


def state_bank(rows: list[dict[str, Any]], short: int, long_: int,
               seed: int) -> list[list[dict[str, Any]]]:
    """Conversation prefixes where ``short`` turns are left, outside an error spell: each bank
    task's first turn at budget ``short``, and its scripted play at budget ``long_`` (a mixed
    strategy, drawn per task) stopped where ``short`` turns are left, when it gets there clean."""
    from analyses.budgetmix.reference.budget_task import BudgetUnitsEnv
    from analyses.budgetmix.reference.tinylm import tool_call

    rng = np.random.default_rng([int(seed), 43])
    bank = []
    for row in rows:
        env = BudgetUnitsEnv()
        bank.append([{"role": "user", "content": row["prompt"][0]["content"]
                      + env.reset(**dict(row, max_turns=short))}])
        messages = [{"role": "user", "content": row["prompt"][0]["content"]
                     + env.reset(**dict(row, max_turns=long_))}]
        clean, repair, last = (FAST if rng.random() < 0.5 else SAFE), rng.random() < 0.5, ""
        for _ in range(long_ - short):
            if env.finished is not None:
                break
            name = next_tool(clean, bool(repair), last)
            messages.append(tool_call(name, ARGUMENTS[name]))
            last = getattr(env, name)(**ARGUMENTS[name])
            messages.append({"role": "tool", "name": name, "content": last})
        played = (len(messages) - 1) // 2
        if env.finished is None and played == long_ - short and next_tool(FAST, True, last) == FAST:
            bank.append(messages)
    return bank


def _answer_logprob(model: Any, tokenizer: Any, tools: list, prefix: list, name: str) -> float:
    import torch

    from analyses.budgetmix.reference.tinylm import tool_call

    head = tokenizer.apply_chat_template(prefix, tools=tools, tokenize=False,
                                         add_generation_prompt=True)
    full = tokenizer.apply_chat_template([*prefix, tool_call(name, ARGUMENTS[name])],
                                         tools=tools, tokenize=False)
    head_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
    ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    tensor = torch.tensor([ids], device=model.device)
    with torch.no_grad():
        logits = model(input_ids=tensor).logits[0, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    targets = tensor[0, 1:]
    picked = logp[torch.arange(len(targets)), targets][len(head_ids) - 1:]
    return float(picked.sum())


def p_fast(model: Any, tokenizer: Any, tools: list, bank: list[list[dict[str, Any]]]) -> float:
    """Mean over the bank of P(apply_batch) / (P(apply_batch) + P(apply_unit)), each the
    teacher-forced probability of the whole call message (fixed arguments)."""
    model.eval()
    values = []
    for prefix in bank:
        fast = _answer_logprob(model, tokenizer, tools, prefix, FAST)
        safe = _answer_logprob(model, tokenizer, tools, prefix, SAFE)
        values.append(1.0 / (1.0 + np.exp(safe - fast)))
    return float(np.mean(values))
