"""The training loop of the neural PRM (full fine-tuning or LoRA): a plain torch loop.

AdamW (weight decay on matrices only), linear warm-up then cosine or linear decay, gradient
accumulation, gradient clipping, bf16 autocast and TF32 on CUDA, optional gradient
checkpointing. Batches are length-bucketed by a token budget (:func:`prm.data.windows.epoch_batches`);
the padding fraction is logged.

Under ``torchrun`` (``WORLD_SIZE`` > 1) the model is wrapped in DistributedDataParallel (NCCL on
CUDA, gloo on CPU); every process builds the same epoch batches and takes every
``world_size``-th one. Only rank 0 logs, shows progress and writes files.

Checkpoints (:mod:`prm.neural.checkpoints`) make a run resumable exactly: the data order is a function
of (seed, epoch), so a resumed run skips the batches it already took, and on the same device and
thread count the final weights equal those of an uninterrupted run.

After each epoch rank 0 measures the validation split (loss, AUROC, calibration); with
``keep_best`` the saved model is the epoch with the lowest validation loss, and its error
threshold (the ternary decision rule) is chosen on the same validation predictions.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data.labels import class_index
from prm.neural.checkpoints import (
    TrainPosition,
    read_trainer_state,
    restore_rng,
    save_checkpoint,
    unflatten_optimizer,
)
from prm.neural.distributed import Distributed, barrier, init_distributed
from prm.spec import METRICS_FILE, OPTIMIZER_FILE, SPLIT_FILE, SUMMARY_FILE, PRMSpec
from recovery.errors import InputProblem

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from prm.config import TrainConfig, TrainResult
    from prm.data.examples import StepExample, TaskSplit


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


def validate(scorer: Any, windows: list[Any], pad_id: int, device: str, batch_tokens: int
             ) -> tuple[dict[str, float], pd.DataFrame]:
    """Validation loss (of the training objective), AUROC and ECE, and the prediction frame."""
    import numpy as np

    from prm.evaluation.metrics import expected_calibration_error, step_auroc
    from prm.neural.model import score_windows, step_frame

    if not windows:
        return {}, step_frame([], [])
    probs = score_windows(scorer, windows, pad_id, device=device, batch_tokens=batch_tokens)
    frame = step_frame(windows, probs)
    known = frame["target"].notna().to_numpy()
    stacked = np.concatenate(probs)[known]
    targets = frame["target"].to_numpy()[known]
    if stacked.ndim == 2:
        classes = class_index(targets)
        loss = -np.mean(np.log(np.clip(stacked[np.arange(len(classes)), classes], 1e-7, 1)))
    else:
        clipped = np.clip(stacked, 1e-7, 1 - 1e-7)
        loss = -np.mean(targets * np.log(clipped) + (1 - targets) * np.log(1 - clipped))
    scores = frame["score"].to_numpy()[known]
    return {
        "val_loss": float(loss),
        "val_auroc": step_auroc(targets, scores),
        "val_ece": expected_calibration_error((targets >= 0.5).astype(float), scores)
        if stacked.ndim == 2 else expected_calibration_error(targets, scores),
    }, frame


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


def plain_scorer(scorer: Any) -> Any:
    """The scorer to save: for LoRA a copy with the adapters merged into the weights."""
    from peft import PeftModel

    if not isinstance(scorer.backbone, PeftModel):
        return scorer
    merged = copy.deepcopy(scorer)
    merged.backbone = merged.backbone.merge_and_unload()
    return merged


def _log(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")


def _save_model(out: Path, scorer: Any, tokenizer: Any, spec: PRMSpec, split: TaskSplit,
                val_frame: pd.DataFrame | None) -> PRMSpec:
    from prm.evaluation.decisions import choose_error_threshold
    from prm.neural.folder import save_scorer

    if val_frame is not None and len(val_frame):
        spec = dataclasses.replace(spec, error_threshold=choose_error_threshold(val_frame))
    save_scorer(out, plain_scorer(scorer), tokenizer, spec)
    split.save(out / SPLIT_FILE)
    return spec


@dataclasses.dataclass
class _Run:
    """What one training run holds, made by :func:`_setup` and used by the loop's parts.

    Attributes:
        config: The options.
        info: This process's place among the processes.
        out: The output folder.
        scorer: The model being trained (unwrapped).
        model: ``scorer``, in DistributedDataParallel when several processes train.
        tokenizer: The tokenizer.
        spec: The model's spec; its error threshold is set each time the model is saved.
        pad_id: The padding token.
        train_windows: The encoded training windows.
        val_windows: The encoded validation windows.
        optimizer: AdamW.
        scheduler: The learning-rate schedule.
        total_steps: Optimizer steps of the whole run.
        position: Where the run is (step, epoch, batch group, best validation loss).
    """

    config: TrainConfig
    info: Distributed
    out: Path
    scorer: Any
    model: Any
    tokenizer: Any
    spec: PRMSpec
    pad_id: int
    train_windows: list[Any]
    val_windows: list[Any]
    optimizer: Any
    scheduler: Any
    total_steps: int
    position: TrainPosition

    @property
    def metrics_path(self) -> Path:
        """The JSON-lines log of losses and validation numbers."""
        return self.out / METRICS_FILE

    def epoch_groups(self, epoch: int) -> list[list[list[int]]]:
        """This process's batches of ``epoch``, ``grad_accum`` to an optimizer step."""
        from prm.data.windows import epoch_batches

        config, info = self.config, self.info
        batches = epoch_batches([len(w) for w in self.train_windows], config.batch_tokens,
                                config.seed, epoch, info.world_size, info.rank)
        return [batches[i : i + config.grad_accum]
                for i in range(0, len(batches), config.grad_accum)]


def train_neural(
    config: TrainConfig,
    spec: PRMSpec,
    examples: list[StepExample],
    split: TaskSplit,
    resume_from: Path | None,
    echo: Callable[[str], Any],
    result: TrainResult,
) -> TrainResult:
    """Train a neural PRM (``full`` or ``lora``) and save it to ``config.out``.

    The parts, as in nanoGPT's ``train.py``: set-up (:func:`_setup`), one optimizer step
    (:func:`_train_step`), the loss log (:func:`_log_losses`), a checkpoint, the evaluation
    after each epoch (:func:`_evaluate`) and the saved model (:func:`_finish`).

    Args:
        config: The options.
        spec: The model's spec (backbone, head, windows); its step token and error threshold
            are filled in here.
        examples: Every example; ``split`` says which train and validate.
        split: The task split.
        resume_from: A checkpoint to continue from.
        echo: Where rank 0 prints progress lines.
        result: The summary to fill.
    """
    import torch
    from tqdm import tqdm

    run = _setup(config, spec, examples, split, resume_from, echo)
    info = run.info
    result.steps, result.total_steps = run.position.step, run.total_steps
    autocast = torch.autocast("cuda", dtype=torch.bfloat16,
                              enabled=info.device.startswith("cuda"))
    progress = tqdm(
        total=run.total_steps, initial=run.position.step, desc="prm train", unit="step",
        disable=not (info.is_main and config.progress), file=sys.stderr, dynamic_ncols=True,
    )
    # Loss sum, micro-batches, real tokens, padded tokens, scored turns; kept on the device so
    # that logging does not force a host sync on every micro-batch.
    counters = torch.zeros(5, dtype=torch.float64, device=info.device)
    started = time.perf_counter()
    stopped = False
    for epoch in range(run.position.epoch, config.epochs):
        groups = run.epoch_groups(epoch)
        first_group = run.position.group if epoch == run.position.epoch else 0
        for group_index in range(first_group, len(groups)):
            _train_step(run, groups[group_index], counters, autocast)
            run.position = dataclasses.replace(run.position, step=run.position.step + 1,
                                               epoch=epoch, group=group_index + 1)
            progress.update(1)
            at_end = run.position.step == run.total_steps
            if run.position.step % config.log_every == 0 or at_end:
                _log_losses(run, counters, result, epoch, time.perf_counter() - started,
                            progress)
            if config.save_every and run.position.step % config.save_every == 0 and not at_end:
                save_checkpoint(run.out, info, scorer=run.scorer, tokenizer=run.tokenizer,
                                spec=run.spec, optimizer=run.optimizer, scheduler=run.scheduler,
                                position=run.position, split=split, keep=config.keep_checkpoints)
            if config.stop_after is not None and run.position.step >= config.stop_after:
                stopped = not at_end
                break
        if stopped:
            break
        run.position = dataclasses.replace(run.position, epoch=epoch + 1, group=0)
        if info.is_main:
            _evaluate(run, result, split, epoch)
        barrier(info)
    progress.close()
    result.wall_s = time.perf_counter() - started
    result.steps = run.position.step
    result.finished = not stopped
    result.best_step = run.position.best_step
    if not stopped:
        _finish(run, result, split, echo)
    if info.enabled:
        import torch.distributed as dist

        dist.destroy_process_group()
    return result


def _setup(
    config: TrainConfig, spec: PRMSpec, examples: list[StepExample], split: TaskSplit,
    resume_from: Path | None, echo: Callable[[str], Any],
) -> _Run:
    """The processes (threads, distributed set-up), the output folder, the model (built, or
    loaded to resume), the encoded windows, the optimizer and schedule, and the position to
    start from; rank 0 says what it will train."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from prm.config import learning_rate
    from prm.data.tokenize import TokenIds
    from prm.data.windows import encode_examples

    if config.threads:
        torch.set_num_threads(config.threads)
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
    scorer, tokenizer, spec = _scorer(config, spec, train_examples, info, out, resume_from,
                                      echo)

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
    run = _Run(config=config, info=info, out=out, scorer=scorer, model=model,
               tokenizer=tokenizer, spec=spec, pad_id=TokenIds.of(tokenizer, spec.step_token).pad,
               train_windows=train_windows, val_windows=val_windows, optimizer=optimizer,
               scheduler=None, total_steps=0, position=TrainPosition())
    # Bucket boundaries move with each epoch's shuffle, so each epoch counts its own batches.
    run.total_steps = sum(len(run.epoch_groups(epoch)) for epoch in range(config.epochs))
    warmup_steps = int(config.warmup * run.total_steps)
    run.scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, run.total_steps, warmup_steps, config.schedule)
    )
    if resume_from is not None:
        run.position = _resume(resume_from, run)
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
    out: Path, resume_from: Path | None, echo: Callable[[str], Any],
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
            tokenizer = shared_tokenizer(config, train_examples, info, out)
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


def _resume(resume_from: Path, run: _Run) -> TrainPosition:
    """Load the checkpoint's optimizer, schedule and random state into ``run``; its position."""
    from prm.neural.folder import load_weights

    info = run.info
    state = read_trainer_state(resume_from)
    if state["world_size"] != info.world_size:
        raise InputProblem(
            f"checkpoint {resume_from} was written by {state['world_size']} processes; "
            f"resume with the same number (now {info.world_size})"
        )
    run.optimizer.load_state_dict(
        unflatten_optimizer(load_weights(resume_from / OPTIMIZER_FILE), state["optimizer"])
    )
    run.scheduler.load_state_dict(state["scheduler"])
    rng_file = resume_from / f"rng_rank{info.rank}.safetensors"
    if rng_file.exists():
        restore_rng(load_weights(rng_file), info.device)
    return TrainPosition(state["step"], state["epoch"], state["group"],
                         state.get("best_loss"), state.get("best_step"))


def _train_step(run: _Run, group: list[list[int]], counters: torch.Tensor, autocast: Any
                ) -> None:
    """One optimizer step over a group of micro-batches (gradients accumulated, all-reduced
    once, clipped); ``counters`` take each micro-batch's loss, tokens and scored turns."""
    import torch

    from prm.data.windows import collate
    from prm.neural.model import step_loss

    info = run.info
    for j, batch_ids in enumerate(group):
        batch = collate([run.train_windows[i] for i in batch_ids], run.pad_id)
        batch = batch.to(info.device)
        last = j == len(group) - 1
        # Gradients are all-reduced once per optimizer step, not per micro-batch.
        sync = contextlib.nullcontext() if last or not info.enabled else run.model.no_sync()
        with sync:
            with autocast:
                logits = run.model(batch.input_ids, batch.step_mask, batch.actions,
                                   batch.turn_index)
            loss = step_loss(logits, batch.targets)
            (loss / len(group)).backward()
        counters[0] += loss.detach().double()
        counters[1:4] += torch.tensor(
            [1.0, batch.n_real_tokens, batch.n_tokens], dtype=torch.float64
        ).to(info.device)
        counters[4] += (~batch.targets.isnan()).sum()
    if run.config.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(
            [p for p in run.scorer.parameters() if p.requires_grad], run.config.max_grad_norm
        )
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)


def _log_losses(run: _Run, counters: torch.Tensor, result: TrainResult, epoch: int,
                elapsed: float, progress: Any) -> None:
    """The mean loss and the token counts since the last log (over every process) into
    ``result``; rank 0 writes them to the metrics log. ``counters`` start again from 0."""
    totals = counters.clone()
    if run.info.enabled:
        import torch.distributed as dist

        dist.all_reduce(totals)
    loss_sum, n_micro, real, padded, scored = totals.tolist()
    mean_loss = loss_sum / max(n_micro, 1.0)
    result.losses.append((run.position.step, mean_loss))
    result.real_tokens += int(real)
    result.padded_tokens += int(padded)
    result.scored_turns += int(scored)
    counters.zero_()
    if run.info.is_main:
        _log(run.metrics_path, {
            "step": run.position.step, "epoch": epoch, "loss": mean_loss,
            "lr": run.scheduler.get_last_lr()[0],
            "real_tokens": result.real_tokens, "padded_tokens": result.padded_tokens,
            "padding_fraction": result.padding_fraction,
            "real_tokens_per_s": result.real_tokens / elapsed if elapsed else 0.0,
            "elapsed_s": elapsed,
        })
        progress.set_postfix(loss=f"{mean_loss:.4f}")


def _evaluate(run: _Run, result: TrainResult, split: TaskSplit, epoch: int) -> None:
    """After an epoch (rank 0): the validation numbers, logged; with ``keep_best`` the model
    is saved when its validation loss is the lowest yet."""
    result.validation, val_frame = validate(run.scorer, run.val_windows, run.pad_id,
                                            run.info.device, run.config.batch_tokens)
    if not result.validation:
        return
    _log(run.metrics_path, {"step": run.position.step, "epoch": epoch, **result.validation})
    run.scorer.train()
    loss = result.validation["val_loss"]
    best = run.position.best_loss
    if run.config.keep_best and (best is None or loss < best):
        run.spec = _save_model(run.out, run.scorer, run.tokenizer, run.spec, split, val_frame)
        run.position = dataclasses.replace(run.position, best_loss=loss,
                                           best_step=run.position.step)


def _finish(run: _Run, result: TrainResult, split: TaskSplit, echo: Callable[[str], Any]
            ) -> None:
    """At the end of a whole run (rank 0): the model saved (the last weights when no
    validation chose an epoch), the summary written, and a line saying so."""
    position = run.position
    if run.info.is_main:
        if position.best_step is None:  # no validation: the last weights are the model
            _, val_frame = validate(run.scorer, run.val_windows, run.pad_id, run.info.device,
                                    run.config.batch_tokens)
            _save_model(run.out, run.scorer, run.tokenizer, run.spec, split, val_frame)
        (run.out / SUMMARY_FILE).write_text(json.dumps(result.to_dict(), indent=1))
        echo(
            f"saved {run.out}: {result.steps} steps, {result.real_tokens_per_s:,.0f} real "
            f"tokens/s, padding {result.padding_fraction:.1%}"
            + (f"; model = step {position.best_step} (lowest validation loss "
               f"{position.best_loss:.4f})" if position.best_step is not None else "")
        )
    barrier(run.info)
