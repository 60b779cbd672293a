"""Windows and batches: trajectories as token windows that never hold a later turn.

A trajectory is read left to right: ``[BOS] prompt  turn_1 <step>  turn_2 <step> ...``. Long
trajectories are cut into windows of at most ``max_length`` tokens: turns are packed left to
right; when the next turn does not fit, a new window starts with ``[BOS]``, the prompt's last
tokens (the task is kept) and as many of the most recent earlier turns as fit in half the
window (context, not scored: the oldest turns are dropped, never the scored one), then the
turn. Where a window starts depends only on the lengths of the turns up to it, so appending
turns never changes an earlier turn's score. A single turn longer than half the window keeps
its last tokens (the observation, where errors show).

Batches are length-bucketed by a token budget (:func:`epoch_batches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prm.data.examples import ACTION_PREFIX, OBSERVATION_SEPARATOR
from prm.data.tokenize import STEP_TOKEN, TokenIds, tokenise

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from prm.data.examples import StepExample

MIN_WINDOW = 16
"""The fewest tokens a window may hold (``--max-length``)."""

BUCKET_WINDOWS = 512
"""Windows per length bucket: larger buckets pad less, smaller ones shuffle more."""


@dataclass(slots=True)
class Window:
    """A tokenised stretch of one trajectory, with the turns it scores.

    Attributes:
        traj_id: The trajectory.
        input_ids: Tokens, ``[BOS]`` first.
        step_positions: Index in ``input_ids`` of each scored turn's marker (ascending).
        step_ts: Turn index (1-based) of each scored marker.
        targets: Training target of each scored turn (NaN when unknown).
        actions: 1 for each token of an action, 0 for the rest (prompt, observations,
            markers), as long as ``input_ids``.
        step_starts: Index in ``input_ids`` of the first token of each scored turn.
    """

    traj_id: str
    input_ids: list[int]
    step_positions: list[int]
    step_ts: list[int]
    targets: list[float]
    actions: list[int] = field(default_factory=list)
    step_starts: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)


def encode_examples(
    examples: Sequence[StepExample],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int = 1024,
    max_prompt_tokens: int = 256,
    step_token: str = STEP_TOKEN,
) -> list[Window]:
    """Tokenise examples into windows of at most ``max_length`` tokens (see module docstring).

    Args:
        examples: Step examples.
        tokenizer: A tokenizer with the step marker.
        max_length: Tokens per window; at least 16.
        max_prompt_tokens: Prompt tokens kept (its last ones); capped at a quarter window.
        step_token: The marker token ending each turn.

    Returns:
        Windows in example order; every turn is scored in exactly one window.
    """
    if max_length < MIN_WINDOW:
        raise ValueError(f"max_length must be at least {MIN_WINDOW}")
    ids = TokenIds.of(tokenizer, step_token)
    head = [] if ids.bos is None else [ids.bos]
    prompt_cap = min(max_prompt_tokens, max_length // 4)
    step_cap = max_length // 2 - 1
    prompts = tokenise(tokenizer, [e.prompt for e in examples])
    # A turn is tokenised as its action and its observation apart, so each token knows which
    # it belongs to (byte-level BPE splits at the separator's newline anyway).
    flat_actions = tokenise(tokenizer, [ACTION_PREFIX + a for e in examples for a in e.actions])
    flat_observations = tokenise(
        tokenizer, [OBSERVATION_SEPARATOR + o for e in examples for o in e.observations]
    )
    windows: list[Window] = []
    cursor = 0
    for example, prompt_ids in zip(examples, prompts, strict=True):
        prefix = head + (prompt_ids[-prompt_cap:] if prompt_cap > 0 else [])
        context_budget = max_length // 2 - len(prefix)
        history: list[tuple[list[int], list[int]]] = []
        current = Window(example.traj_id, list(prefix), [], [], [], [0] * len(prefix))
        for t in range(1, example.n_steps + 1):
            action_ids, observation_ids = flat_actions[cursor], flat_observations[cursor]
            step_ids = [*(action_ids + observation_ids)[-step_cap:], ids.step]
            roles = [*([1] * len(action_ids) + [0] * len(observation_ids))[-step_cap:], 0]
            cursor += 1
            if len(current.input_ids) + len(step_ids) > max_length:
                if current.step_ts:
                    windows.append(current)
                context: list[int] = []
                context_roles: list[int] = []
                for earlier, earlier_roles in reversed(history):
                    if len(context) + len(earlier) > context_budget:
                        break
                    context = earlier + context
                    context_roles = earlier_roles + context_roles
                current = Window(example.traj_id, prefix + context, [], [], [],
                                 [0] * len(prefix) + context_roles)
            current.step_starts.append(len(current.input_ids))
            current.input_ids.extend(step_ids)
            current.actions.extend(roles)
            current.step_positions.append(len(current.input_ids) - 1)
            current.step_ts.append(t)
            current.targets.append(float(example.targets[t - 1]))
            history.append((step_ids, roles))
        if current.step_ts:
            windows.append(current)
    return windows


@dataclass(slots=True)
class Batch:
    """Windows padded on the right into tensors.

    Attributes:
        input_ids: ``(B, L)`` token ids.
        step_mask: ``(B, L)`` true at scored markers.
        targets: Targets of the scored markers, row-major.
        n_real_tokens: Tokens that are not padding.
        actions: ``(B, L)`` true at the tokens of actions.
        turn_index: ``(B, L)`` the row-major index of the scored turn each token belongs to
            (its marker included), -1 for the prompt, context turns and padding.
    """

    input_ids: torch.Tensor
    step_mask: torch.Tensor
    targets: torch.Tensor
    n_real_tokens: int
    actions: torch.Tensor | None = None
    turn_index: torch.Tensor | None = None

    @property
    def n_tokens(self) -> int:
        """Tokens including padding."""
        return int(self.input_ids.numel())

    def to(self, device: Any) -> Batch:
        """Move the tensors to ``device``."""
        return Batch(
            self.input_ids.to(device, non_blocking=True),
            self.step_mask.to(device, non_blocking=True),
            self.targets.to(device, non_blocking=True),
            self.n_real_tokens,
            None if self.actions is None else self.actions.to(device, non_blocking=True),
            None if self.turn_index is None else self.turn_index.to(device, non_blocking=True),
        )


def collate(windows: Sequence[Window], pad_id: int) -> Batch:
    """Pad windows on the right to the longest one."""
    import torch

    width = max(len(w) for w in windows)
    input_ids = torch.full((len(windows), width), pad_id, dtype=torch.long)
    step_mask = torch.zeros((len(windows), width), dtype=torch.bool)
    actions = torch.zeros((len(windows), width), dtype=torch.bool)
    turn_index = torch.full((len(windows), width), -1, dtype=torch.long)
    targets: list[float] = []
    for row, window in enumerate(windows):
        input_ids[row, : len(window)] = torch.tensor(window.input_ids, dtype=torch.long)
        step_mask[row, window.step_positions] = True
        if window.actions:
            actions[row, : len(window)] = torch.tensor(window.actions, dtype=torch.bool)
        spans = zip(window.step_starts, window.step_positions, strict=False)
        for k, (start, end) in enumerate(spans, start=len(targets)):
            turn_index[row, start : end + 1] = k
        targets.extend(window.targets)
    return Batch(
        input_ids=input_ids,
        step_mask=step_mask,
        targets=torch.tensor(targets, dtype=torch.float32),
        n_real_tokens=sum(len(w) for w in windows),
        actions=actions,
        turn_index=turn_index,
    )


def token_budget_batches(
    lengths: Sequence[int], batch_tokens: int, order: Sequence[int] | None = None
) -> list[list[int]]:
    """Cut windows, visited in ``order``, into batches whose padded size fits ``batch_tokens``.

    A batch holds ``n`` windows when ``n * (its longest window) <= batch_tokens``; a window
    longer than the budget gets a batch of its own. Visit windows sorted by length to keep
    padding small.

    Returns:
        Lists of window indices.
    """
    order = range(len(lengths)) if order is None else order
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        width = max(longest, lengths[index])
        if current and width * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, width = [], lengths[index]
        current.append(index)
        longest = width
    if current:
        batches.append(current)
    return batches




def epoch_batches(
    lengths: Sequence[int], batch_tokens: int, seed: int, epoch: int, world_size: int = 1,
    rank: int = 0,
) -> list[list[int]]:
    """This rank's batches (lists of window indices) for one epoch.

    The windows are shuffled with a generator seeded by ``(seed, epoch)``, sorted by length
    within buckets of :data:`BUCKET_WINDOWS`, cut by :func:`token_budget_batches`, and the
    batches shuffled. A function of ``(seed, epoch)`` only, so a resumed run sees the same order.
    With several processes the list is padded by repeating its head (as ``DistributedSampler``
    does) and each rank takes every ``world_size``-th batch.
    """
    import numpy as np

    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    batches: list[list[int]] = []
    for start in range(0, len(order), BUCKET_WINDOWS):
        bucket = sorted(order[start : start + BUCKET_WINDOWS].tolist(), key=lambda i: lengths[i])
        batches.extend(token_budget_batches(lengths, batch_tokens, bucket))
    batches = [batches[i] for i in rng.permutation(len(batches))]
    if world_size > 1:
        short = (-len(batches)) % world_size
        batches = batches + [batches[i % len(batches)] for i in range(short)]
        batches = batches[rank::world_size]
    return batches
