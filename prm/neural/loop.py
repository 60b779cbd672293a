"""The training loop of the neural PRM (full fine-tuning or LoRA): a plain torch loop, as in
nanoGPT's ``train.py``: set-up (:mod:`prm.neural.setup`), one optimizer step over a group of
micro-batches (gradients accumulated, all-reduced once, clipped; bf16 autocast on CUDA), the
loss log, a checkpoint, the evaluation after each epoch and the saved model. Batches are
length-bucketed by a token budget (:func:`prm.data.windows.epoch_batches`); the padding
fraction is logged. Only rank 0 logs, shows progress and writes files.

Checkpoints (:mod:`prm.neural.checkpoints`) make a run resumable exactly: the data order is a
function of (seed, epoch), so a resumed run skips the batches it already took, and on the same
device and thread count the final weights equal those of an uninterrupted run.

After each epoch rank 0 measures the validation split (loss, AUROC, calibration); with
``keep_best`` the saved model is the epoch with the lowest validation loss, and its error
threshold (the ternary decision rule) is chosen on the same validation predictions.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data.labels import class_index
from prm.neural.checkpoints import save_checkpoint
from prm.neural.distributed import barrier
from prm.neural.setup import setup_run
from prm.spec import SPLIT_FILE, SUMMARY_FILE, PRMSpec

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from prm.config import TrainConfig, TrainResult
    from prm.data.examples import TaskSplit
    from prm.kinds.base import FitData
    from prm.neural.run import TrainingRun


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


def train_neural(config: TrainConfig, spec: PRMSpec, data: FitData, echo: Callable[[str], Any],
                 result: TrainResult) -> TrainResult:
    """Train a neural PRM (``full`` or ``lora``) and save it to ``config.out``.

    The parts, as in nanoGPT's ``train.py``: set-up (:func:`prm.neural.setup.setup_run`), one
    optimizer step (:func:`_train_step`), the loss log (:func:`_log_losses`), a checkpoint, the
    evaluation after each epoch (:func:`_evaluate`) and the saved model (:func:`_finish`).

    ``spec`` is the model's (backbone, head, windows); its step token and error threshold are
    filled in here. ``data`` holds the examples, the task split and a checkpoint to resume from;
    rank 0 prints progress lines through ``echo``; ``result`` is the summary to fill.
    """
    import torch
    from tqdm import tqdm

    run = setup_run(config, spec, data, echo)
    split = run.split
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
                save_checkpoint(run)
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


def _train_step(run: TrainingRun, group: list[list[int]], counters: torch.Tensor, autocast: Any
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


def _log_losses(run: TrainingRun, counters: torch.Tensor, result: TrainResult, epoch: int,
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


def _evaluate(run: TrainingRun, result: TrainResult, split: TaskSplit, epoch: int) -> None:
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


def _finish(run: TrainingRun, result: TrainResult, split: TaskSplit, echo: Callable[[str], Any]
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
            f"trained {result.steps} steps, {result.real_tokens_per_s:,.0f} real "
            f"tokens/s, padding {result.padding_fraction:.1%}"
            + (f"; model = step {position.best_step} (lowest validation loss "
               f"{position.best_loss:.4f})" if position.best_step is not None else "")
        )
    barrier(run.info)
