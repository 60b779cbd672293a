"""Where each turn lies in a trajectory's text, so a trainer can put a turn's reward on a token.

A trainer places turn ``t``'s reward on a token of the ``t``-th assistant message of its own
token sequence. Where it renders a trajectory as one plain text, the offsets of a rewards file
index :func:`render_trajectory`'s text, and :func:`last_token_indices` maps them to tokens
through a fast tokenizer's ``offset_mapping``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def render_offsets(
    prompt_chars: Sequence[int] | np.ndarray,
    action_chars: Sequence[int] | np.ndarray,
    observation_chars: Sequence[int] | np.ndarray,
    is_first: Sequence[bool] | np.ndarray,
) -> dict[str, np.ndarray]:
    """Character offsets of each turn within the plain rendering of its trajectory.

    The rendering (:func:`render_trajectory`) is the prompt followed by a newline (nothing when
    the prompt is empty), then per turn the action, a newline, the observation, a newline.
    Offsets are Python ``str`` indices (code points); ends are exclusive.

    Args:
        prompt_chars: Length of the trajectory's prompt, on each of its turns.
        action_chars: Length of each turn's action.
        observation_chars: Length of each turn's observation.
        is_first: Whether the turn is its trajectory's first (turns laid out trajectory by
            trajectory, in order).

    Returns:
        ``action_start, action_end, observation_start, observation_end`` arrays.
    """
    prompt = np.asarray(prompt_chars, dtype=np.int64)
    action = np.asarray(action_chars, dtype=np.int64)
    observation = np.asarray(observation_chars, dtype=np.int64)
    first = np.asarray(is_first, dtype=bool)
    head = np.where(prompt > 0, prompt + 1, 0)
    span = action + observation + 2
    total = np.cumsum(span)
    group = np.cumsum(first) - 1
    start_of_group = np.flatnonzero(first)
    before_group = np.concatenate([[0], total])[start_of_group]
    action_start = head + total - span - before_group[group]
    action_end = action_start + action
    return {
        "action_start": action_start,
        "action_end": action_end,
        "observation_start": action_end + 1,
        "observation_end": action_end + 1 + observation,
    }


def render_trajectory(prompt: str, actions: Sequence[str], observations: Sequence[str]) -> str:
    """The plain text rendering that the offsets of a rewards file index into.

    Args:
        prompt: The trajectory's prompt (may be empty).
        actions: Each turn's action.
        observations: Each turn's observation.
    """
    parts = [prompt + "\n"] if prompt else []
    for action, observation in zip(actions, observations, strict=True):
        parts.append(f"{action}\n{observation}\n")
    return "".join(parts)


def last_token_indices(
    offset_mapping: Sequence[tuple[int, int]] | np.ndarray, char_ends: Sequence[int] | np.ndarray
) -> np.ndarray:
    """For each character end (exclusive), the index of the token holding its last character.

    Use with a Hugging Face fast tokenizer's ``return_offsets_mapping=True`` over the same text
    the offsets refer to: it gives the token at which a per-turn reward is placed (e.g. verl's
    token-level reward tensor). Tokens with an empty span (special tokens) are skipped.

    Args:
        offset_mapping: ``(start, end)`` character span of each token, in order.
        char_ends: Exclusive character ends (e.g. a rewards file's ``action_end``).

    Returns:
        Token indices; -1 where no token covers the character before the end.
    """
    spans = np.asarray(offset_mapping, dtype=np.int64).reshape(-1, 2)
    ends = np.asarray(char_ends, dtype=np.int64)
    real = np.flatnonzero(spans[:, 1] > spans[:, 0])
    if real.size == 0:
        return np.full(ends.shape, -1, dtype=np.int64)
    token_ends = spans[real, 1]
    pos = np.searchsorted(token_ends, ends, side="left")  # first token ending at or after it
    pos_clipped = np.minimum(pos, real.size - 1)
    covered = (pos < real.size) & (spans[real[pos_clipped], 0] < ends) & (ends > 0)
    return np.where(covered, real[pos_clipped], -1)


def generation_segments(model_mask: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
    """Which assistant generation each completion token belongs to, from a model-token mask.

    A multi-turn completion alternates the model's generations and the tool results spliced
    in between (TRL's ``tool_mask``: 1 on tokens the model wrote, 0 on tool-result tokens;
    multiply by the padding mask first so padding reads 0). Each maximal run of 1s is one
    generation; the ``k``-th run (0-based) gets ``k``.

    Args:
        model_mask: ``(n_sequences, n_tokens)`` 0/1 mask.

    Returns:
        ``(n_sequences, n_tokens)`` int array: the generation index on model tokens, -1 on
        the others.
    """
    mask = np.asarray(model_mask).astype(bool)
    if mask.ndim != 2:
        raise ValueError("model_mask must be two-dimensional (sequences x tokens)")
    starts = mask & ~np.pad(mask, ((0, 0), (1, 0)))[:, :-1]  # a 1 after a 0 (or at the start)
    index = np.cumsum(starts, axis=1) - 1
    return np.where(mask, index, -1)
