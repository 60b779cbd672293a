"""Word-novelty inputs: whether each word piece continues a word the history never showed.

A silent error (a wrong id or amount) is a word that no earlier prompt or observation text
showed; :func:`novelty_codes` hands the model that comparison per token, computed from the
tokens up to each one (so the model stays causal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

NOVELTY_MAX_PIECES = 16
"""Word pieces a word-prefix hash covers (a longer word is hashed by its last pieces)."""

_HASH_PRIMES = (2_147_483_629, 2_147_483_587)  # two primes below 2**31: products fit int64


def word_piece_tables(tokenizer: PreTrainedTokenizerBase, size: int | None = None) -> Any:
    """Per-token tables for :func:`novelty_codes`, shape ``(3, size)`` int64.

    Row 0: 1 where the token is a word piece (letters and digits only, after any leading
    whitespace). Row 1: 1 where it starts with whitespace (so starts a word). Row 2: an id of its
    text without the leading whitespace, equal for ``" 52"`` and ``"52"``, so a value reads the
    same in ``amount=52`` and in ``"balance": 52``. For a WordPiece vocabulary (BERT), whose
    pieces carry no whitespace, a piece starts a word unless it is a ``##`` continuation.
    """
    import torch

    size = size or len(tokenizer)
    tables = torch.zeros((3, size), dtype=torch.long)
    canonical: dict[str, int] = {}
    special = set(tokenizer.all_special_ids)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    wordpiece = backend is not None and type(backend.model).__name__ == "WordPiece"
    for token_id in range(min(size, len(tokenizer))):
        if wordpiece:
            piece = "" if token_id in special else tokenizer.convert_ids_to_tokens(token_id)
            stripped = piece.removeprefix("##")
            starts = bool(piece) and not piece.startswith("##")
        else:
            text = "" if token_id in special else tokenizer.decode([token_id])
            stripped = text.lstrip()
            starts = len(stripped) < len(text)
        tables[0, token_id] = int(stripped.isalnum())
        tables[1, token_id] = int(starts)
        tables[2, token_id] = canonical.setdefault(stripped, len(canonical) + 1)
    return tables


def novelty_codes(
    input_ids: torch.Tensor, tables: torch.Tensor, evidence: torch.Tensor | None = None
) -> torch.Tensor:
    """Whether each word piece continues a word the row has not shown before.

    A word is a run of word pieces (letters and digits; a piece with leading whitespace, or
    after punctuation, starts a new one). Code 0: not a word piece; 1: the word so far (its
    pieces from the word's start up to this one) began an earlier word of the row; 2: it did not.
    So a wrong id or amount gets a 2 at its first piece that no earlier word had, while a value
    copied from an earlier observation gets 1s. With ``evidence``, only earlier words at
    evidence positions count (the prompt and the observations, not the agent's own actions), so
    a wrong id stays new when the agent repeats it. The code of a token depends only on the
    tokens up to it: the model stays causal.

    Args:
        input_ids: ``(B, L)`` token ids.
        tables: :func:`word_piece_tables` of the tokenizer.
        evidence: ``(B, L)`` bool, the positions whose words count as shown (default: all).

    Returns:
        ``(B, L)`` int64 codes in ``{0, 1, 2}``.
    """
    import torch

    wordy, spaced, canonical = (row[input_ids] for row in tables)
    is_word = wordy.bool()
    before = torch.zeros_like(is_word)
    before[:, 1:] = is_word[:, :-1]
    starts = is_word & (spaced.bool() | ~before)
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    word_start = torch.where(starts, positions, torch.zeros_like(positions)).cummax(dim=1).values
    depth = positions - word_start  # pieces before this one in its word
    keys = []
    base = tables.shape[1] + 1  # above every canonical id; a shape, so no device sync
    for prime in _HASH_PRIMES:
        key = depth.clamp(max=NOVELTY_MAX_PIECES) + 1  # the length is part of the key
        power = 1
        for k in range(NOVELTY_MAX_PIECES):
            piece = torch.zeros_like(canonical)
            piece[:, k:] = canonical[:, : canonical.shape[1] - k]
            key = (key + (depth >= k).long() * piece * power) % prime
            power = power * base % prime
        keys.append(key)
    key = keys[0] * _HASH_PRIMES[1] + keys[1]
    key = torch.where(is_word, key, torch.full_like(key, -1))
    # A stable sort keeps equal keys in position order; within a run of equal keys, a word is
    # new when no earlier member of its run is evidence.
    ordered, order = torch.sort(key, dim=1, stable=True)
    run_start = torch.ones_like(ordered, dtype=torch.bool)
    run_start[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    shown = torch.ones_like(input_ids) if evidence is None else evidence.long()
    shown = shown.gather(1, order)
    before = shown.cumsum(dim=1) - shown  # evidence strictly before, in sorted order
    ranks = torch.arange(key.shape[1], device=key.device).expand_as(key)
    start_rank = torch.where(run_start, ranks, torch.zeros_like(ranks)).cummax(dim=1).values
    new_sorted = before == before.gather(1, start_rank)
    new = torch.zeros_like(new_sorted).scatter_(1, order, new_sorted)
    return torch.where(is_word, 1 + new.long(), torch.zeros_like(key))
