"""Setting up a neural PRM's training run: the processes, the model (built on its backbone,
with LoRA adapters in ``lora`` mode, or loaded to resume), the tiny tokenizer shared by every
process, the encoded windows, AdamW (weight decay on matrices only) and the learning-rate
schedule (linear warm-up, then cosine or linear decay).

Under ``torchrun`` (``WORLD_SIZE`` > 1) the model is wrapped in DistributedDataParallel (NCCL on
CUDA, gloo on CPU); TF32 matmuls on CUDA; optional gradient checkpointing.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.neural.checkpoints import restore_checkpoint
from prm.neural.distributed import Distributed, barrier, init_distributed
from prm.neural.run import TrainingRun, TrainPosition
from prm.spec import METRICS_FILE, PRMSpec

if TYPE_CHECKING:
    import torch

    from prm.config import TrainConfig
    from prm.data.examples import StepExample
    from prm.kinds.base import FitData


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


def make_optimizer(model: Any, lr: float, weight_decay: float, device: str) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters; matrices (and embeddings) decay, biases and norm
    gains do not, as in nanoGPT. Fused on CUDA."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=device.startswith("cuda"))


def shared_tokenizer(
    config: TrainConfig, train_examples: list[StepExample], info: Distributed, out: Path
) -> Any:
    """Train the tiny tokenizer on rank 0; other ranks load rank 0's, so all share one vocabulary."""
    from prm.data.tokenize import load_tokenizer, train_tokenizer

    staging = out / ".tokenizer"
    if info.is_main:
        texts = sorted({e.prompt for e in train_examples if e.prompt})
        texts += [s for e in train_examples for s in e.steps]
        tokenizer = train_tokenizer(texts, vocab_size=config.tiny.vocab_size,
                                    split_digits=config.tiny.split_digits)
        if info.enabled:
            tokenizer.save_pretrained(staging)
    barrier(info)
    if not info.is_main:
        tokenizer = load_tokenizer(staging)
    barrier(info)
    if info.is_main and info.enabled:
        shutil.rmtree(staging, ignore_errors=True)
    return tokenizer


def add_lora(scorer: Any, rank: int, alpha: float | None = None) -> Any:
    """Freeze the backbone and give every linear layer of it a LoRA adapter (``peft``).

    The head and the novelty embeddings stay fully trainable.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha or 2 * rank, lora_dropout=0.0,
                        target_modules="all-linear")
    scorer.backbone = get_peft_model(scorer.backbone, config)
    return scorer


def setup_run(config: TrainConfig, spec: PRMSpec, data: FitData, echo: Callable[[str], Any]
              ) -> TrainingRun:
    """The processes (threads, distributed set-up), the output folder, the model (built, or
    loaded to resume), the encoded windows, the optimizer and schedule, and the position to
    start from (``data``: the examples, the split, a checkpoint to resume from); rank 0 says
    what it will train."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from prm.config import learning_rate
    from prm.data.tokenize import TokenIds
    from prm.data.windows import encode_examples

    if config.threads:
        torch.set_num_threads(config.threads)
    examples, split, resume_from = data.examples, data.split, data.resume_from
    info = init_distributed(config.device)
    out = Path(config.out)
    if info.is_main:
        out.mkdir(parents=True, exist_ok=True)
        if resume_from is None:
            (out / METRICS_FILE).unlink(missing_ok=True)  # a fresh run starts a fresh log
            if config.resume:
                echo(f"no checkpoint in {out}: starting from scratch")
    barrier(info)
    on_cuda = info.device.startswith("cuda")
    if on_cuda:  # TF32 matmuls for whatever autocast leaves in float32
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
    train_examples = split.select(examples, "train")
    val_examples = split.select(examples, "validation")
    torch.manual_seed(config.seed)
    scorer, tokenizer, spec = _scorer(config, spec, train_examples, info, resume_from, echo)

    def encode(some: list[StepExample]) -> list[Any]:
        return encode_examples(some, tokenizer, spec.max_length, spec.max_prompt_tokens,
                               spec.step_token)

    train_windows, val_windows = encode(train_examples), encode(val_examples)
    scorer = scorer.to(info.device).train()
    model = (
        DistributedDataParallel(scorer, device_ids=[info.local_rank] if on_cuda else None)
        if info.enabled else scorer
    )
    optimizer = make_optimizer(scorer, learning_rate(config, spec.mode), config.weight_decay,
                               info.device)
    run = TrainingRun(
        config=config, info=info, out=out, scorer=scorer, model=model, tokenizer=tokenizer,
        spec=spec, pad_id=TokenIds.of(tokenizer, spec.step_token).pad,
        train_windows=train_windows, val_windows=val_windows, optimizer=optimizer,
        scheduler=None, total_steps=0, position=TrainPosition(), split=split)
    # Bucket boundaries move with each epoch's shuffle, so each epoch counts its own batches.
    run.total_steps = sum(len(run.epoch_groups(epoch)) for epoch in range(config.epochs))
    warmup_steps = int(config.warmup * run.total_steps)
    run.scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, run.total_steps, warmup_steps, config.schedule)
    )
    if resume_from is not None:
        run.position = restore_checkpoint(run, resume_from)
    if info.is_main:
        n_params = sum(p.numel() for p in scorer.parameters())
        n_trained = sum(p.numel() for p in scorer.parameters() if p.requires_grad)
        echo(
            f"train {len(train_examples)} trajectories ({len(train_windows)} windows), "
            f"validation {len(val_examples)}; {n_params / 1e6:.2f}M parameters"
            + (f" ({n_trained / 1e6:.2f}M trained, {spec.mode})" if n_trained < n_params else "")
            + f" on {info.device} x{info.world_size}; {run.total_steps} steps"
            + (f", resuming at step {run.position.step}" if resume_from else "")
        )
    return run


def _scorer(
    config: TrainConfig, spec: PRMSpec, train_examples: list[StepExample], info: Distributed,
    resume_from: Path | None, echo: Callable[[str], Any],
) -> tuple[Any, Any, PRMSpec]:
    """The scorer to train, its tokenizer and spec: loaded from ``resume_from``, else built
    on the backbone (with LoRA adapters in ``lora`` mode), its step token in the spec."""
    from prm.backbones import load_backbone, tiny_backbone
    from prm.neural.folder import load_scorer
    from prm.neural.model import build_scorer

    if resume_from is not None:
        loaded = load_scorer(resume_from, device="cpu",
                             trust_remote_code=config.trust_remote_code)
        scorer, tokenizer, spec = loaded.scorer.train(), loaded.tokenizer, loaded.spec
    else:
        if config.backbone == "tiny":
            tokenizer = shared_tokenizer(config, train_examples, info, Path(config.out))
            backbone = tiny_backbone(config.tiny, len(tokenizer), spec.max_length)
            step_token = spec.step_token
        else:
            backbone, tokenizer, step_token = load_backbone(
                config.backbone, trust_remote_code=config.trust_remote_code, echo=echo
            )
        spec = dataclasses.replace(spec, step_token=step_token)
        scorer = build_scorer(backbone, tokenizer, novelty=spec.novelty,
                              n_outputs=spec.n_outputs, pool=spec.pool)
        if spec.mode == "lora":
            scorer = add_lora(scorer, config.lora_rank)
    if config.gradient_checkpointing:
        backbone = scorer.backbone
        kwargs = {"use_reentrant": False}
        if hasattr(backbone, "activation_checkpointing_enable"):  # transformers >= 5.x
            backbone.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return scorer, tokenizer, spec
