"""Offsets of turns in the plain rendering, and the token each turn's reward goes on."""

from __future__ import annotations

import numpy as np

from analyses.budgetmix.alignment import last_token_indices, render_offsets, render_trajectory


def test_render_offsets_index_the_rendering():
    prompts = ["Task: fix the café ☕ order", ""]
    turns = [[("look(id=1)", "found ✓"), ("fix(id=1)", "")], [("", "x"), ("go()", "done")]]
    rows = []
    for prompt, trajectory in zip(prompts, turns, strict=True):
        for k, (a, o) in enumerate(trajectory):
            rows.append((len(prompt), len(a), len(o), k == 0))
    offsets = render_offsets(*map(np.array, zip(*rows, strict=True)))
    i = 0
    for prompt, trajectory in zip(prompts, turns, strict=True):
        text = render_trajectory(prompt, [a for a, _ in trajectory], [o for _, o in trajectory])
        for a, o in trajectory:
            assert text[offsets["action_start"][i]:offsets["action_end"][i]] == a
            assert text[offsets["observation_start"][i]:offsets["observation_end"][i]] == o
            i += 1


def test_last_token_indices_by_hand():
    # "ab cd\nef" with a special token first (empty span)
    offsets = [(0, 0), (0, 2), (2, 5), (5, 6), (6, 8)]
    assert last_token_indices(offsets, [2, 5, 6, 8]).tolist() == [1, 2, 3, 4]
    assert last_token_indices(offsets, [1, 4]).tolist() == [1, 2]  # inside a token
    assert last_token_indices(offsets, [0, 9]).tolist() == [-1, -1]


def test_last_token_indices_with_a_real_fast_tokenizer():
    from prm.data.tokenize import train_tokenizer

    actions = ["lookup(order_id=W123)", "refund(order_id=W123, amount=40)"]
    observations = ["status: shipped, amount 40", "Error: refund window closed"]
    text = render_trajectory("User: please refund W123", actions, observations)
    tokenizer = train_tokenizer([text] * 5, vocab_size=300)
    encoded = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    offsets = render_offsets([len("User: please refund W123")] * 2,
                             [len(a) for a in actions], [len(o) for o in observations],
                             [True, False])
    positions = last_token_indices(encoded["offset_mapping"], offsets["action_end"])
    for position, end in zip(positions, offsets["action_end"], strict=True):
        start, stop = encoded["offset_mapping"][position]
        assert start < end <= stop  # the token holds the action's last character
