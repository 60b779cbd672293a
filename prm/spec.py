"""The model folder that ``prm train`` writes: its file names, and the spec that rebuilds a PRM.

A model folder holds ``prm_config.json`` (:class:`PRMSpec`), ``split.json`` (the task split),
and either the neural model (``model.safetensors``, ``backbone/config.json``, the tokenizer) or
the TF-IDF baseline (``baseline.json`` and ``baseline.npz``). Nothing in it can run code when
loaded: no pickle, and ``trust_remote_code`` comes only from the user's own flag
(:func:`PRMSpec.load` refuses a folder that asks for it without the flag).
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
            UsageProblem: the spec asks for remote code and ``trust_remote_code`` is off.
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
        if spec.trust_remote_code and not trust_remote_code:
            raise UsageProblem(
                f"{path} asks to run the backbone's own Python code (trust_remote_code); it is "
                f"not loaded unless you pass {TRUST_FLAG}, and only do that for a model you trust"
            )
        return spec


def read_json(path: str | Path) -> Any:
    """Parse a JSON file of a model folder or checkpoint.

    Raises:
        InputProblem: naming the file when it cannot be read or is not valid JSON.
    """
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputProblem(f"{path} is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputProblem(f"{path}: not valid JSON ({err})") from None
