"""Evaluation rollouts of a policy (sampling, temperature 1.0 as in training), all episodes in
lockstep batches, with the same rules as training: a call that does not parse ends the episode
(TRL sees no tool call), a call to an unknown tool or with arguments that do not fit costs no
turn (answered with an error; at most ``MAX_MALFORMED`` per episode)."""

from __future__ import annotations

import json
import re
from typing import Any

TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
MAX_MALFORMED = 2


def _episodes(env_cls: Any, rows: list[dict[str, Any]], budgets: list[int],
              samples: int) -> list[dict[str, Any]]:
    from analyses.budgetmix.reference.budget_task import rollout_factory

    factory = rollout_factory(env_cls)
    episodes = []
    for row in rows:
        for budget in budgets:
            for sample in range(samples):
                env = factory()
                text = env.reset(**dict(row, max_turns=budget, sample=sample))
                episodes.append({"row": row, "budget": budget, "sample": sample, "env": env,
                                 "messages": [{"role": "user",
                                               "content": row["prompt"][0]["content"] + text}],
                                 "live": True, "malformed": 0})
    return episodes


def rollouts(model: Any, tokenizer: Any, tools: list[dict[str, Any]], rows: list[dict[str, Any]],
             budgets: list[int], samples: int, run: str, seed: int) -> tuple[list, float]:
    """Every task x budget x sample; returns the trajectories and the well-formed-call rate."""
    import torch

    from analyses.budgetmix.adapters.trl import BudgetedEnvOptions, budgeted_environment
    from analyses.budgetmix.reference.budget_task import BudgetUnitsEnv
    from recovery.schema import Trajectory, Turn

    env_cls = budgeted_environment(BudgetUnitsEnv, BudgetedEnvOptions(announce=False,
                                                                      free_malformed=True))
    episodes = _episodes(env_cls, rows, budgets, samples)
    torch.manual_seed(seed)
    tokenizer.padding_side = "left"
    model.eval()
    while live := [e for e in episodes if e["live"]]:
        texts = [tokenizer.apply_chat_template(e["messages"], tools=tools, tokenize=False,
                                               add_generation_prompt=True) for e in live]
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        batch = {k: v.to(model.device) for k, v in batch.items()}
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=60, do_sample=True, temperature=1.0,
                                 pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id)
        for e, ids in zip(live, out[:, batch["input_ids"].shape[1]:], strict=True):
            _play(e, tokenizer.decode(ids, skip_special_tokens=False))
    turns = sum(e["env"].budgetmix_episode.n_turns for e in episodes)
    bad = sum(e["malformed"] + (e["env"].budgetmix_episode.ended_at is None) for e in episodes)
    trajectories = [Trajectory(
        run=run, task_id=e["row"]["task_id"], sample=e["sample"], budget=e["budget"],
        success=e["env"].finished == "success", prompt=e["messages"][0]["content"],
        turns=[Turn(action=a, observation=o) for a, o in zip(
            e["env"].budgetmix_episode.actions, e["env"].budgetmix_episode.observations,
            strict=True)]) for e in episodes]
    return trajectories, turns / max(turns + bad, 1)


def parse_call(text: str) -> dict[str, Any] | None:
    """The generation's first tool call as ``{"name", "arguments"}``, or ``None``."""
    match = TOOL_CALL.search(text)
    if not match:
        return None
    try:
        call = json.loads(match.group(1))
    except json.JSONDecodeError:
        return None
    return call if isinstance(call, dict) else None


def _play(episode: dict[str, Any], text: str) -> None:
    """Run the generation's tool call (see the module for the rules)."""
    from analyses.budgetmix.reference import tinylm

    env = episode["env"]
    call = parse_call(text)
    if call is None:
        episode["live"] = False
        return
    name = str(call.get("name"))
    arguments = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
    try:
        if name not in ("apply_batch", "apply_unit", "diagnose_and_fix"):
            raise ValueError(f"Tool {name} not found.")
        result = getattr(env, name)(**arguments)
    except (TypeError, ValueError) as err:  # no turn: the wrapper does not count it
        episode["malformed"] += 1
        result = f"Error: {err}"
        if episode["malformed"] > MAX_MALFORMED:
            episode["live"] = False
    episode["messages"] += [tinylm.tool_call(name, arguments),
                            {"role": "tool", "name": name, "content": str(result)}]
    if env.budgetmix_episode.ended_at is not None:
        episode["live"] = False
