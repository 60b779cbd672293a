"""The neural PRM: a causal backbone and a head that scores every turn at its step marker.

A trajectory is read once, left to right (:mod:`prm.data.windows`). The score of turn ``t`` is read
at turn ``t``'s marker: a linear head on the hidden state there (``pool="marker"``), or on that
and the mean hidden state over the turn's own tokens (``pool="marker+mean"``). Causal attention
means those states are functions of the tokens up to the marker only, so no turn sees a later
one, and one forward pass scores every turn (instead of one pass per prefix).

Heads: ``binary`` (one logit; the score is its sigmoid, P(good step)), trained with binary
cross-entropy on soft targets in [0, 1]; or ``ternary`` (three logits for the labels -1 / 0 /
+1), trained with cross-entropy, whose score is P(the step is not an error) = 1 - P(-1): a
neutral step is no error (a stored label below 0 is), so the score means the same thing
everywhere downstream (``step_scores``, ``prm`` marking, BudgetMix).

Word-novelty inputs (on by default for ``tiny``): each token also carries whether it belongs
to an action and whether its word is one the window's prompt and observations never showed
(:func:`prm.data.novelty.novelty_codes`), the comparison a silent error (a wrong id or amount) needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data.novelty import novelty_codes, word_piece_tables
from prm.data.tokenize import TokenIds, load_tokenizer
from prm.data.tokenize import train_tokenizer as train_tokenizer  # re-exported for older imports
from prm.data.windows import collate, token_budget_batches
from prm.spec import (
    BACKBONE_DIR,
    POOLS,
    PRETRAINED,
    SPEC_FILE,
    WEIGHT_FILES,
    WEIGHTS_FILE,
    PRMSpec,
)
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    import pandas as pd
    import torch
    from transformers import PreTrainedTokenizerBase

    from prm.data.windows import Window

SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "intermediate_size", "max_position_embeddings")
"""Sizes of a backbone's ``config.json`` that must be positive whole numbers; each is checked
against the weights' tensor shapes (:func:`check_backbone_shapes`) before a model is built."""

_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\.")


def _torch_module() -> type:
    """The StepScorer class, defined on first use so that importing prm.neural.model does not import
    torch.

    Long because it holds the class definition (its __init__, features and forward), which the
    function keeps out of module import.
    """
    from torch import nn

    class StepScorer(nn.Module):
        """A causal backbone and a linear head read at the step markers.

        With ``novelty`` each token's input embedding gets a learned vector for its
        :func:`prm.data.novelty.novelty_codes` and its role: whether the word it belongs to, up to
        it, is new to what the prompt and the observations of the window said, and whether the
        token is part of an action. A wrong id or amount is a word the history never showed;
        finding that by attention alone takes a previous-token head, an induction head and a
        head that carries the result to the marker, which a small model trained briefly on CPU
        did not learn (docs/prm.md measures it). The codes hand it the comparison; the model
        still learns which new words matter.
        """

        def __init__(self, backbone: Any, novelty_tables: torch.Tensor | None = None,
                     n_outputs: int = 1, pool: str = "marker"):
            super().__init__()
            if pool not in POOLS:
                raise ValueError(f"unknown pool {pool!r}; use {' or '.join(POOLS)}")
            self.backbone = backbone
            self.pool = pool
            self.n_outputs = n_outputs
            width = backbone.config.hidden_size * (2 if pool == "marker+mean" else 1)
            self.head = nn.Linear(width, n_outputs)
            self.novelty = None
            if novelty_tables is not None:
                self.register_buffer("word_pieces", novelty_tables.clone())
                self.novelty = nn.Embedding(6, backbone.config.hidden_size)
                nn.init.normal_(self.novelty.weight, std=0.02)

        def features(
            self,
            input_ids: torch.Tensor,
            step_mask: torch.Tensor,
            actions: torch.Tensor | None = None,
            turn_index: torch.Tensor | None = None,
        ) -> torch.Tensor:
            """What the head reads at each marker, ``(markers, width)``, row-major order.

            ``actions`` marks the tokens of the agent's actions (``Batch.actions``); without it
            every token counts as evidence and none as an action. ``turn_index`` (needed by
            ``marker+mean``) maps tokens to their scored turn.

            No attention mask: padding is on the right and attention is causal, so a real
            token never attends to padding, and the kernel takes its plain causal path.
            """
            import torch

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
            # Only the markers go on: the gather saves the (B, L) logits tensor and keeps the
            # loss in the order the targets are built.
            marker = hidden[step_mask]
            if self.pool == "marker":
                return marker
            if turn_index is None:
                raise ValueError("pool marker+mean needs the batch's turn_index")
            flat = turn_index.reshape(-1)
            keep = flat >= 0
            values = hidden.reshape(-1, hidden.shape[-1])[keep].float()
            sums = torch.zeros((marker.shape[0], hidden.shape[-1]), dtype=values.dtype,
                               device=hidden.device).index_add_(0, flat[keep], values)
            counts = torch.bincount(flat[keep], minlength=marker.shape[0]).clamp(min=1)
            mean = (sums / counts[:, None]).to(marker.dtype)
            return torch.cat([marker, mean], dim=-1)

        def forward(
            self,
            input_ids: torch.Tensor,
            step_mask: torch.Tensor,
            actions: torch.Tensor | None = None,
            turn_index: torch.Tensor | None = None,
        ) -> torch.Tensor:
            """Logits at the marked positions: ``(markers,)`` binary, ``(markers, 3)`` ternary."""
            logits = self.head(self.features(input_ids, step_mask, actions, turn_index)).float()
            return logits.squeeze(-1) if self.n_outputs == 1 else logits

    return StepScorer


def build_scorer(
    backbone: Any, tokenizer: PreTrainedTokenizerBase | None = None, *, novelty: bool = False,
    n_outputs: int = 1, pool: str = "marker",
) -> torch.nn.Module:
    """Wrap a backbone with a fresh head (a ``StepScorer`` module).

    Args:
        backbone: A causal ``transformers`` model.
        tokenizer: Its tokenizer (needed for ``novelty``).
        novelty: Add word-novelty inputs (see ``StepScorer``).
        n_outputs: 1 (binary) or 3 (ternary).
        pool: ``marker`` or ``marker+mean``.
    """
    tables = None
    if novelty:
        if tokenizer is None:
            raise ValueError("novelty inputs need the tokenizer")
        size = backbone.get_input_embeddings().num_embeddings
        tables = word_piece_tables(tokenizer, max(size, len(tokenizer)))
    return _torch_module()(backbone, tables, n_outputs, pool)


def step_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean loss of step logits against targets in [0, 1]; NaN targets are skipped.

    Binary logits ``(n,)``: binary cross-entropy on the soft targets. Ternary logits ``(n, 3)``:
    cross-entropy against the classes -1 / 0 / +1 (targets 0, 0.5, 1).

    Returns a zero that still carries gradient when no target is known, so every process of a
    distributed run takes part in the same all-reduce.
    """
    import torch.nn.functional as F

    known = ~targets.isnan()
    if not bool(known.any()):
        return logits.sum() * 0.0
    if logits.dim() == 2:
        import torch

        from prm.data.labels import class_index

        classes = torch.from_numpy(class_index(targets[known].detach().cpu().numpy())).to(
            logits.device)
        return F.cross_entropy(logits[known], classes)
    return F.binary_cross_entropy_with_logits(logits[known], targets[known])


def probabilities(logits: torch.Tensor) -> torch.Tensor:
    """Binary: the sigmoid ``(n,)``. Ternary: class probabilities ``(n, 3)`` of -1, 0, +1."""
    import torch

    return torch.sigmoid(logits) if logits.dim() == 1 else torch.softmax(logits, dim=-1)


def good_score(probs: Any) -> Any:
    """The PRM score, P(the step is not an error), from :func:`probabilities` (numpy)."""
    return probs if probs.ndim == 1 else 1.0 - probs[:, 0]


def step_frame(windows: list[Any], probs: list[Any]) -> pd.DataFrame:
    """One row per scored turn of ``windows``: ``traj_id, t, target, score`` and, for a
    ternary model, ``p_neutral`` (from :func:`prm.neural.model.score_windows`'s output)."""
    import numpy as np
    import pandas as pd

    if not windows:
        return pd.DataFrame({"traj_id": [], "t": [], "target": [], "score": []})
    stacked = np.concatenate(probs)
    frame = pd.DataFrame({
        "traj_id": np.repeat([w.traj_id for w in windows], [len(w.step_ts) for w in windows]),
        "t": np.concatenate([np.asarray(w.step_ts, dtype=np.int64) for w in windows]),
        "target": np.array([x for w in windows for x in w.targets], dtype=float),
        "score": good_score(stacked),
    })
    if stacked.ndim == 2:
        frame["p_neutral"] = stacked[:, 1]
    return frame


def save_scorer(
    directory: str | Path, scorer: Any, tokenizer: PreTrainedTokenizerBase, spec: PRMSpec
) -> None:
    """Write a neural PRM: spec, backbone config, tokenizer and weights (safetensors).

    A ``frozen`` model keeps only the head's tensors: its backbone is the shipped one.
    """
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    spec.save(directory)
    scorer.backbone.config.save_pretrained(directory / BACKBONE_DIR)
    tokenizer.save_pretrained(directory)
    state = {k: v.detach().contiguous().cpu() for k, v in scorer.state_dict().items()
             if not (spec.mode == "frozen" and k.startswith("backbone."))}
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


def load_weights(path: Path) -> dict[str, Any]:
    """The tensors of a safetensors file of a model folder or checkpoint.

    Raises:
        InputProblem: naming the file when it is missing, truncated or not safetensors.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise InputProblem(f"{path} is missing")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as err:  # a damaged or truncated file
        raise InputProblem(f"{path}: damaged or not a safetensors file ({err})") from None


def weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """The tensor names and shapes of a safetensors file, from its header alone (no tensor is
    read), or of every shard named by a ``model.safetensors.index.json``.

    Raises:
        InputProblem: naming the file when it is missing, truncated or not safetensors.
    """
    from safetensors import SafetensorError, safe_open

    if path.name.endswith(".index.json"):
        from prm.spec import read_json

        index = read_json(path)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(
                isinstance(v, str) and "/" not in v and v.endswith(".safetensors")
                for v in weight_map.values()):
            raise InputProblem(f"{path}: not a safetensors index (no weight_map of shard files)")
        shapes: dict[str, tuple[int, ...]] = {}
        for shard in sorted(set(weight_map.values())):
            shapes.update(weight_shapes(path.parent / shard))
        return shapes
    if not path.is_file():
        raise InputProblem(f"{path} is missing")
    try:
        with safe_open(str(path), "pt") as fh:
            return {key: tuple(fh.get_slice(key).get_shape()) for key in fh.keys()}  # noqa: SIM118
    except (SafetensorError, OSError) as err:  # a damaged or truncated file
        raise InputProblem(f"{path}: damaged or not a safetensors file ({err})") from None


def _read_config(folder: Path, trust: bool) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(folder, trust_remote_code=trust)
    except Exception as err:  # OSError, ValueError, the strict dataclass validation errors
        first = str(err).strip().splitlines()
        raise InputProblem(
            f"{folder / 'config.json'}: cannot be read ({type(err).__name__}: "
            f"{' '.join(line.strip() for line in first[:3]) or 'no detail'})"
        ) from None


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def check_backbone_shapes(
    config: Any, shapes: dict[str, tuple[int, ...]], *, config_path: Path, weights_path: Path,
    trust_remote_code: bool = False, strict: bool = True, shown_prefix: str = "",
) -> None:
    """Check a backbone's config against the tensor shapes of its weights, building nothing.

    The sizes (:data:`SIZE_FIELDS`) must be positive whole numbers, the layer count must be
    the weights' own, and the module the config describes, built on the ``meta`` device (shapes
    only, no memory), must have the weights' shape for every tensor.

    Args:
        config: The ``transformers`` config.
        shapes: Tensor shapes of the weights (:func:`weight_shapes`), without a ``backbone.``
            prefix.
        config_path: Named in messages.
        weights_path: Named in messages.
        trust_remote_code: The user's permission (the config's own code class, if any).
        strict: Every tensor of the module must be in the weights and nothing else (a PRM's
            own backbone); otherwise tensors the weights lack are left out of the comparison
            and a base-model prefix (``model.``) is allowed (a transformers model folder).
        shown_prefix: Put before tensor names in messages (``backbone.``: as the file has them).

    Raises:
        UsageProblem: naming the config file and the field that disagrees with the weights.
    """
    import torch
    from transformers import AutoModel

    for name in SIZE_FIELDS:
        value = getattr(config, name, None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageProblem(f"{config_path}: {name} is {value!r}; it must be a positive "
                               f"whole number")
    layers = getattr(config, "num_hidden_layers", None)
    indices = {int(m.group(1)) for key in shapes if (m := _LAYER_INDEX.search(key))}
    found = max(indices) + 1 if indices else 0
    if layers is not None and layers != found:
        raise UsageProblem(f"{config_path}: num_hidden_layers is {layers}, but {weights_path} "
                           f"has {found} layers")
    try:
        with torch.device("meta"):
            module = AutoModel.from_config(config, trust_remote_code=trust_remote_code,
                                           attn_implementation="sdpa")
    except Exception as err:  # the config's sizes do not make a model
        raise UsageProblem(f"{config_path}: does not describe a model ({type(err).__name__}: "
                           f"{str(err).splitlines()[0] if str(err) else 'no detail'})") from None
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    prefix = f"{getattr(module, 'base_model_prefix', '')}."
    if not strict and prefix != "." and not set(expected) & set(shapes):
        shapes = {k.removeprefix(prefix): v for k, v in shapes.items()}
    sizes = {name: getattr(config, name) for name in SIZE_FIELDS
             if getattr(config, name, None) is not None}
    for key, shape in expected.items():
        got = shapes.get(key)
        if got is None:
            if strict:
                raise UsageProblem(f"{config_path}: describes a tensor {shown_prefix}{key} that "
                                   f"{weights_path} does not have")
            continue
        if got != shape:
            named = [n for n, v in sizes.items() if v in shape and v not in got] or list(sizes)
            raise UsageProblem(
                f"{config_path}: {', '.join(f'{n} {sizes[n]}' for n in named)} does not match "
                f"{weights_path} ({shown_prefix}{key} is {_shape(got)} there, the config makes it "
                f"{_shape(shape)})"
            )
    extra = sorted(shown_prefix + k for k in set(shapes) - set(expected)) if strict else []
    if extra:
        raise UsageProblem(f"{weights_path}: has tensors {config_path} does not describe "
                           f"({', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''})")


def check_weights(directory: Path, spec: PRMSpec, config: Any,
                  shapes: dict[str, tuple[int, ...]], *, config_path: Path) -> None:
    """Check a PRM's head (and novelty inputs) in its weights against the spec and config.

    Args:
        directory: The model folder.
        spec: Its checked spec (:func:`prm.spec.check_spec`).
        config: The backbone's config.
        shapes: Tensor shapes of the folder's ``model.safetensors`` (:func:`weight_shapes`).
        config_path: The config's file, named in messages.

    Raises:
        UsageProblem: the head, pool, novelty or window length of the spec does not fit the
            weights or the config (naming the file and the field).
    """
    weights_path, spec_path = directory / WEIGHTS_FILE, directory / SPEC_FILE
    hidden = config.hidden_size
    width = hidden * (2 if spec.pool == "marker+mean" else 1)
    for key, shape in (("head.weight", (spec.n_outputs, width)),
                       ("head.bias", (spec.n_outputs,))):
        got = shapes.get(key)
        if got is None:
            raise InputProblem(f"{weights_path}: lacks {key}")
        if got != shape:
            raise UsageProblem(
                f"{weights_path}: {key} is {_shape(got)}, but {spec_path}'s head "
                f"{spec.head!r} and pool {spec.pool!r} over hidden_size {hidden} need "
                f"{_shape(shape)}"
            )
    has_novelty = "novelty.weight" in shapes
    if spec.novelty != has_novelty or (has_novelty and shapes["novelty.weight"] != (6, hidden)):
        raise UsageProblem(
            f"{spec_path}: novelty is {str(spec.novelty).lower()}, but {weights_path} "
            + ("has no novelty inputs" if not has_novelty else
               f"has novelty inputs of shape {_shape(shapes['novelty.weight'])}")
        )
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and spec.max_length > positions:
        raise UsageProblem(f"{spec_path}: max_length is {spec.max_length}, more than the "
                           f"backbone's max_position_embeddings {positions} ({config_path})")


def _check_tokenizer(directory: Path, spec: PRMSpec, tokenizer: Any, config: Any,
                     config_path: Path) -> None:
    step = tokenizer.convert_tokens_to_ids(spec.step_token)
    if step is None or step == tokenizer.unk_token_id:
        raise UsageProblem(f"{directory / SPEC_FILE}: step_token {spec.step_token!r} is not a "
                           f"token of the tokenizer in {directory}")
    # The ids a window can hold: the base vocabulary (data never yields an added special
    # token: it is tokenised as plain text) and the marker, padding and start tokens.
    ids = TokenIds.of(tokenizer, spec.step_token)
    used = [tokenizer.vocab_size - 1, ids.step, ids.pad] + ([] if ids.bos is None else [ids.bos])
    if max(used) >= config.vocab_size:
        raise UsageProblem(f"{config_path}: vocab_size is {config.vocab_size}, but the "
                           f"tokenizer in {directory} uses token ids up to {max(used)}")


def load_scorer(directory: str | Path, device: str = "cpu", *,
                trust_remote_code: bool = False) -> LoadedPRM:
    """Load a neural PRM written by :func:`save_scorer` (or a training checkpoint).

    Everything is checked before a model is built: the spec (:func:`prm.spec.check_spec`),
    the backbone config's sizes against the weights' tensor shapes read from the safetensors
    header (:func:`check_backbone_shapes`), the head against the spec (:func:`check_weights`),
    and the step marker against the tokenizer.

    Args:
        directory: The model folder.
        device: Where to put it.
        trust_remote_code: The user's permission for a backbone's own code; a folder that
            needs it is refused without it (:meth:`prm.spec.PRMSpec.load`).

    Raises:
        InputProblem: a file of the folder is missing or damaged (the message names it).
        UsageProblem: a field of the spec or the config does not fit the rest of the folder
            (the message names the file and the field).
    """
    from transformers import AutoModel

    from prm.backbones import backbone_model, resolve_backbone

    directory = Path(directory)
    spec = PRMSpec.load(directory, trust_remote_code=trust_remote_code)
    trust = spec.trust_remote_code and trust_remote_code
    weights_path = directory / WEIGHTS_FILE
    shapes = weight_shapes(weights_path)
    if spec.mode == "frozen":
        source = resolve_backbone(spec.backbone)
        config_path = source / "config.json"
        config = _read_config(source, trust)
        if spec.backbone not in PRETRAINED:  # a folder the user named: checked like ours
            weights = next(source / w for w in WEIGHT_FILES if (source / w).is_file())
            check_backbone_shapes(config, weight_shapes(weights), config_path=config_path,
                                  weights_path=weights, trust_remote_code=trust, strict=False)
    else:
        config_path = directory / BACKBONE_DIR / "config.json"
        config = _read_config(directory / BACKBONE_DIR, trust)
        check_backbone_shapes(
            config, {k.removeprefix("backbone."): v for k, v in shapes.items()
                     if k.startswith("backbone.")},
            config_path=config_path, weights_path=weights_path, trust_remote_code=trust,
            shown_prefix="backbone.",
        )
    check_weights(directory, spec, config, shapes, config_path=config_path)
    tokenizer = load_tokenizer(directory)
    _check_tokenizer(directory, spec, tokenizer, config, config_path)
    if spec.mode == "frozen":
        backbone = backbone_model(source, trust_remote_code=trust)
    else:
        backbone = AutoModel.from_config(config, trust_remote_code=trust,
                                         attn_implementation="sdpa")
    scorer = build_scorer(backbone, tokenizer, novelty=spec.novelty, n_outputs=spec.n_outputs,
                          pool=spec.pool)
    state = load_weights(weights_path)
    try:
        scorer.load_state_dict(state, strict=spec.mode != "frozen")
    except RuntimeError as err:
        raise InputProblem(f"{weights_path}: does not match {directory}'s config ({err})"
                           ) from None
    expected = {k for k in scorer.state_dict() if not k.startswith("backbone.")}
    if not expected <= set(state):
        raise InputProblem(f"{weights_path}: lacks {sorted(expected - set(state))}")
    return LoadedPRM(scorer=scorer.to(device).eval(), tokenizer=tokenizer, spec=spec)


def score_windows(
    scorer: Any,
    windows: Sequence[Window],
    pad_id: int,
    *,
    device: Any = "cpu",
    batch_tokens: int = 16384,
    progress: Any = None,
) -> list[Any]:
    """Step probabilities of every window, one numpy array per window (:func:`probabilities`).

    Windows are scored in length-sorted token-budget batches; on CUDA under bf16 autocast.
    ``progress``, when given, is called with the number of turns of each batch scored.
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
            logits = scorer(batch.input_ids, batch.step_mask, batch.actions, batch.turn_index)
            probs = probabilities(logits).float().cpu()
            counts = [len(windows[i].step_ts) for i in batch_ids]
            for i, part in zip(batch_ids, torch.split(probs, counts), strict=True):
                out[i] = part.numpy().astype(np.float64)
            if progress is not None:
                progress(sum(counts))
    return out
