"""Per-turn PRM credit in TRL: per-turn advantages, their tokens, and GRPOTrainer's loss on them.

The fast tests need no generation: the advantage functions are pure, the subclass is checked on
a stand-in base that returns a fixed generation batch, and the loss is TRL's own
``_compute_loss`` on a tiny model. The slow test runs one real GRPO step with the credit.
"""

from __future__ import annotations

import numpy as np
import pytest

from analyses.budgetmix.adapters.trl import BudgetedEpisode
from analyses.budgetmix.adapters.trl_credit import (
    TurnCreditConfig,
    episode_advantages,
    normalise_advantages,
    token_advantages,
    turn_advantages,
    turn_credit_trainer,
)
from analyses.budgetmix.alignment import generation_segments
from recovery.errors import UsageProblem


def _episode(scores, outcome, n_turns=None):
    n = len(scores) if n_turns is None else n_turns
    return BudgetedEpisode(max_turns=4, actions=["a"] * n, observations=["o"] * n,
                           outcome=outcome, scores=list(scores))


def test_generation_segments_number_the_runs_of_model_tokens():
    mask = np.array([[1, 1, 0, 0, 1, 0, 1, 1], [1, 0, 1, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]])
    assert generation_segments(mask).tolist() == [
        [0, 0, -1, -1, 1, -1, 2, 2], [0, -1, 1, 1, 1, -1, -1, -1], [-1] * 8]
    with pytest.raises(ValueError, match="two-dimensional"):
        generation_segments(np.ones(3))


def test_the_advantage_is_the_outcome_minus_the_prm_value_before_the_turn():
    config = TurnCreditConfig(initial_potential=0.5, normalise="none")
    assert turn_advantages([0.9, 0.2, 0.7], 1.0, config) == pytest.approx([0.5, 0.1, 0.8])
    assert turn_advantages([], 1.0, config) == pytest.approx([0.5])  # no turn: R - phi(s_1)
    one_step = TurnCreditConfig(gae_lambda=0.0, normalise="none")
    assert turn_advantages([0.9, 0.2, 0.7], 1.0, one_step) == pytest.approx([0.4, -0.7, 0.8])
    discounted = TurnCreditConfig(gamma=0.5, gae_lambda=1.0, normalise="none")
    # delta = [0.5*0.9-0.5, 0.5*0.2-0.9, 1-0.2]; A_t = delta_t + 0.5 A_t+1
    d = np.array([-0.05, -0.8, 0.8])
    assert turn_advantages([0.9, 0.2, 0.7], 1.0, discounted) == pytest.approx(
        [d[0] + 0.5 * d[1] + 0.25 * d[2], d[1] + 0.5 * d[2], d[2]])
    with pytest.raises(UsageProblem, match="normalise"):
        TurnCreditConfig(normalise="sequence")


def test_same_outcome_different_prm_scores_give_different_token_advantages():
    """GRPO gives both episodes of this group the same advantage; the credit does not."""
    episodes = [_episode([0.9, 0.8], 1.0), _episode([0.1, 0.2], 1.0)]
    per_turn = episode_advantages(episodes, TurnCreditConfig(), group_size=2)
    mask = np.array([[1, 1, 1, 0, 0, 1, 1, 0], [1, 1, 0, 0, 1, 1, 1, 1]])
    tokens = token_advantages(mask, per_turn)
    assert tokens[0, 3] == tokens[0, 4] == tokens[0, 7] == 0.0  # tool results: no credit
    first, second = tokens[0, :3], tokens[0, 5:7]
    assert len(set(first)) == 1 and len(set(second)) == 1  # a turn's tokens share its advantage
    assert first[0] == pytest.approx(per_turn[0][0]) and second[0] == pytest.approx(per_turn[0][1])
    # the first turns start from the same phi(s_1); the second turns, after PRM scores 0.9 and
    # 0.1, get different credit for the same outcome
    assert np.isclose(tokens[0, 0], tokens[1, 0])
    assert tokens[0, 5] < tokens[1, 4]
    # episode 0: R - phi = [0.5, 0.1]; episode 1: [0.5, 0.9]; one group, normalised together
    flat = np.array([0.5, 0.1, 0.5, 0.9])
    expected = (flat - flat.mean()) / (flat.std(ddof=1) + 1e-4)
    assert np.concatenate(per_turn) == pytest.approx(expected)
    # the sum over turns of a shaped reward is R - phi(s_1) for both: GRPO would see a tie
    assert turn_advantages([0.9, 0.8], 1.0, TurnCreditConfig())[0] == \
        turn_advantages([0.1, 0.2], 1.0, TurnCreditConfig())[0]


def test_generations_after_the_last_turn_take_its_advantage():
    tokens = token_advantages(np.array([[1, 0, 1, 0, 1, 1]]), [np.array([2.0, -1.0])])
    assert tokens.tolist() == [[2.0, 0.0, -1.0, 0.0, -1.0, -1.0]]
    with pytest.raises(ValueError, match="2 episodes"):
        token_advantages(np.ones((1, 3)), [np.ones(1), np.ones(1)])


def test_groups_are_normalised_apart():
    advantages = [np.array([1.0]), np.array([3.0]), np.array([10.0, 10.0]), np.array([10.0])]
    out = normalise_advantages(advantages, group_size=2, how="group")
    assert np.concatenate(out[:2]) == pytest.approx(np.array([-1, 1]) / (np.sqrt(2) + 1e-4))
    assert np.concatenate(out[2:]) == pytest.approx([0.0, 0.0, 0.0])  # no spread: no signal
    with pytest.raises(ValueError, match="groups of 3"):
        normalise_advantages(advantages, group_size=3, how="group")


def test_missing_scores_or_rewards_are_one_clear_error():
    with pytest.raises(ValueError, match="scorer="):
        episode_advantages([_episode([], 1.0, n_turns=2)], TurnCreditConfig(), group_size=1)
    with pytest.raises(ValueError, match="get_reward"):
        episode_advantages([_episode([0.5], None)], TurnCreditConfig(), group_size=1)


class _Env:
    def __init__(self, episode):
        self.budgetmix_episode = episode


class _FakeGRPOTrainer:
    """Stands in for GRPOTrainer's generation: returns a fixed batch and sets the environments."""

    def __init__(self, batch, episodes):
        self._batch, self.environments = batch, [_Env(e) for e in episodes]
        self.num_generations = self.num_generations_eval = 2
        self.model = type("M", (), {"training": True})()
        self.args = type("A", (), {"use_liger_kernel": False})()

    def _generate_and_score_completions(self, inputs):
        return dict(self._batch)


def test_the_subclass_replaces_the_sequence_advantage_by_token_advantages():
    torch = pytest.importorskip("torch")
    batch = {"completion_mask": torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]),
             "tool_mask": torch.tensor([[1, 1, 0, 1, 1, 1], [1, 0, 0, 1, 1, 1]]),
             "advantages": torch.zeros(2)}
    episodes = [_episode([0.9, 0.8], 1.0), _episode([0.1, 0.2], 1.0)]
    trainer = turn_credit_trainer(_FakeGRPOTrainer)(batch, episodes)
    out = trainer._generate_and_score_completions([{}, {}])
    assert out["advantages"].shape == (2, 6) and out["advantages"].dtype == torch.float32
    expected = token_advantages((batch["completion_mask"] * batch["tool_mask"]).numpy(),
                                episode_advantages(episodes, TurnCreditConfig(), 2))
    assert out["advantages"].numpy() == pytest.approx(expected.astype(np.float32))
    trainer.environments = [object(), object()]
    with pytest.raises(ValueError, match="budgeted_environment"):
        trainer._generate_and_score_completions([{}, {}])


def test_grpo_loss_weighs_each_token_by_its_turns_advantage(tmp_path):
    """TRL's own _compute_loss, on the subclass, with (B, T) advantages: its gradient is
    -sum_t A_t grad log p_t / n_tokens (ratio 1, no KL, bnpo), token by token."""
    torch = pytest.importorskip("torch")
    datasets = pytest.importorskip("datasets")
    pytest.importorskip("trl")
    from trl import GRPOConfig

    from analyses.budgetmix.adapters.trl_credit import TurnCreditGRPOTrainer
    from tests.analyses.budgetmix.adapters import tiny_chat

    torch.set_num_threads(1)
    tokenizer = tiny_chat.build_tokenizer(["apply unit one, then check the account"] * 4,
                                          vocab_size=300)
    model = tiny_chat.build_model(tokenizer)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=8, loss_type="bnpo", report_to="none", use_cpu=True,
                      save_strategy="no", bf16=False, beta=0.0)
    trainer = TurnCreditGRPOTrainer(
        model=model, args=args, processing_class=tokenizer,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        train_dataset=datasets.Dataset.from_list([{"prompt": "hi"}] * 2),
        turn_credit=TurnCreditConfig())
    trainer.current_gradient_accumulation_steps = 1
    g = torch.Generator().manual_seed(0)
    completion_ids = torch.randint(5, len(tokenizer), (2, 8), generator=g)
    tool_mask = torch.tensor([[1, 1, 1, 0, 0, 1, 1, 1], [1, 1, 0, 0, 1, 1, 1, 1]])
    episodes = [_episode([0.9, 0.8], 1.0), _episode([0.1, 0.2], 1.0)]
    advantages = torch.tensor(token_advantages(tool_mask.numpy(), episode_advantages(
        episodes, TurnCreditConfig(), 2)), dtype=torch.float32)
    inputs = {"prompt_ids": torch.randint(5, len(tokenizer), (2, 3), generator=g),
              "prompt_mask": torch.ones(2, 3, dtype=torch.long), "completion_ids": completion_ids,
              "completion_mask": torch.ones(2, 8, dtype=torch.long), "tool_mask": tool_mask,
              "advantages": advantages, "num_items_in_batch": torch.tensor(12.0)}
    model.train()
    loss = trainer._compute_loss(model, inputs)
    loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    # by hand: the token log-probabilities weighted by their own advantages
    logits = model(input_ids=torch.cat([inputs["prompt_ids"], completion_ids], 1)).logits
    logps = torch.log_softmax(logits[:, 2:-1], -1).gather(-1, completion_ids[..., None])[..., 0]
    manual = -(advantages * logps * tool_mask).sum() / tool_mask.sum()
    value = -(advantages * tool_mask).sum() / tool_mask.sum()  # the ratio is 1 at the old policy
    assert float(loss.detach()) == pytest.approx(float(value), abs=1e-5)
    manual.backward()
    for a, b in zip(got, (p.grad for p in model.parameters()), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    # a per-sequence advantage (what GRPO would use) gives another gradient
    model.zero_grad()
    flat = dict(inputs, advantages=advantages.sum(1) / tool_mask.sum(1))
    trainer._compute_loss(model, flat).backward()
    assert not all(torch.allclose(a, p.grad, atol=1e-6)
                   for a, p in zip(got, model.parameters(), strict=True))


class _ProgressScorer:
    """A PRM stub: a turn whose observation reports progress scores 0.8, any other 0.2."""

    def score(self, trajectories):
        return np.array([0.8 if t.observation.startswith("Applied") else 0.2
                         for tr in trajectories for t in tr.turns])


@pytest.mark.slow
def test_one_grpo_step_trains_on_per_turn_advantages(tmp_path):
    """The credit trainer inside a real GRPO step (trl 1.13, CPU, the tiny Qwen2)."""
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
    episodes = []
    env_cls = budgeted_environment(UnitsTaskEnv, BudgetedEnvOptions(
        scorer=_ProgressScorer(), announce=False, on_episode=episodes.append))
    probe = UnitsTaskEnv()
    tools = [get_json_schema(getattr(probe, n)) for n in ("apply_batch", "apply_unit",
                                                        "diagnose_and_fix")]
    conversations = tiny_chat.scripted_conversations(UnitsTaskEnv, _rows(4), n_turns=3)
    tokenizer = tiny_chat.chat_tokenizer(conversations, tools)
    model = tiny_chat.build_model(tokenizer)
    tiny_chat.supervised_warm_start(model, tokenizer, conversations, tools,
                                    tiny_chat.WarmStartOptions(steps=100))
    rows = [dict(r, max_turns=3) for r in _rows(4)]
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                      max_steps=1, max_completion_length=600, max_tool_calling_iterations=4,
                      temperature=0.7, learning_rate=1e-5, report_to="none", use_cpu=True,
                      save_strategy="no", seed=0, bf16=False, dataloader_num_workers=0)
    trainer = TurnCreditGRPOTrainer(model=model, args=args, processing_class=tokenizer,
                                    train_dataset=datasets.Dataset.from_list(rows),
                                    environment_factory=env_cls)
    seen = []
    compute_loss = trainer._compute_loss
    trainer._compute_loss = lambda m, inputs: (seen.append(inputs), compute_loss(m, inputs))[1]
    trainer.train()
    assert len(episodes) == 4 and seen
    advantages = seen[0]["advantages"]
    assert advantages.dim() == 2  # per token, not per sequence
    mask = (seen[0]["completion_mask"] * seen[0]["tool_mask"]).bool()
    assert (advantages[~mask] == 0).all()
    per_turn = trainer.budgetmix_turn_advantages
    assert [len(a) for a in per_turn] == [max(e.n_turns, 1) for e in episodes]
    values = {round(float(v), 5) for v in advantages[mask]}
    assert values <= {round(float(v), 5) for a in per_turn for v in a}
