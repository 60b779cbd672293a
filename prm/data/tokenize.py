"""Tokenizers of the PRM: the ``tiny`` one trained on the store's own text, and loading one.

Every PRM tokenizer has a step marker token that ends each turn (the model reads the turn's
score there), a padding token, and usually a start token. Special-token strings inside the data
are tokenised as plain text (:func:`tokenise`), so data cannot forge a marker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.errors import InputProblem

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

STEP_TOKEN = "<|step|>"
PAD_TOKEN = "<|pad|>"
BOS_TOKEN = "<|bos|>"


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 4096, *, split_digits: bool = False
) -> PreTrainedTokenizerBase:
    """Train a byte-level BPE tokenizer on ``texts`` (offline), with the PRM's special tokens.

    By default runs of digits are merged by BPE like any other text (a run is never merged
    across a letter or punctuation), so the same number or id is spelt with the same tokens
    wherever it occurs, and a number that never occurred before tends to bring a token the
    context lacks: a one-layer attention lookup can notice that, where single digits (always
    somewhere in the context) would need a longer n-gram match.

    Args:
        texts: Training text (the store's prompts and turns).
        vocab_size: Vocabulary size, special tokens included.
        split_digits: Split digits one by one before BPE instead.

    Returns:
        A ``transformers`` fast tokenizer with ``pad``, ``bos`` and the step marker.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if split_digits else byte_level
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, BOS_TOKEN, STEP_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        extra_special_tokens={"step_token": STEP_TOKEN},
    )


def load_tokenizer(directory: str | Path) -> PreTrainedTokenizerBase:
    """The tokenizer saved in a model folder or checkpoint (never with remote code), once
    its files pass :func:`prm.data.tokenizer_checks.check_tokenizer_folder`.

    Raises:
        InputProblem: naming the folder's tokenizer file when it cannot be read.
        UsageProblem: ``tokenizer.json`` is not of the kind the toolkit writes.
    """
    from transformers import AutoTokenizer

    from prm.data.tokenizer_checks import check_tokenizer_folder

    directory = Path(directory)
    check_tokenizer_folder(directory)
    try:
        return AutoTokenizer.from_pretrained(directory, trust_remote_code=False)
    except Exception as err:  # tokenizers raises its own exception types for bad JSON
        name = "tokenizer.json" if (directory / "tokenizer.json").exists() else "tokenizer files"
        raise InputProblem(
            f"{directory / name}: cannot be read as a tokenizer ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'})"
        ) from None


@dataclass(frozen=True, slots=True)
class TokenIds:
    """The special token ids of a PRM tokenizer."""

    pad: int
    bos: int | None
    step: int

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase, step_token: str = STEP_TOKEN) -> TokenIds:
        """Read them from a tokenizer that has the step marker ``step_token``."""
        step = tokenizer.convert_tokens_to_ids(step_token)
        if step is None or step == tokenizer.unk_token_id:
            raise ValueError(f"tokenizer has no {step_token} token")
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else step
        bos = tokenizer.bos_token_id
        if bos is None:
            bos = tokenizer.cls_token_id  # BERT-like tokenizers start with [CLS]
        return cls(pad=pad, bos=bos, step=step)


def tokenise(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, without special tokens; special-token strings stay plain text."""
    if not texts:
        return []
    return tokenizer(
        list(texts), add_special_tokens=False, split_special_tokens=True, verbose=False
    )["input_ids"]
