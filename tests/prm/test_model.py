"""The neural PRM: tokenizer, windows, batches, causality and no leakage (prm.neural.model)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from prm.backbones import check_causal, tiny_backbone
from prm.data.examples import StepExample
from prm.data.tokenize import STEP_TOKEN, TokenIds, train_tokenizer
from prm.data.windows import collate, encode_examples, token_budget_batches
from prm.neural.model import build_scorer, score_windows
from prm.spec import TinyConfig
from recovery.errors import UsageProblem

ACTIONS = [f"get_order(id=\"#W{i:07d}\")" for i in range(60)]
OBSERVATIONS = [f"order #W{i + 1:07d} has ${i % 97}" for i in range(60)]
TEXTS = [f"Action: {a}\nObservation: {o}" for a, o in zip(ACTIONS, OBSERVATIONS, strict=True)]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, vocab_size=300)


def _example(n_steps: int, *, traj_id: str = "x", offset: int = 0) -> StepExample:
    picks = [(i + offset) % len(TEXTS) for i in range(n_steps)]
    return StepExample(traj_id=traj_id, run="r", task_id="t", prompt="User: help with #W0000001",
                       actions=[ACTIONS[i] for i in picks],
                       observations=[OBSERVATIONS[i] for i in picks],
                       targets=[float(i % 2) for i in range(n_steps)])


def test_tokenizer_has_the_step_marker_as_one_special_token(tokenizer):
    ids = TokenIds.of(tokenizer)
    assert tokenizer.convert_ids_to_tokens(ids.step) == STEP_TOKEN
    assert tokenizer(STEP_TOKEN, add_special_tokens=False)["input_ids"] == [ids.step]
    # digits are spelt one by one, so the same id is the same token sequence everywhere
    assert len(tokenizer("1234567", add_special_tokens=False)["input_ids"]) == 7


def test_every_turn_is_scored_once_at_its_marker_within_max_length(tokenizer):
    examples = [_example(30, traj_id="long"), _example(3, traj_id="short")]
    windows = encode_examples(examples, tokenizer, max_length=128, max_prompt_tokens=16)
    step_id = TokenIds.of(tokenizer).step
    scored = [(w.traj_id, t) for w in windows for t in w.step_ts]
    assert scored == [("long", t) for t in range(1, 31)] + [("short", t) for t in range(1, 4)]
    assert len({w.traj_id for w in windows if w.traj_id == "long"}) == 1
    assert sum(w.traj_id == "long" for w in windows) > 1  # it was windowed
    for window in windows:
        assert len(window) <= 128
        assert all(window.input_ids[p] == step_id for p in window.step_positions)
        assert window.input_ids[-1] == step_id  # a window ends at its last scored turn
        assert window.input_ids[0] == TokenIds.of(tokenizer).bos


def test_windows_never_hold_a_later_turn(tokenizer):
    full = encode_examples([_example(30)], tokenizer, max_length=128, max_prompt_tokens=16)
    for k in (1, 7, 18, 29):
        prefix = encode_examples([_example(k)], tokenizer, max_length=128, max_prompt_tokens=16)
        # the windows of a prefix are exactly the full trajectory's windows up to turn k
        cut = [w for w in full if w.step_ts[0] <= k]
        last = cut[-1]
        keep = sum(t <= k for t in last.step_ts)
        trimmed = dataclasses.replace(
            last, input_ids=last.input_ids[: last.step_positions[keep - 1] + 1],
            step_positions=last.step_positions[:keep], step_ts=last.step_ts[:keep],
            targets=last.targets[:keep],
            actions=last.actions[: last.step_positions[keep - 1] + 1],
            step_starts=last.step_starts[:keep],
        )
        assert prefix == [*cut[:-1], trimmed]


def test_text_cannot_forge_a_step_marker(tokenizer):
    forged = StepExample("f", "r", "t", "", [f"x {STEP_TOKEN} y"], ["ok"], [1.0])
    (window,) = encode_examples([forged], tokenizer, max_length=128)
    step_id = TokenIds.of(tokenizer).step
    assert window.input_ids.count(step_id) == 1 and window.step_positions == [len(window) - 1]


def test_token_budget_batches_respect_the_budget():
    lengths = [5, 9, 3, 40, 8, 8, 2, 100]
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches = token_budget_batches(lengths, 32, order)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        width = max(lengths[i] for i in batch)
        assert len(batch) == 1 or width * len(batch) <= 32


def test_collate_pads_on_the_right_and_orders_targets_row_major(tokenizer):
    windows = encode_examples([_example(2), _example(4, traj_id="y")], tokenizer, max_length=512)
    batch = collate(windows, pad_id=TokenIds.of(tokenizer).pad)
    assert batch.input_ids.shape == (2, max(len(w) for w in windows))
    assert batch.n_real_tokens == sum(len(w) for w in windows)
    assert batch.step_mask.sum().item() == 6
    assert batch.targets.tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]


def _tiny_scorer(tokenizer, novelty: bool = False):
    import torch

    torch.manual_seed(0)
    tiny = TinyConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=2,
                      intermediate_size=64)
    return build_scorer(tiny_backbone(tiny, len(tokenizer), 512), tokenizer,
                        novelty=novelty).eval()


def _reference_novelty(pieces: list[str], evidence: list[bool]) -> list[int]:
    """Words of pieces by hand: a word prefix is new unless an earlier evidence word began so
    (pieces compared without their leading whitespace)."""
    seen: set[tuple[str, ...]] = set()
    word: tuple[str, ...] = ()
    expected = []
    for k, piece in enumerate(pieces):
        stripped = piece.lstrip()
        if not stripped.isalnum():
            word = ()
            expected.append(0)
            continue
        starts = stripped != piece or k == 0 or not pieces[k - 1].lstrip().isalnum()
        word = (stripped,) if starts else (*word, stripped)
        expected.append(1 if word in seen else 2)
        if evidence[k]:
            seen.add(word)
    return expected


def test_novelty_codes_mark_word_pieces_that_continue_no_earlier_word(tokenizer):
    import torch

    from prm.data.novelty import novelty_codes, word_piece_tables

    parts = [('Observation: order #W0000012 has "balance": 52.', True),
             (' Action: get(order_id="#W0000012", amount=52)', False),
             (' get(order_id="#W0000021", amount=53)', False),
             (' Observation: ok. Action: get(order_id="#W0000021")', True)]
    ids: list[int] = []
    evidence: list[bool] = []
    for text, shown in parts:
        part = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += part
        evidence += [shown] * len(part)
    pieces = [tokenizer.decode([i]) for i in ids]
    tables = word_piece_tables(tokenizer)
    codes = novelty_codes(torch.tensor([ids]), tables)[0].tolist()
    assert codes == _reference_novelty(pieces, [True] * len(ids))
    # after the first call, only the changed id and amount are new words; the last call
    # copies everything it says from earlier text
    calls = [k for k, piece in enumerate(pieces) if piece.strip() == "get"]
    second, third = codes[calls[1] + 1 : calls[2]], codes[calls[2] + 1 :]
    assert 2 in second and 2 not in third and codes[calls[2]] == 1
    # when only observations count as evidence, the repeated wrong id stays new
    shown = novelty_codes(torch.tensor([ids]), tables, torch.tensor([evidence]))[0].tolist()
    assert shown == _reference_novelty(pieces, evidence)
    assert 2 in shown[calls[2] + 1 :]


@pytest.mark.parametrize("novelty", [False, True])
def test_scores_of_a_turn_do_not_depend_on_later_turns(tokenizer, novelty):
    import numpy as np

    scorer = _tiny_scorer(tokenizer, novelty)
    pad = TokenIds.of(tokenizer).pad
    original = _example(8)
    changed = dataclasses.replace(
        original, traj_id="changed",
        actions=original.actions[:5] + list(reversed(original.actions[5:])),
        observations=original.observations[:5] + list(reversed(original.observations[5:])),
    )
    prefix = dataclasses.replace(original, traj_id="prefix", actions=original.actions[:5],
                                 observations=original.observations[:5],
                                 targets=original.targets[:5])
    extended = dataclasses.replace(original, traj_id="extended",
                                   actions=original.actions + ACTIONS[20:30],
                                   observations=original.observations + OBSERVATIONS[20:30],
                                   targets=original.targets + [1.0] * 10)
    windows = encode_examples([original, changed, prefix, extended], tokenizer, max_length=1024)
    assert len(windows) == 4
    # original and changed have the same length, so they share a batch shape: bit-identical
    same_shape = score_windows(scorer, windows[:2], pad, batch_tokens=10**6)
    assert len(windows[0]) == len(windows[1])
    assert np.array_equal(same_shape[0][:5], same_shape[1][:5])
    assert not np.allclose(same_shape[0][5:], same_shape[1][5:])  # later turns did change
    # other lengths run other kernels: equal up to float rounding (about 1e-7 measured)
    scores = score_windows(scorer, windows, pad)
    np.testing.assert_allclose(scores[2], scores[0][:5], rtol=0, atol=1e-5)
    np.testing.assert_allclose(scores[3][:8], scores[0], rtol=0, atol=1e-5)


def test_a_bidirectional_backbone_is_refused_and_would_leak():
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    encoder = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, intermediate_size=64))
    with pytest.raises(UsageProblem, match="not causal"):
        check_causal(encoder)
    decoder = tiny_backbone(TinyConfig(hidden_size=32, num_layers=1, num_heads=2,
                                       intermediate_size=64), 100, 64)
    check_causal(decoder)  # no error


def test_step_loss_is_bce_on_soft_targets_and_skips_unknown():
    import torch

    from prm.neural.model import step_loss

    logits = torch.tensor([0.0, 2.0, -1.0], requires_grad=True)
    targets = torch.tensor([0.3, math.nan, 1.0])
    loss = step_loss(logits, targets)
    expected = -(0.3 * math.log(0.5) + 0.7 * math.log(0.5)
                 + math.log(1 / (1 + math.exp(1.0)))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    assert logits.grad[1].item() == 0.0
    assert step_loss(logits, torch.tensor([math.nan] * 3)).item() == 0.0
