"""The TRL adapter: per-row budgets and PRM-shaped rewards, alone and inside TRL's GRPOTrainer.

The unit tests call the wrapped environment as TRL does (``reset(**row)``, tools, then
``get_reward()``) and need no TRL; the end-to-end test runs the real ``GRPOTrainer`` (trl
1.13.0) for two steps on CPU with a tiny model built from a config.
"""

from __future__ import annotations

import asyncio
import inspect
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyses.budgetmix.adapters.trl import (
    REFUSAL,
    BudgetedEnvOptions,
    budgeted_environment,
    call_text,
)
from analyses.budgetmix.reference.textenv import UnitsTaskEnv
from analyses.budgetmix.shaping import ShapingOptions, shape_rewards
from recovery.errors import InputProblem


class _Counter:
    """A tiny TRL-style environment: a counter the agent pushes towards a goal."""

    def reset(self, **row):
        self.value, self.goal = 0, int(row.get("goal", 3))
        return f"Reach {self.goal}."

    def push(self, amount: int) -> str:
        """Add to the counter.

        Args:
            amount: How much to add.
        """
        if amount < 0:
            raise ValueError("amount must be positive")
        self.value += amount
        return f"value {self.value}"

    async def peek(self) -> str:
        """Look at the counter."""
        return f"value {self.value}"

    def get_reward(self) -> float:
        return 1.0 if self.value >= self.goal else 0.0


class _FixedScorer:
    """A PRM stub: the score of turn t is 0.1 * t (so the shaping is known by hand)."""

    def __init__(self):
        self.calls = []

    def score(self, trajectories):
        self.calls.append(trajectories)
        return np.concatenate([0.1 * np.arange(1, len(tr.turns) + 1) for tr in trajectories])


def test_tools_keep_their_names_signatures_and_docs():
    env_cls = budgeted_environment(_Counter)
    assert env_cls.__name__ == "Budgeted_Counter" and issubclass(env_cls, _Counter)
    env = env_cls()
    assert inspect.signature(env.push) == inspect.signature(_Counter().push)
    assert env.push.__doc__ == _Counter.push.__doc__
    assert inspect.iscoroutinefunction(env.peek)
    tools = {n for n, _ in inspect.getmembers(env, predicate=inspect.ismethod)
             if not n.startswith("_") and n not in ("reset", "get_reward")}
    assert tools == {"push", "peek"}  # the wrapper adds no tool of its own


def test_the_budget_comes_from_the_row_and_ends_the_episode():
    env = budgeted_environment(_Counter)()
    assert env.reset(goal=5, max_turns=2) == "Reach 5.\nYou have 2 turns."
    assert env.push(amount=1) == "value 1"
    assert asyncio.run(env.peek()) == "value 1"
    assert env.push(amount=9) == REFUSAL.format(budget=2)  # past the budget: nothing happens
    assert env.value == 1
    episode = env.budgetmix_episode
    assert episode.n_turns == 2 and episode.refused == 1
    assert episode.actions == [call_text("push", {"amount": 1}), "peek({})"]
    assert env.get_reward() == 0.0  # goal 5 not reached in the two turns
    env.reset(extra_info={"max_turns": 1}, goal=1)  # a verl-style row works too
    assert env.budgetmix_episode.max_turns == 1
    with pytest.raises(InputProblem, match="no max_turns"):
        env.reset(goal=1)
    options = BudgetedEnvOptions(default_max_turns=4, announce=False)
    assert budgeted_environment(_Counter, options)().reset() == \
        "Reach 3."
    with pytest.raises(ValueError, match="no public tool"):
        budgeted_environment(type("Empty", (), {"reset": lambda self, **row: None}))


def test_a_failing_call_is_a_turn():
    env = budgeted_environment(_Counter)()
    env.reset(max_turns=2)
    with pytest.raises(ValueError, match="positive"):
        env.push(amount=-1)
    with pytest.raises(TypeError):
        env.push(wrong=1)
    assert env.budgetmix_episode.n_turns == 2
    assert env.budgetmix_episode.observations[0] == "Error: amount must be positive"
    assert env.push(amount=1) == REFUSAL.format(budget=2)


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_get_reward_is_the_sum_of_the_shaped_turn_rewards(gamma):
    scorer, seen = _FixedScorer(), []
    env = budgeted_environment(_Counter, BudgetedEnvOptions(
        scorer=scorer, lam=0.5, gamma=gamma, initial_potential=0.3, on_episode=seen.append))()
    env.reset(goal=2, max_turns=3)
    for _ in range(3):
        env.push(amount=1)
    reward = env.get_reward()
    episode = env.budgetmix_episode
    assert seen == [episode] and episode.outcome == 1.0
    assert scorer.calls[0][0].turns[0].observation == "value 1"  # the PRM read the turns
    expected = shape_rewards([0.1, 0.2, 0.3], [True, False, False], [False, False, True],
                             [1.0] * 3, ShapingOptions(lam=0.5, gamma=gamma, initial_potential=0.3))
    assert episode.rewards == pytest.approx(expected.total.tolist())
    assert reward == pytest.approx(expected.total.sum())
    if gamma == 1.0:  # potential-based: the sum is the outcome minus lambda * phi(s_1)
        assert reward == pytest.approx(1.0 - 0.5 * 0.3)
    env.reset(goal=0, max_turns=3)  # no turn at all: the same constant shift
    assert env.get_reward() == pytest.approx(1.0 - 0.5 * 0.3)
    plain = budgeted_environment(_Counter)()
    plain.reset(goal=1, max_turns=2)
    plain.push(amount=1)
    assert plain.get_reward() == 1.0 and plain.budgetmix_episode.rewards == [1.0]


def test_the_reference_task_env_plays_by_the_reference_dynamics():
    env = budgeted_environment(UnitsTaskEnv, BudgetedEnvOptions(announce=False))()
    assert env.reset(task_id="t7", task_length=4, difficulty=0.0, seed=1, max_turns=12) == \
        "Task t7: apply 4 change units to the account within 12 turns."
    texts = [env.apply_unit(unit=k) for k in range(1, 12)]
    assert env.get_reward() == 1.0  # safe play on an easy task finishes in 12 turns
    assert texts[0].startswith(("Applied unit 1 and verified it.", "Error", "Invalid action",
                                "Could not parse action"))
    assert any(t.startswith("The task is already finished") for t in texts)


# ------------------------------------------------------------------------------ end to end


def _rows(n: int) -> list[dict]:
    rng = np.random.default_rng(5)
    return [
        {
            "prompt": [{"role": "user", "content": "Call one tool per turn.\n"}],
            "task_id": f"t{i}",
            "task_length": int(rng.integers(2, 6)),
            "difficulty": round(float(rng.random()), 3),
            "seed": i,
        }
        for i in range(n)
    ]


def test_grpo_trainer_stops_episodes_at_their_row_budget_and_sees_the_shaped_rewards(tmp_path):
    """TRL's GRPOTrainer, two steps on CPU: 16 to 27 s on two busy cores (under the ~30 s of
    the slow marker, so it runs in the default suite)."""
    pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers.utils import get_json_schema
    from trl import GRPOConfig, GRPOTrainer

    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, and robust to a busy machine
    try:
        _grpo_end_to_end(tmp_path, torch, datasets, get_json_schema, GRPOConfig, GRPOTrainer)
    finally:
        torch.set_num_threads(threads)


def _grpo_end_to_end(tmp_path, torch, datasets, get_json_schema, GRPOConfig, GRPOTrainer):
    from analyses.budgetmix.assign import AssignOptions, assign_budgets
    from analyses.budgetmix.reference.env import EnvParams
    from analyses.budgetmix.reference.rollout import EpisodeBatch, run_episodes
    from analyses.budgetmix.reference.text import render_episode
    from analyses.budgetmix.schedule import mixture_schedule
    from prm.online import TfidfStepScorer
    from tests.analyses.budgetmix.adapters import tiny_chat
    from tests.analyses.budgetmix.reference.scripted import Scripted

    # per-row budgets from a BudgetMix schedule, through `budgetmix assign`
    schedule = mixture_schedule([1, 2, 3], [1.0, 1.0, 1.0])
    pq.write_table(pa.Table.from_pylist(_rows(8)), tmp_path / "train.parquet")
    assigned = assign_budgets(tmp_path / "train.parquet", schedule, tmp_path / "budgets.parquet",
                              AssignOptions(seed=0, trainer="trl"))
    dataset = datasets.Dataset.from_list(pq.read_table(assigned.path).to_pylist())  # no HF cache
    budget_of = {row["task_id"]: row["max_turns"] for row in dataset}
    assert set(budget_of.values()) == {1, 2, 3}

    # a PRM fitted on rendered reference episodes (the same wording as the tool environment)
    env_params = EnvParams()
    rng = np.random.default_rng(0)
    roll = run_episodes(Scripted([0.0, 0.0, 0.0, 0.0]), env_params,
                        EpisodeBatch(np.full(120, 4), rng.random(120), np.full(120, 6)), rng,
                        torch.Generator().manual_seed(0))
    scorer = TfidfStepScorer("outcome")
    scorer.fit([render_episode(roll, i, run="scripted", task_id=f"s{i // 4}", sample=i % 4,
                               seed=0) for i in range(len(roll))])
    assert scorer.n_fits == 1

    episodes = []
    env_cls = budgeted_environment(UnitsTaskEnv, BudgetedEnvOptions(
        scorer=scorer, lam=1.0, gamma=0.9, announce=False, on_episode=episodes.append))

    # a tiny chat model that calls tools
    probe = UnitsTaskEnv()
    tools = [get_json_schema(getattr(probe, name))
             for name in ("apply_batch", "apply_unit", "diagnose_and_fix")]
    conversations = tiny_chat.scripted_conversations(UnitsTaskEnv, _rows(4), n_turns=3)
    tokenizer = tiny_chat.chat_tokenizer(conversations, tools)
    model = tiny_chat.build_model(tokenizer)
    loss = tiny_chat.supervised_warm_start(model, tokenizer, conversations, tools,
                                           tiny_chat.WarmStartOptions(steps=100))
    assert loss < 0.2

    args = GRPOConfig(
        output_dir=str(tmp_path / "grpo"), per_device_train_batch_size=4, num_generations=2,
        max_steps=2, max_completion_length=600, max_tool_calling_iterations=4,
        temperature=0.7, learning_rate=1e-5, logging_steps=1, report_to="none", use_cpu=True,
        save_strategy="no", seed=0, bf16=False, dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, args=args, train_dataset=dataset,
                          processing_class=tokenizer, environment_factory=env_cls)
    trainer.train()

    # every rollout's episode ended at its row's budget
    assert len(episodes) == 8  # 2 steps x 4 rollouts
    for episode in episodes:
        task_id = episode.prompt.split(":")[0].removeprefix("Task ")
        assert episode.max_turns == budget_of[task_id]
        assert episode.n_turns <= episode.max_turns
        if episode.refused:
            assert episode.n_turns == episode.max_turns
    assert any(e.refused for e in episodes)  # the model went on calling: the budget stopped it
    assert {e.max_turns for e in episodes if e.refused} <= {1, 2, 3}
    # the shaped rewards (from the PRM's scores) are what the trainer got
    for episode in episodes:
        n = episode.n_turns
        assert len(episode.scores) == n and all(0.0 <= s <= 1.0 for s in episode.scores)
        if n:
            first = np.arange(n) == 0
            expected = shape_rewards(episode.scores, first, first[::-1], [episode.outcome] * n,
                                     ShapingOptions(lam=1.0, gamma=0.9))
            assert episode.reward == pytest.approx(float(expected.total.sum()))
    logged = [h for h in trainer.state.log_history if "rewards/BudgetedUnitsTaskEnv/mean" in h]
    assert len(logged) == 2
    for step, entry in enumerate(logged):
        step_rewards = [e.reward for e in episodes[4 * step: 4 * step + 4]]
        assert entry["rewards/BudgetedUnitsTaskEnv/mean"] == pytest.approx(
            float(np.mean(step_rewards)), abs=1e-5)
        assert entry["reward"] == pytest.approx(float(np.mean(step_rewards)), abs=1e-5)
    assert any(e.reward != e.outcome for e in episodes)  # the shaping moved the rewards
