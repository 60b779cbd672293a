"""The neural PRM: a causal transformer that scores every turn at its step marker.

A trajectory is read once, left to right: ``[BOS] prompt  turn_1 <step>  turn_2 <step> ...``.
The score of turn ``t`` is a linear head on the hidden state at turn ``t``'s marker. Causal
attention means that state is a function of the tokens up to the marker only, so no turn sees a
later one, and one forward pass scores every turn (instead of one pass per prefix).

Backbones: ``tiny`` builds a small Qwen2 config locally and trains a byte-level BPE tokenizer on
the store's own text (fully offline, fast on CPU), or any local (or cached hub) model path
through ``transformers.AutoModel``, with ``trust_remote_code`` off unless asked. A backbone whose
attention is not causal (BERT-like) is refused: it would let a turn see later turns. The head
is trained with binary cross-entropy on soft targets in [0, 1].

Long trajectories are cut into windows that never hold a later turn: turns are packed left to
right; when the next turn does not fit in ``max_length`` tokens, a new window starts with
``[BOS]``, the prompt's last tokens and as many of the most recent earlier turns as fit in half
the window (as context, not scored), then the turn. Where a window starts depends only on the
lengths of the turns up to it, so appending turns never changes an earlier turn's score. A
single turn longer than half the window keeps its last tokens (the observation, where errors
show).

Word-novelty inputs (on by default in ``prm train``): each token also carries whether it belongs
to an action and whether its word is one the window's prompt and observations never showed
(:func:`novelty_codes`), the comparison a silent error (a wrong id or amount) needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data import OBSERVATION_SEPARATOR

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from prm.data import StepExample

STEP_TOKEN = "<|step|>"
PAD_TOKEN = "<|pad|>"
BOS_TOKEN = "<|bos|>"

SPEC_FILE = "prm_config.json"
WEIGHTS_FILE = "model.safetensors"
BACKBONE_DIR = "backbone"


@dataclass
class TinyConfig:
    """Size of the ``tiny`` backbone (a Qwen2 decoder) and its tokenizer.

    Attributes:
        vocab_size: BPE vocabulary size, special tokens included.
        hidden_size: Width of the residual stream.
        num_layers: Decoder layers.
        num_heads: Attention heads (as many key/value heads: no grouping at this size).
        intermediate_size: MLP width.
        split_digits: Tokenizer: one token per digit instead of BPE-merged digit runs.
    """

    vocab_size: int = 4096
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 384
    split_digits: bool = False


@dataclass
class PRMSpec:
    """Everything needed to rebuild a trained PRM (saved as ``prm_config.json``).

    Attributes:
        kind: ``"neural"`` or ``"sklearn"``.
        backbone: ``"tiny"``, a model path, or ``"sklearn"``.
        labels: Label source the model was trained on.
        label_base: Base of ``recovery`` labels.
        max_length: Tokens per window.
        max_prompt_tokens: Prompt tokens kept (the last ones).
        trust_remote_code: Passed to transformers when loading a path.
        novelty: Word-novelty inputs (``StepScorer``).
        tiny: Size of the tiny backbone (``tiny`` only).
    """

    kind: str = "neural"
    backbone: str = "tiny"
    labels: str = "recovery"
    label_base: str = "mc"
    max_length: int = 1024
    max_prompt_tokens: int = 256
    trust_remote_code: bool = False
    novelty: bool = False
    tiny: TinyConfig = field(default_factory=TinyConfig)

    def save(self, directory: str | Path) -> None:
        """Write ``prm_config.json`` into ``directory``."""
        Path(directory, SPEC_FILE).write_text(json.dumps(asdict(self), indent=1, sort_keys=True))

    @classmethod
    def load(cls, directory: str | Path) -> PRMSpec:
        """Read ``prm_config.json`` from ``directory``."""
        raw = json.loads(Path(directory, SPEC_FILE).read_text())
        raw["tiny"] = TinyConfig(**raw.get("tiny", {}))
        return cls(**raw)


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


def tiny_backbone(tiny: TinyConfig, vocab_size: int, max_length: int) -> Any:
    """A freshly initialised small Qwen2 decoder (``transformers.Qwen2Model``).

    Args:
        tiny: Its size.
        vocab_size: Tokenizer size.
        max_length: Longest window (RoPE needs no table, but the config records it).
    """
    from transformers import AutoModel, Qwen2Config

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=tiny.hidden_size,
        intermediate_size=tiny.intermediate_size,
        num_hidden_layers=tiny.num_layers,
        num_attention_heads=tiny.num_heads,
        num_key_value_heads=tiny.num_heads,
        max_position_embeddings=max_length,
        tie_word_embeddings=False,
        attention_dropout=0.0,
    )
    return AutoModel.from_config(config, attn_implementation="sdpa")


def check_causal(backbone: Any) -> None:
    """Refuse a backbone whose hidden states depend on later tokens.

    Feeds two sequences that differ only in their last token and checks that the earlier
    positions agree; a bidirectional encoder fails this and would leak later turns.

    Raises:
        ValueError: when the backbone is not causal.
    """
    import torch

    vocab = backbone.get_input_embeddings().num_embeddings
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, 12), generator=generator)
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % vocab
    device = next(backbone.parameters()).device
    was_training = backbone.training
    backbone.eval()
    with torch.no_grad():
        a = backbone(input_ids=ids.to(device), use_cache=False).last_hidden_state[0, :-1]
        b = backbone(input_ids=changed.to(device), use_cache=False).last_hidden_state[0, :-1]
    backbone.train(was_training)
    if not torch.allclose(a.float(), b.float(), atol=1e-4):
        raise ValueError(
            "the backbone is not causal (earlier positions change when a later token does): an "
            "encoder would let a turn see later turns; use a decoder (causal LM) checkpoint"
        )


NOVELTY_MAX_PIECES = 16
"""Word pieces a word-prefix hash covers (a longer word is hashed by its last pieces)."""

_HASH_PRIMES = (2_147_483_629, 2_147_483_587)  # two primes below 2**31: products fit int64


def word_piece_tables(tokenizer: PreTrainedTokenizerBase, size: int | None = None) -> Any:
    """Per-token tables for :func:`novelty_codes`, shape ``(3, size)`` int64.

    Row 0: 1 where the token is a word piece (letters and digits only, after any leading
    whitespace). Row 1: 1 where it starts with whitespace (so starts a word). Row 2: an id of its
    text without the leading whitespace, equal for ``" 52"`` and ``"52"``, so a value reads the
    same in ``amount=52`` and in ``"balance": 52``.
    """
    import torch

    size = size or len(tokenizer)
    tables = torch.zeros((3, size), dtype=torch.long)
    canonical: dict[str, int] = {}
    special = set(tokenizer.all_special_ids)
    for token_id in range(min(size, len(tokenizer))):
        text = "" if token_id in special else tokenizer.decode([token_id])
        stripped = text.lstrip()
        tables[0, token_id] = int(stripped.isalnum())
        tables[1, token_id] = int(len(stripped) < len(text))
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


def _torch_module():
    from torch import nn

    class StepScorer(nn.Module):
        """A causal backbone and a linear head read at the step markers.

        With ``novelty`` each token's input embedding gets a learned vector for its
        :func:`novelty_codes` and its role: whether the word it belongs to, up to it, is new to
        what the prompt and the observations of the window said, and whether the token is part
        of an action. A wrong id or amount is a word the history never showed; finding that by
        attention alone takes a previous-token head, an induction head and a head that carries
        the result to the marker, which a small model trained briefly on CPU did not learn
        (docs/prm.md measures it). The codes hand it the comparison; the model still learns which new words
        matter (a new confirmation number in an observation is normal, a new id in an action
        is not).
        """

        def __init__(self, backbone: Any, novelty_tables: torch.Tensor | None = None):
            super().__init__()
            self.backbone = backbone
            self.head = nn.Linear(backbone.config.hidden_size, 1)
            self.novelty = None
            if novelty_tables is not None:
                self.register_buffer("word_pieces", novelty_tables.clone())
                self.novelty = nn.Embedding(6, backbone.config.hidden_size)
                nn.init.normal_(self.novelty.weight, std=0.02)

        def forward(
            self,
            input_ids: torch.Tensor,
            step_mask: torch.Tensor,
            actions: torch.Tensor | None = None,
        ) -> torch.Tensor:
            """Logits at the marked positions, in row-major (window, position) order.

            ``actions`` marks the tokens of the agent's actions (``Batch.actions``); without it
            every token counts as evidence and none as an action.

            No attention mask: padding is on the right and attention is causal, so a real
            token never attends to padding, and the kernel takes its plain causal path.
            """
            if self.novelty is not None:
                embed = self.backbone.get_input_embeddings()
                evidence = None if actions is None else ~actions
                codes = novelty_codes(input_ids, self.word_pieces, evidence)
                if actions is not None:
                    codes = codes + 3 * actions.long()
                hidden = self.backbone(
                    inputs_embeds=embed(input_ids) + self.novelty(codes), use_cache=False
                ).last_hidden_state
            else:
                hidden = self.backbone(input_ids=input_ids, use_cache=False).last_hidden_state
            # Project only the markers: the head is cheap, but the gather saves the (B, L)
            # logits tensor and keeps the loss in the order the targets are built.
            return self.head(hidden[step_mask]).squeeze(-1).float()

    return StepScorer


def build_scorer(
    backbone: Any, tokenizer: PreTrainedTokenizerBase | None = None, *, novelty: bool = False
) -> torch.nn.Module:
    """Wrap a backbone with a fresh linear head (a ``StepScorer`` module).

    Args:
        backbone: A causal ``transformers`` model.
        tokenizer: Its tokenizer (needed for ``novelty``).
        novelty: Add word-novelty inputs (see ``StepScorer``).
    """
    tables = None
    if novelty:
        if tokenizer is None:
            raise ValueError("novelty inputs need the tokenizer")
        size = backbone.get_input_embeddings().num_embeddings
        tables = word_piece_tables(tokenizer, max(size, len(tokenizer)))
    return _torch_module()(backbone, tables)


def step_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean binary cross-entropy of step logits against soft targets; NaN targets are skipped.

    Returns a zero that still carries gradient when no target is known, so every process of a
    distributed run takes part in the same all-reduce.
    """
    import torch.nn.functional as F

    known = ~targets.isnan()
    if not bool(known.any()):
        return logits.sum() * 0.0
    return F.binary_cross_entropy_with_logits(logits[known], targets[known])


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
    """

    traj_id: str
    input_ids: list[int]
    step_positions: list[int]
    step_ts: list[int]
    targets: list[float]
    actions: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.input_ids)


@dataclass(frozen=True, slots=True)
class TokenIds:
    """The special token ids of a PRM tokenizer."""

    pad: int
    bos: int | None
    step: int

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase) -> TokenIds:
        """Read them from a tokenizer that has the step marker."""
        step = tokenizer.convert_tokens_to_ids(STEP_TOKEN)
        if step is None or step == tokenizer.unk_token_id:
            raise ValueError(f"tokenizer has no {STEP_TOKEN} token")
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else step
        return cls(pad=pad, bos=tokenizer.bos_token_id, step=step)


def _tokenise(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[list[int]]:
    if not texts:
        return []
    # Special-token strings in the data are tokenised as plain text, so data cannot forge a
    # step marker.
    return tokenizer(
        list(texts), add_special_tokens=False, split_special_tokens=True
    )["input_ids"]


def encode_examples(
    examples: Sequence[StepExample],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int = 1024,
    max_prompt_tokens: int = 256,
) -> list[Window]:
    """Tokenise examples into windows of at most ``max_length`` tokens (see module docstring).

    Args:
        examples: Step examples.
        tokenizer: A tokenizer with the step marker.
        max_length: Tokens per window; at least 16.
        max_prompt_tokens: Prompt tokens kept (its last ones); capped at a quarter window.

    Returns:
        Windows in example order; every turn is scored in exactly one window.
    """
    if max_length < 16:
        raise ValueError("max_length must be at least 16")
    ids = TokenIds.of(tokenizer)
    head = [] if ids.bos is None else [ids.bos]
    prompt_cap = min(max_prompt_tokens, max_length // 4)
    step_cap = max_length // 2 - 1
    prompts = _tokenise(tokenizer, [e.prompt for e in examples])
    # A turn is tokenised as its action and its observation apart, so each token knows which
    # it belongs to (the text splits at its first separator; byte-level BPE splits there anyway).
    halves = [s.partition(OBSERVATION_SEPARATOR) for e in examples for s in e.steps]
    flat_actions = _tokenise(tokenizer, [action for action, _, _ in halves])
    flat_observations = _tokenise(tokenizer, [sep + obs for _, sep, obs in halves])
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
    """

    input_ids: torch.Tensor
    step_mask: torch.Tensor
    targets: torch.Tensor
    n_real_tokens: int
    actions: torch.Tensor | None = None

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
        )


def collate(windows: Sequence[Window], pad_id: int) -> Batch:
    """Pad windows on the right to the longest one."""
    import torch

    width = max(len(w) for w in windows)
    input_ids = torch.full((len(windows), width), pad_id, dtype=torch.long)
    step_mask = torch.zeros((len(windows), width), dtype=torch.bool)
    actions = torch.zeros((len(windows), width), dtype=torch.bool)
    targets: list[float] = []
    for row, window in enumerate(windows):
        input_ids[row, : len(window)] = torch.tensor(window.input_ids, dtype=torch.long)
        step_mask[row, window.step_positions] = True
        if window.actions:
            actions[row, : len(window)] = torch.tensor(window.actions, dtype=torch.bool)
        targets.extend(window.targets)
    return Batch(
        input_ids=input_ids,
        step_mask=step_mask,
        targets=torch.tensor(targets, dtype=torch.float32),
        n_real_tokens=sum(len(w) for w in windows),
        actions=actions,
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


def load_backbone(
    path: str, *, trust_remote_code: bool = False
) -> tuple[Any, PreTrainedTokenizerBase]:
    """A local (or cached hub) decoder and its tokenizer, with the step marker added.

    Args:
        path: Model directory or hub id (no network is used unless the cache lacks it).
        trust_remote_code: Allow the checkpoint's own Python code (off by default).

    Returns:
        The backbone (``transformers.AutoModel``) and its tokenizer.

    Raises:
        ValueError: when the backbone is not causal.
    """
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    tokenizer.add_special_tokens({"additional_special_tokens": [STEP_TOKEN]})
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or STEP_TOKEN
    backbone = AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code)
    if backbone.get_input_embeddings().num_embeddings < len(tokenizer):
        backbone.resize_token_embeddings(len(tokenizer))
    check_causal(backbone)
    return backbone, tokenizer


def save_scorer(
    directory: str | Path, scorer: Any, tokenizer: PreTrainedTokenizerBase, spec: PRMSpec
) -> None:
    """Write a neural PRM: spec, backbone config, tokenizer and weights (safetensors)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    spec.save(directory)
    scorer.backbone.config.save_pretrained(directory / BACKBONE_DIR)
    tokenizer.save_pretrained(directory)
    state = {k: v.detach().contiguous().cpu() for k, v in scorer.state_dict().items()}
    save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})


@dataclass
class LoadedPRM:
    """A neural PRM ready to score.

    Attributes:
        scorer: The ``StepScorer`` module (eval mode).
        tokenizer: Its tokenizer.
        spec: How it was built.
    """

    scorer: Any
    tokenizer: PreTrainedTokenizerBase
    spec: PRMSpec


def load_scorer(directory: str | Path, device: str = "cpu") -> LoadedPRM:
    """Load a neural PRM written by :func:`save_scorer` (or a training checkpoint)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    directory = Path(directory)
    spec = PRMSpec.load(directory)
    config = AutoConfig.from_pretrained(
        directory / BACKBONE_DIR, trust_remote_code=spec.trust_remote_code
    )
    backbone = AutoModel.from_config(
        config, trust_remote_code=spec.trust_remote_code, attn_implementation="sdpa"
    )
    tokenizer = AutoTokenizer.from_pretrained(directory)
    scorer = build_scorer(backbone, tokenizer, novelty=spec.novelty)
    scorer.load_state_dict(load_file(str(directory / WEIGHTS_FILE)))
    return LoadedPRM(scorer=scorer.to(device).eval(), tokenizer=tokenizer, spec=spec)


def score_windows(
    scorer: Any,
    windows: Sequence[Window],
    pad_id: int,
    *,
    device: Any = "cpu",
    batch_tokens: int = 16384,
) -> list[Any]:
    """Step scores (sigmoid of the logits) of every window, as one numpy array per window.

    Windows are scored in length-sorted token-budget batches; on CUDA under bf16 autocast.
    """
    import numpy as np
    import torch

    lengths = [len(w) for w in windows]
    order = sorted(range(len(windows)), key=lambda i: lengths[i])
    out: list[Any] = [None] * len(windows)
    use_cuda = torch.device(device).type == "cuda"
    scorer.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_cuda):
        for batch_ids in token_budget_batches(lengths, batch_tokens, order):
            batch = collate([windows[i] for i in batch_ids], pad_id).to(device)
            logits = scorer(batch.input_ids, batch.step_mask, batch.actions)
            scores = torch.sigmoid(logits).float().cpu()
            counts = [len(windows[i].step_ts) for i in batch_ids]
            for i, part in zip(batch_ids, torch.split(scores, counts), strict=True):
                out[i] = part.numpy().astype(np.float64)
    return out
