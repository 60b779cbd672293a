"""A neural PRM's folder: written (:func:`save_scorer`) and loaded (:func:`load_scorer`) with
every file checked before a model is built: the spec, the backbone config against the tensor
shapes of its weights (:func:`check_backbone_shapes`), the head (:func:`check_weights`) and the
tokenizer."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data.tokenize import TokenIds, load_tokenizer
from prm.neural.model import build_scorer
from prm.spec import BACKBONE_DIR, PRETRAINED, SPEC_FILE, WEIGHT_FILES, WEIGHTS_FILE, PRMSpec
from recovery.config import need, opt
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "intermediate_size", "max_position_embeddings")
"""Sizes of a backbone's ``config.json`` that must be positive whole numbers; each is checked
against the weights' tensor shapes (:func:`check_backbone_shapes`) before a model is built."""

_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\.")



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
    """A neural PRM: loaded from its folder, ready to score, or a frozen backbone whose head is
    fitted next (:func:`prm.neural.frozen.frozen_scorer`).

    Attributes:
        scorer: The ``StepScorer`` module (eval mode when loaded).
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


@dataclass(frozen=True)
class ShapeCheck:
    """How :func:`check_backbone_shapes` compares a backbone's config with its weights."""

    config_path: Path = need("The config file, named in messages.")
    weights_path: Path = need("The weights file, named in messages.")
    trust_remote_code: bool = opt(
        False, "The user's permission for the config's own code class, if it names one.")
    strict: bool = opt(
        True, "Every tensor of the module must be in the weights and nothing else (a PRM's own "
        "backbone); off: tensors the weights lack are left out of the comparison and a "
        "base-model prefix (model.) is allowed (a transformers model folder).")
    shown_prefix: str = opt(
        "", "Put before tensor names in messages (backbone.: as the PRM's file has them).")


def check_backbone_shapes(config: Any, shapes: dict[str, tuple[int, ...]],
                          check: ShapeCheck) -> None:
    """Check a backbone's config against the tensor shapes of its weights, building nothing.

    The sizes (:data:`SIZE_FIELDS`) must be positive whole numbers, the layer count must be
    the weights' own, and the module the config describes, built on the ``meta`` device (shapes
    only, no memory), must have the weights' shape for every tensor. ``shapes`` are the weights'
    (:func:`weight_shapes`), without a ``backbone.`` prefix.

    Raises:
        UsageProblem: naming the config file and the field that disagrees with the weights.
    """
    import torch
    from transformers import AutoModel

    config_path, weights_path = check.config_path, check.weights_path
    strict, shown_prefix = check.strict, check.shown_prefix
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
            module = AutoModel.from_config(config, trust_remote_code=check.trust_remote_code,
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
            check_backbone_shapes(config, weight_shapes(weights), ShapeCheck(
                config_path, weights, trust_remote_code=trust, strict=False))
    else:
        config_path = directory / BACKBONE_DIR / "config.json"
        config = _read_config(directory / BACKBONE_DIR, trust)
        check_backbone_shapes(
            config, {k.removeprefix("backbone."): v for k, v in shapes.items()
                     if k.startswith("backbone.")},
            ShapeCheck(config_path, weights_path, trust_remote_code=trust,
                       shown_prefix="backbone."),
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
