"""GiGPO-style step groups: state keys read only the past, and the advantages on a tiny group of
three rollouts sharing their first state, computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.budgetmix.adapters.trl import BudgetedEpisode
from analyses.budgetmix.adapters.trl_credit import TurnCreditConfig, episode_advantages
from analyses.budgetmix.step_groups import (
    gigpo_advantages,
    state_keys,
    step_advantages,
    step_returns,
)
from recovery.errors import UsageProblem

PROMPT = "Task: apply units 1-3. You have 4 turns."
# A and B act alike on turn 1 and see the same; C acts otherwise from the start.
ROLLOUTS = {
    "A": (["apply(1)", "apply(2)"], ["ok 1", "ok 2"], 1.0),
    "B": (["apply(1)", "batch(2-3)"], ["ok 1", "Error: conflict"], 0.0),
    "C": (["batch(1-3)"], ["done"], 1.0),
}


def _keys(how="history"):
    return [state_keys(PROMPT, a, o, how) for a, o, _ in ROLLOUTS.values()]


def test_state_keys_read_only_what_came_before_the_turn():
    a, b, c = _keys()
    assert a[0] == b[0] == c[0]  # the same prompt: the same first state
    assert a[1] == b[1]  # same action and observation on turn 1
    # a later turn, or the turn's own action, never changes an earlier key
    longer = state_keys(PROMPT, ["apply(1)", "x", "y"], ["ok 1", "z", "w"])
    assert longer[:2] == a
    other_first_action = state_keys(PROMPT, ["other"], ["ok 1"])
    assert other_first_action[0] == a[0]
    # history vs GiGPO's anchor observation: same observation after different actions
    d = state_keys(PROMPT, ["retry(1)", "apply(2)"], ["ok 1", "ok 2"])
    assert d[1] != a[1]
    assert state_keys(PROMPT, ["retry(1)", "apply(2)"], ["ok 1", "ok 2"], "observation")[1] == \
        state_keys(PROMPT, *ROLLOUTS["A"][:2], "observation")[1]
    with pytest.raises(UsageProblem, match="state key"):
        state_keys(PROMPT, [], [], "task")


def test_gigpo_advantages_by_hand_undiscounted():
    # A^E: R = (1, 0, 1), mean 2/3 -> (1/3, -2/3, 1/3).
    # Turn 1 (all three share the prompt): returns (1, 0, 1) -> A^S = (1/3, -2/3, 1/3).
    # Turn 2 (A and B share prompt, apply(1), ok 1): returns (1, 0) -> A^S = (1/2, -1/2).
    got = gigpo_advantages([r for *_, r in ROLLOUTS.values()], _keys(), weight=1.0)
    assert got[0] == pytest.approx([1 / 3 + 1 / 3, 1 / 3 + 1 / 2])
    assert got[1] == pytest.approx([-2 / 3 - 2 / 3, -2 / 3 - 1 / 2])
    assert got[2] == pytest.approx([1 / 3 + 1 / 3])
    # a tied group (gamma = 1) carries no signal: every advantage is 0
    assert all((a == 0).all() for a in gigpo_advantages([1.0, 1.0, 1.0], _keys()))
    half = gigpo_advantages([1.0, 0.0, 1.0], _keys(), weight=0.5)
    assert half[1] == pytest.approx([-2 / 3 - 1 / 3, -2 / 3 - 1 / 4])


def test_gigpo_advantages_by_hand_discounted_and_std():
    # gamma 0.5: R_t = 0.5^(n-t) R: A (0.5, 1), B (0, 0), C (1).
    # turn 1 group (0.5, 0, 1): mean 0.5 -> (0, -0.5, 0.5); turn 2 group (1, 0) -> (0.5, -0.5)
    got = gigpo_advantages([1.0, 0.0, 1.0], _keys(), gamma=0.5)
    assert got[0] == pytest.approx([1 / 3, 1 / 3 + 0.5])
    assert got[1] == pytest.approx([-2 / 3 - 0.5, -2 / 3 - 0.5])
    assert got[2] == pytest.approx([1 / 3 + 0.5])
    # std: both levels over their standard deviation (ddof 1): episode std 0.57735,
    # turn-1 std 0.5, turn-2 std 0.70711
    std = gigpo_advantages([1.0, 0.0, 1.0], _keys(), gamma=0.5, norm="std")
    e = np.array([1 / 3, -2 / 3, 1 / 3]) / (np.sqrt(1 / 3) + 1e-6)
    assert std[0] == pytest.approx([e[0], e[0] + 0.5 / (np.sqrt(0.5) + 1e-6)])
    assert std[2] == pytest.approx([e[2] + 0.5 / (0.5 + 1e-6)])


def test_a_lone_state_gets_no_step_advantage_and_an_empty_rollout_one_value():
    returns = [step_returns(2, 1.0), step_returns(1, 0.0)]
    keys = [["s", "lone"], ["s"]]
    assert [a.tolist() for a in step_advantages(returns, keys)] == [[0.5, 0.0], [-0.5]]
    got = gigpo_advantages([1.0, 0.0], [["s"], []])
    assert got[1] == pytest.approx([-0.5]) and got[0] == pytest.approx([0.5 + 0.0])
    with pytest.raises(UsageProblem, match="step norm"):
        gigpo_advantages([1.0], [["s"]], norm="max")


def test_the_trainer_mode_step_groups_gives_gigpo_per_group():
    episodes = [BudgetedEpisode(max_turns=4, prompt=PROMPT, actions=a, observations=o,
                                outcome=r) for a, o, r in ROLLOUTS.values()]
    # two groups of three: the second is the first with outcomes flipped
    flipped = [BudgetedEpisode(max_turns=4, prompt=PROMPT, actions=e.actions,
                               observations=e.observations, outcome=1.0 - e.outcome)
               for e in episodes]
    config = TurnCreditConfig(mode="step-groups")
    got = episode_advantages(episodes + flipped, config, group_size=3)
    expected = gigpo_advantages([1.0, 0.0, 1.0], _keys())
    for g, e in zip(got[:3], expected, strict=True):
        assert g == pytest.approx(e)
    for g, e in zip(got[3:], expected, strict=True):
        assert g == pytest.approx(-e)
    # no PRM scores needed; "none" is GRPO's episode advantage on every turn
    none = episode_advantages(episodes, TurnCreditConfig(mode="none", normalise="none"), 3)
    assert [a.tolist() for a in none] == [[1.0, 1.0], [0.0, 0.0], [1.0]]
    grpo = episode_advantages(episodes, TurnCreditConfig(mode="none"), 3)
    assert grpo[1] == pytest.approx([(0 - 2 / 3) / (np.sqrt(1 / 3) + 1e-4)] * 2)
    with pytest.raises(UsageProblem, match="mode"):
        TurnCreditConfig(mode="gigpo")


class _TwoProcessTrainer:
    """Stands in for GRPOTrainer's constructor on two processes."""

    def __init__(self, *args, **kwargs):
        self.args = type("A", (), {"use_liger_kernel": False})()
        self.accelerator = type("Acc", (), {"num_processes": 2})()


def test_step_groups_need_one_process():
    from analyses.budgetmix.adapters.trl_credit import turn_credit_trainer

    trainer_cls = turn_credit_trainer(_TwoProcessTrainer)
    with pytest.raises(UsageProblem, match="step-groups"):
        trainer_cls(turn_credit=TurnCreditConfig(mode="step-groups", normalise="batch"))
    assert trainer_cls(turn_credit=TurnCreditConfig(normalise="batch")).turn_credit.mode == "prm"


@pytest.mark.slow
def test_one_grpo_step_trains_on_step_group_advantages(tmp_path):
    """mode='step-groups' inside a real GRPO step (trl 1.13, CPU, the tiny Qwen2), no PRM:
    every group's first turns share the prompt, so with gamma = w = 1 (mean norm) the first
    turn's advantage is 2 (R - mean R) of its group."""
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("datasets")
    from transformers.utils import get_json_schema
    from trl import GRPOConfig

    from analyses.budgetmix.adapters.trl import BudgetedEnvOptions, budgeted_environment
    from analyses.budgetmix.adapters.trl_credit import TurnCreditGRPOTrainer
    from analyses.budgetmix.reference.textenv import UnitsTaskEnv
    from tests.analyses.budgetmix.adapters import tiny_chat
    from tests.analyses.budgetmix.adapters.test_trl import _rows

    torch.set_num_threads(1)
    env_cls = budgeted_environment(UnitsTaskEnv, BudgetedEnvOptions(announce=False))
    probe = UnitsTaskEnv()
    tools = [get_json_schema(getattr(probe, n)) for n in ("apply_batch", "apply_unit",
                                                        "diagnose_and_fix")]
    conversations = tiny_chat.scripted_conversations(UnitsTaskEnv, _rows(4), n_turns=3)
    tokenizer = tiny_chat.chat_tokenizer(conversations, tools)
    model = tiny_chat.build_model(tokenizer)
    tiny_chat.supervised_warm_start(model, tokenizer, conversations, tools,
                                    tiny_chat.WarmStartOptions(steps=100))
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                      max_steps=1, max_completion_length=600, max_tool_calling_iterations=4,
                      temperature=0.7, learning_rate=1e-5, report_to="none", use_cpu=True,
                      save_strategy="no", seed=0, bf16=False, dataloader_num_workers=0)
    trainer = TurnCreditGRPOTrainer(
        model=model, args=args, processing_class=tokenizer,
        train_dataset=datasets.Dataset.from_list([dict(r, max_turns=3) for r in _rows(4)]),
        environment_factory=env_cls, turn_credit=TurnCreditConfig(mode="step-groups"))
    seen = []
    compute_loss = trainer._compute_loss
    trainer._compute_loss = lambda m, inputs: (seen.append(inputs), compute_loss(m, inputs))[1]
    trainer.train()
    assert seen and seen[0]["advantages"].dim() == 2  # per token, not per sequence
    episodes = [env.budgetmix_episode for env in trainer.environments]
    per_turn = trainer.budgetmix_turn_advantages
    assert [len(a) for a in per_turn] == [max(e.n_turns, 1) for e in episodes]
    for start in range(0, len(episodes), 2):
        outcomes = np.array([e.outcome for e in episodes[start:start + 2]])
        for e, a, r in zip(episodes[start:start + 2], per_turn[start:start + 2], outcomes,
                           strict=True):
            factor = 2.0 if e.n_turns else 1.0
            assert a[0] == pytest.approx(factor * (r - outcomes.mean()))
