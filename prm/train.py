"""Training: a plain torch loop for the neural PRM, and the scikit-learn baseline.

The loop: AdamW (weight decay on matrices only), linear warm-up then cosine or linear decay,
gradient accumulation, gradient clipping, bf16 autocast and TF32 on CUDA, optional gradient
checkpointing. Batches are length-bucketed by a token budget: each epoch shuffles the windows
with a seeded generator, sorts them by length within buckets of ``BUCKET_WINDOWS`` windows,
cuts each bucket into batches of at most ``batch_tokens`` padded tokens and shuffles the
batches; the padding fraction is logged.

Under ``torchrun`` (``WORLD_SIZE`` > 1) the model is wrapped in DistributedDataParallel (NCCL on
CUDA, gloo on CPU); every process builds the same epoch batches and takes every
``world_size``-th one (the list padded by repeating its head, as ``DistributedSampler`` does).
Only rank 0 logs, shows progress and writes files.

Checkpoints (every ``save_every`` optimizer steps and at the end) hold the model in
safetensors, the optimizer tensors and each rank's RNG state in safetensors, and the step,
scheduler and data position in JSON. ``resume`` picks the latest checkpoint and continues exactly:
the data order is a function of (seed, epoch), so the run skips the batches it already took,
and on the same device and thread count the final weights equal those of an uninterrupted run.

After each epoch rank 0 measures the validation split (loss, AUROC, calibration); with
``keep_best`` (the default) the saved model is the epoch with the lowest validation loss, since
outcome-derived labels let a small model overfit its training tasks within a couple of epochs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data import DEFAULT_FRACTIONS, StepExample, TaskSplit, load_step_examples
from prm.labels import LABEL_SOURCES, RECOVERY_BASES
from prm.model import PRMSpec, TinyConfig
from recovery.config import opt

if TYPE_CHECKING:
    import torch

BUCKET_WINDOWS = 512
"""Windows per length bucket: larger buckets pad less, smaller ones shuffle more."""

CHECKPOINT_DIR = "checkpoints"
SPLIT_FILE = "split.json"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "train_summary.json"
TRAINER_STATE_FILE = "trainer_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"


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
        "tiny", "tiny (small Qwen2 built here), sklearn (TF-IDF baseline) or a local model path."
    )
    device: str = opt("auto", "auto, cuda or cpu.", choices=("auto", "cuda", "cpu"))
    epochs: int = opt(3, "Passes over the training split.")
    batch_tokens: int = opt(8192, "Padded tokens per micro-batch (per process).")
    grad_accum: int = opt(1, "Micro-batches per optimizer step.")
    lr: float = opt(1e-3, "Peak learning rate (AdamW).")
    weight_decay: float = opt(0.01, "AdamW weight decay on matrices.")
    warmup: float = opt(0.05, "Warm-up, as a fraction of all steps.")
    schedule: str = opt("cosine", "Decay after warm-up.", choices=("cosine", "linear"))
    max_grad_norm: float = opt(1.0, "Gradient clipping norm (0 = off).")
    max_length: int = opt(1024, "Tokens per window (longer trajectories are windowed).")
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
    trust_remote_code: bool = opt(False, "Allow a model path's own code.")
    threads: int | None = opt(
        None, "CPU threads per process for torch (default: torch's choice; 1 on a busy machine)."
    )
    novelty: bool = opt(
        True, "Give the model, per token, whether it is part of an action and whether its word "
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


@dataclass(frozen=True)
class Distributed:
    """This process's place in a (possibly single-process) run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs and writes."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """More than one process."""
        return self.world_size > 1


def _resolve_device(device: str, local_rank: int) -> str:
    import torch

    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"unknown device {device!r}; use auto, cuda or cpu")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda was asked for but CUDA is not available")
        return f"cuda:{local_rank}" if device == "cuda" else device
    return "cpu"


def init_distributed(device: str = "auto") -> Distributed:
    """Join the process group when launched by ``torchrun``; pick this process's device."""
    import torch
    import torch.distributed as dist

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    resolved = _resolve_device(device, local_rank)
    if resolved.startswith("cuda"):
        torch.cuda.set_device(torch.device(resolved))
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if resolved.startswith("cuda") else "gloo")
    return Distributed(rank=rank, world_size=world_size, local_rank=local_rank, device=resolved)


def _barrier(info: Distributed) -> None:
    if info.enabled:
        import torch.distributed as dist

        dist.barrier()


def epoch_batches(
    lengths: list[int], batch_tokens: int, seed: int, epoch: int, world_size: int = 1,
    rank: int = 0,
) -> list[list[int]]:
    """This rank's batches (lists of window indices) for one epoch.

    A function of ``(seed, epoch)`` only, so a resumed run sees the same order.
    """
    import numpy as np

    from prm.model import token_budget_batches

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


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: str) -> float:
    """Learning-rate multiplier at ``step``: linear warm-up, then cosine or linear decay to 0."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    progress = min(max(progress, 0.0), 1.0)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "linear":
        return 1.0 - progress
    raise ValueError(f"unknown schedule {schedule!r}; use cosine or linear")


def _optimizer(model: Any, config: TrainConfig, device: str) -> torch.optim.Optimizer:
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    # Matrices (and embeddings) decay; biases and norm gains do not, as in nanoGPT.
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.95), fused=device.startswith("cuda"))


def _flatten_optimizer(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    import torch

    tensors: dict[str, torch.Tensor] = {}
    other: dict[str, Any] = {"param_groups": state["param_groups"], "state": {}}
    for index, values in state["state"].items():
        for name, value in values.items():
            if torch.is_tensor(value):
                tensors[f"state.{index}.{name}"] = value.detach().contiguous().cpu()
            else:
                other["state"].setdefault(str(index), {})[name] = value
    return tensors, other


def _unflatten_optimizer(tensors: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    for index, values in other["state"].items():
        state.setdefault(int(index), {}).update(values)
    return {"state": state, "param_groups": other["param_groups"]}


def _rng_tensors(device: str) -> dict[str, Any]:
    import torch

    out = {"torch_cpu": torch.get_rng_state()}
    if device.startswith("cuda"):
        out["torch_cuda"] = torch.cuda.get_rng_state(torch.device(device))
    return out


def _restore_rng(tensors: dict[str, Any], device: str) -> None:
    import torch

    torch.set_rng_state(tensors["torch_cpu"])
    if "torch_cuda" in tensors and device.startswith("cuda"):
        torch.cuda.set_rng_state(tensors["torch_cuda"], torch.device(device))


@dataclass
class _Position:
    step: int = 0
    epoch: int = 0
    group: int = 0
    best_loss: float | None = None
    best_step: int | None = None


def save_checkpoint(
    directory: Path,
    info: Distributed,
    *,
    scorer: Any,
    tokenizer: Any,
    spec: PRMSpec,
    optimizer: Any,
    scheduler: Any,
    position: _Position,
    split: TaskSplit,
    keep: int,
) -> Path:
    """Write a resumable checkpoint ``checkpoints/step-NNNNNNNN`` (atomic rename by rank 0)."""
    from safetensors.torch import save_file

    final = directory / CHECKPOINT_DIR / f"step-{position.step:08d}"
    staging = final.with_name(final.name + ".tmp")
    if info.is_main:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    _barrier(info)
    save_file(_rng_tensors(info.device), str(staging / f"rng_rank{info.rank}.safetensors"))
    if info.is_main:
        from prm.model import save_scorer

        save_scorer(staging, scorer, tokenizer, spec)
        split.save(staging / SPLIT_FILE)
        tensors, other = _flatten_optimizer(optimizer.state_dict())
        save_file(tensors, str(staging / OPTIMIZER_FILE))
        (staging / TRAINER_STATE_FILE).write_text(
            json.dumps(
                {
                    "step": position.step,
                    "epoch": position.epoch,
                    "group": position.group,
                    "best_loss": position.best_loss,
                    "best_step": position.best_step,
                    "world_size": info.world_size,
                    "optimizer": other,
                    "scheduler": scheduler.state_dict(),
                },
                indent=1,
            )
        )
    _barrier(info)
    if info.is_main:
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        for old in sorted((directory / CHECKPOINT_DIR).glob("step-????????"))[:-keep or None]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    _barrier(info)
    return final


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint under ``directory/checkpoints``, if any."""
    found = sorted(Path(directory, CHECKPOINT_DIR).glob("step-????????"))
    return found[-1] if found else None


def _log(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def train(config: TrainConfig, *, echo: Any = print) -> TrainResult:
    """Train a PRM on the store's trajectories; write it to ``config.out``.

    Args:
        config: The options (see :class:`TrainConfig` and ``prm train --help``).
        echo: Where rank 0 prints progress lines.

    Returns:
        A summary of the run (also written to ``train_summary.json``).
    """
    from recovery.store import connect

    if config.store is None or config.out is None:
        raise ValueError("store and out are required")
    fractions = (1.0 - config.val_fraction - config.test_fraction, config.val_fraction,
                 config.test_fraction)
    con = connect(config.store, read_only=True)
    try:
        examples = load_step_examples(con, config.labels, base=config.label_base)
    finally:
        con.close()
    if config.runs:
        runs = set(config.runs)
        examples = [e for e in examples if e.run in runs]
    if not examples:
        raise ValueError(f"no trajectories to train on in {config.store}")
    if not any(target == target for e in examples for target in e.targets):
        hint = {
            "data": " (the store's turns carry no process labels)",
            "advantage": " (it needs Monte Carlo value labels in turns.label, e.g. from "
            "`recovery simulate --mc-rollouts N`)",
        }.get(config.labels, "")
        raise ValueError(
            f"no turn of {config.store} has a target from labels {config.labels!r}{hint}"
        )
    out = Path(config.out)
    resume_from = latest_checkpoint(out) if config.resume else None
    if resume_from is not None:
        split = TaskSplit.load(resume_from / SPLIT_FILE)
    else:
        split = TaskSplit.make(examples, seed=config.seed, fractions=fractions)
    if config.backbone == "sklearn":
        return train_baseline(config, examples, split)
    return _train_neural(config, examples, split, resume_from, echo)


def train_baseline(
    config: TrainConfig, examples: list[StepExample], split: TaskSplit
) -> TrainResult:
    """Fit :class:`prm.baseline.TfidfStepBaseline` on the train split and save it."""
    import joblib

    from prm.baseline import BASELINE_FILE, TfidfStepBaseline, turn_frame

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    frame = turn_frame(split.select(examples, "train"))
    baseline = TfidfStepBaseline().fit(frame, frame["target"].to_numpy())
    joblib.dump(baseline, out / BASELINE_FILE)
    PRMSpec(kind="sklearn", backbone="sklearn", labels=config.labels,
            label_base=config.label_base).save(out)
    split.save(out / SPLIT_FILE)
    result = TrainResult(
        out=out, kind="sklearn", wall_s=time.perf_counter() - started,
        n_train=len(split.select(examples, "train")),
        n_validation=len(split.select(examples, "validation")),
        n_test=len(split.select(examples, "test")),
    )
    (out / SUMMARY_FILE).write_text(json.dumps(result.to_dict(), indent=1))
    return result


def _validate(scorer: Any, windows: list[Any], pad_id: int, device: str, batch_tokens: int
              ) -> dict[str, float]:
    import numpy as np

    from prm.evaluate import expected_calibration_error, step_auroc
    from prm.model import score_windows

    if not windows:
        return {}
    scores = np.concatenate(score_windows(scorer, windows, pad_id, device=device,
                                          batch_tokens=batch_tokens))
    targets = np.array([x for w in windows for x in w.targets], dtype=float)
    known = ~np.isnan(targets)
    scores, targets = scores[known], targets[known]
    clipped = np.clip(scores, 1e-7, 1 - 1e-7)
    loss = -np.mean(targets * np.log(clipped) + (1 - targets) * np.log(1 - clipped))
    return {
        "val_loss": float(loss),
        "val_auroc": step_auroc(targets, scores),
        "val_ece": expected_calibration_error(targets, scores),
    }


def _shared_tokenizer(
    config: TrainConfig, train_examples: list[StepExample], info: Distributed, out: Path
) -> Any:
    """Train the tiny tokenizer on rank 0; other ranks load rank 0's, so all share one vocabulary."""
    from transformers import AutoTokenizer

    from prm.model import train_tokenizer

    staging = out / ".tokenizer"
    if info.is_main:
        texts = sorted({e.prompt for e in train_examples if e.prompt})
        texts += [s for e in train_examples for s in e.steps]
        tokenizer = train_tokenizer(texts, vocab_size=config.tiny.vocab_size,
                                    split_digits=config.tiny.split_digits)
        if info.enabled:
            tokenizer.save_pretrained(staging)
    _barrier(info)
    if not info.is_main:
        tokenizer = AutoTokenizer.from_pretrained(staging)
    _barrier(info)
    if info.is_main and info.enabled:
        shutil.rmtree(staging, ignore_errors=True)
    return tokenizer


def _train_neural(
    config: TrainConfig,
    examples: list[StepExample],
    split: TaskSplit,
    resume_from: Path | None,
    echo: Any,
) -> TrainResult:
    import torch
    from safetensors.torch import load_file
    from torch.nn.parallel import DistributedDataParallel
    from tqdm import tqdm

    from prm.model import (
        LoadedPRM,
        TokenIds,
        build_scorer,
        collate,
        encode_examples,
        load_backbone,
        load_scorer,
        step_loss,
        tiny_backbone,
    )

    if config.threads:
        torch.set_num_threads(config.threads)
    info = init_distributed(config.device)
    out = Path(config.out)
    if info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        if resume_from is None:
            (out / METRICS_FILE).unlink(missing_ok=True)  # a fresh run starts a fresh log
            if config.resume:
                echo(f"no checkpoint in {out / CHECKPOINT_DIR}: starting from scratch")
    _barrier(info)
    on_cuda = info.device.startswith("cuda")
    if on_cuda:  # TF32 matmuls for whatever autocast leaves in float32
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
    spec = PRMSpec(
        kind="neural", backbone=config.backbone, labels=config.labels,
        label_base=config.label_base, max_length=config.max_length,
        max_prompt_tokens=config.max_prompt_tokens, trust_remote_code=config.trust_remote_code,
        novelty=config.novelty, tiny=config.tiny,
    )
    train_examples = split.select(examples, "train")
    val_examples = split.select(examples, "validation")
    torch.manual_seed(config.seed)
    if resume_from is not None:
        loaded: LoadedPRM = load_scorer(resume_from, device="cpu")
        scorer, tokenizer = loaded.scorer.train(), loaded.tokenizer
    else:
        if config.backbone == "tiny":
            tokenizer = _shared_tokenizer(config, train_examples, info, out)
            backbone = tiny_backbone(config.tiny, len(tokenizer), config.max_length)
        else:
            backbone, tokenizer = load_backbone(
                config.backbone, trust_remote_code=config.trust_remote_code
            )
        scorer = build_scorer(backbone, tokenizer, novelty=config.novelty)
    if config.gradient_checkpointing:
        backbone = scorer.backbone
        kwargs = {"use_reentrant": False}
        if hasattr(backbone, "activation_checkpointing_enable"):  # transformers >= 5.x
            backbone.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    token_ids = TokenIds.of(tokenizer)
    train_windows = encode_examples(train_examples, tokenizer, config.max_length,
                                    config.max_prompt_tokens)
    val_windows = encode_examples(val_examples, tokenizer, config.max_length,
                                  config.max_prompt_tokens)
    lengths = [len(w) for w in train_windows]
    scorer = scorer.to(info.device).train()
    model = (
        DistributedDataParallel(scorer, device_ids=[info.local_rank] if on_cuda else None)
        if info.enabled else scorer
    )
    optimizer = _optimizer(scorer, config, info.device)
    # Bucket boundaries move with each epoch's shuffle, so each epoch counts its own batches.
    total_steps = sum(
        math.ceil(len(epoch_batches(lengths, config.batch_tokens, config.seed, epoch,
                                    info.world_size, info.rank)) / config.grad_accum)
        for epoch in range(config.epochs)
    )
    warmup_steps = int(config.warmup * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, total_steps, warmup_steps, config.schedule)
    )
    position = _Position()
    if resume_from is not None:
        state = json.loads((resume_from / TRAINER_STATE_FILE).read_text())
        if state["world_size"] != info.world_size:
            raise ValueError(
                f"checkpoint {resume_from} was written by {state['world_size']} processes; "
                f"resume with the same number (now {info.world_size})"
            )
        optimizer.load_state_dict(
            _unflatten_optimizer(load_file(str(resume_from / OPTIMIZER_FILE)), state["optimizer"])
        )
        scheduler.load_state_dict(state["scheduler"])
        position = _Position(state["step"], state["epoch"], state["group"],
                             state.get("best_loss"), state.get("best_step"))
        rng_file = resume_from / f"rng_rank{info.rank}.safetensors"
        if rng_file.exists():
            _restore_rng(load_file(str(rng_file)), info.device)
    metrics_path = out / METRICS_FILE
    result = TrainResult(
        out=out, kind="neural", steps=position.step, total_steps=total_steps,
        n_train=len(train_examples), n_validation=len(val_examples),
        n_test=len(split.select(examples, "test")),
    )
    if info.is_main:
        n_params = sum(p.numel() for p in scorer.parameters())
        echo(
            f"train {len(train_examples)} trajectories ({len(train_windows)} windows), "
            f"validation {len(val_examples)}; {n_params / 1e6:.2f}M parameters on {info.device}"
            f" x{info.world_size}; {total_steps} steps"
            + (f", resuming at step {position.step}" if resume_from else "")
        )
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=on_cuda)
    progress = tqdm(
        total=total_steps, initial=position.step, desc="prm train", unit="step",
        disable=not (info.is_main and config.progress), file=sys.stderr, dynamic_ncols=True,
    )
    # Loss sum, micro-batches, real tokens, padded tokens, scored turns; kept on the device so
    # that logging does not force a host sync on every micro-batch.
    counters = torch.zeros(5, dtype=torch.float64, device=info.device)
    started = time.perf_counter()
    stopped = False
    for epoch in range(position.epoch, config.epochs):
        batches = epoch_batches(lengths, config.batch_tokens, config.seed, epoch,
                                info.world_size, info.rank)
        groups = [batches[i : i + config.grad_accum]
                  for i in range(0, len(batches), config.grad_accum)]
        first_group = position.group if epoch == position.epoch else 0
        for group_index in range(first_group, len(groups)):
            group = groups[group_index]
            for j, batch_ids in enumerate(group):
                batch = collate([train_windows[i] for i in batch_ids], token_ids.pad)
                batch = batch.to(info.device)
                last = j == len(group) - 1
                # Gradients are all-reduced once per optimizer step, not per micro-batch.
                sync = contextlib.nullcontext() if last or not info.enabled else model.no_sync()
                with sync:
                    with autocast:
                        logits = model(batch.input_ids, batch.step_mask, batch.actions)
                    loss = step_loss(logits, batch.targets)
                    (loss / len(group)).backward()
                counters[0] += loss.detach().double()
                counters[1:4] += torch.tensor(
                    [1.0, batch.n_real_tokens, batch.n_tokens], dtype=torch.float64
                ).to(info.device)
                counters[4] += (~batch.targets.isnan()).sum()
            if config.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(scorer.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            position = dataclasses.replace(position, step=position.step + 1, epoch=epoch,
                                           group=group_index + 1)
            progress.update(1)
            at_end = position.step == total_steps
            if position.step % config.log_every == 0 or at_end:
                totals = counters.clone()
                if info.enabled:
                    import torch.distributed as dist

                    dist.all_reduce(totals)
                loss_sum, n_micro, real, padded, scored = totals.tolist()
                mean_loss = loss_sum / max(n_micro, 1.0)
                result.losses.append((position.step, mean_loss))
                result.real_tokens += int(real)
                result.padded_tokens += int(padded)
                result.scored_turns += int(scored)
                counters.zero_()
                elapsed = time.perf_counter() - started
                if info.is_main:
                    _log(metrics_path, {
                        "step": position.step, "epoch": epoch, "loss": mean_loss,
                        "lr": scheduler.get_last_lr()[0],
                        "real_tokens": result.real_tokens, "padded_tokens": result.padded_tokens,
                        "padding_fraction": result.padding_fraction,
                        "real_tokens_per_s": result.real_tokens / elapsed if elapsed else 0.0,
                        "elapsed_s": elapsed,
                    })
                    progress.set_postfix(loss=f"{mean_loss:.4f}")
            if config.save_every and position.step % config.save_every == 0 and not at_end:
                save_checkpoint(out, info, scorer=scorer, tokenizer=tokenizer, spec=spec,
                                optimizer=optimizer, scheduler=scheduler, position=position,
                                split=split, keep=config.keep_checkpoints)
            if config.stop_after is not None and position.step >= config.stop_after:
                stopped = not at_end
                break
        if stopped:
            break
        position = dataclasses.replace(position, epoch=epoch + 1, group=0)
        if info.is_main:
            result.validation = _validate(scorer, val_windows, token_ids.pad, info.device,
                                          config.batch_tokens)
            if result.validation:
                _log(metrics_path, {"step": position.step, "epoch": epoch, **result.validation})
                scorer.train()
                loss = result.validation["val_loss"]
                if config.keep_best and (position.best_loss is None or loss < position.best_loss):
                    from prm.model import save_scorer

                    save_scorer(out, scorer, tokenizer, spec)
                    split.save(out / SPLIT_FILE)
                    position = dataclasses.replace(position, best_loss=loss,
                                                   best_step=position.step)
        _barrier(info)
    progress.close()
    result.wall_s = time.perf_counter() - started
    result.steps = position.step
    result.finished = not stopped
    result.best_step = position.best_step
    if not stopped:
        if info.is_main:
            from prm.model import save_scorer

            if position.best_step is None:  # no validation: the last weights are the model
                save_scorer(out, scorer, tokenizer, spec)
                split.save(out / SPLIT_FILE)
            (out / SUMMARY_FILE).write_text(json.dumps(result.to_dict(), indent=1))
            echo(
                f"saved {out}: {result.steps} steps, {result.real_tokens_per_s:,.0f} real "
                f"tokens/s, padding {result.padding_fraction:.1%}"
                + (f"; model = step {position.best_step} (lowest validation loss "
                   f"{position.best_loss:.4f})" if position.best_step is not None else "")
            )
        _barrier(info)
    if info.enabled:
        import torch.distributed as dist

        dist.destroy_process_group()
    return result
