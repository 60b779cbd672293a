"""Resumable training checkpoints: ``checkpoints/step-NNNNNNNN/`` in a model folder.

A checkpoint holds the model (as a model folder: spec, config, tokenizer, ``model.safetensors``),
the optimizer tensors and each rank's RNG state in safetensors, and the step, data position,
scheduler and best validation loss in ``trainer_state.json``. It is written under a temporary
name and renamed into place only when complete. On resume the newest checkpoint whose files are
all intact is used; a damaged newer one is named and skipped (:func:`resume_checkpoint`), and
its optimizer, schedule and random state go back into the run (:func:`restore_checkpoint`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.neural.run import TrainPosition
from prm.spec import (
    CHECKPOINT_DIR,
    OPTIMIZER_FILE,
    SPLIT_FILE,
    TRAINER_STATE_FILE,
    WEIGHTS_FILE,
    PRMSpec,
    read_json,
)
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    from prm.neural.run import TrainingRun

STATE_KEYS = ("step", "epoch", "group", "world_size", "optimizer", "scheduler")


def flatten_optimizer(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An optimizer state dict as safetensors tensors plus a JSON-ready rest."""
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


def unflatten_optimizer(tensors: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`flatten_optimizer`."""
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    for index, values in other["state"].items():
        state.setdefault(int(index), {}).update(values)
    return {"state": state, "param_groups": other["param_groups"]}


def rng_tensors(device: str) -> dict[str, Any]:
    """This process's torch RNG states."""
    import torch

    out = {"torch_cpu": torch.get_rng_state()}
    if device.startswith("cuda"):
        out["torch_cuda"] = torch.cuda.get_rng_state(torch.device(device))
    return out


def restore_rng(tensors: dict[str, Any], device: str) -> None:
    """Set the RNG states saved by :func:`rng_tensors`."""
    import torch

    torch.set_rng_state(tensors["torch_cpu"])
    if "torch_cuda" in tensors and device.startswith("cuda"):
        torch.cuda.set_rng_state(tensors["torch_cuda"], torch.device(device))


def save_checkpoint(run: TrainingRun) -> Path:
    """Write a resumable checkpoint of ``run`` into ``checkpoints/step-NNNNNNNN`` of its folder
    (atomic rename by rank 0), keeping its ``keep_checkpoints`` newest."""
    from safetensors.torch import save_file

    from prm.neural.distributed import barrier
    from prm.neural.folder import save_scorer

    directory, info, position = run.out, run.info, run.position
    final = directory / CHECKPOINT_DIR / f"step-{position.step:08d}"
    staging = final.with_name(final.name + ".tmp")
    if info.is_main:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    barrier(info)
    save_file(rng_tensors(info.device), str(staging / f"rng_rank{info.rank}.safetensors"))
    if info.is_main:
        save_scorer(staging, run.scorer, run.tokenizer, run.spec)
        run.split.save(staging / SPLIT_FILE)
        tensors, other = flatten_optimizer(run.optimizer.state_dict())
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
                    "scheduler": run.scheduler.state_dict(),
                },
                indent=1,
            )
        )
    barrier(info)
    if info.is_main:
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
        keep = run.config.keep_checkpoints
        for old in sorted((directory / CHECKPOINT_DIR).glob("step-????????"))[:-keep or None]:
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    barrier(info)
    return final


def checkpoints(directory: str | Path) -> list[Path]:
    """The complete (renamed into place) checkpoints under ``directory/checkpoints``, oldest
    first."""
    return sorted(Path(directory, CHECKPOINT_DIR).glob("step-????????"))


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint under ``directory/checkpoints``, if any."""
    found = checkpoints(directory)
    return found[-1] if found else None


def read_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """``trainer_state.json`` of a checkpoint, checked.

    Raises:
        InputProblem: naming the file when it is missing, not JSON, or lacks a key.
    """
    path = checkpoint / TRAINER_STATE_FILE
    state = read_json(path)
    if not isinstance(state, dict):
        raise InputProblem(f"{path}: expected a JSON object")
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise InputProblem(f"{path}: missing {', '.join(missing)}")
    return state


def checkpoint_problem(checkpoint: Path) -> str | None:
    """What is wrong with a checkpoint's files (naming the file), or ``None`` when intact.

    Checks that the trainer state parses, the spec passes :func:`prm.spec.check_spec` (the
    check every loader runs), the split is there, and that every safetensors file has a whole
    header and covers its tensors (a truncated file does not).
    """
    from safetensors import SafetensorError, safe_open

    try:
        read_trainer_state(checkpoint)
        # The run's own flag decides remote code when the checkpoint is loaded; here only
        # the spec's fields are checked.
        PRMSpec.load(checkpoint, trust_remote_code=True)
        read_json(checkpoint / SPLIT_FILE)
    except (InputProblem, UsageProblem) as err:
        return str(err)
    for name in (WEIGHTS_FILE, OPTIMIZER_FILE):
        if not (checkpoint / name).is_file():
            return f"{checkpoint / name} is missing"
    for path in sorted(checkpoint.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt"):
                pass
        except (SafetensorError, OSError) as err:  # a truncated or garbled file
            return f"{path}: damaged or truncated ({err})"
    return None


def resume_checkpoint(directory: str | Path, echo: Callable[[str], Any] = print) -> Path | None:
    """The newest intact checkpoint to resume from; damaged newer ones are named and skipped.

    Returns:
        The checkpoint, or ``None`` when there is none at all.

    Raises:
        InputProblem: every checkpoint is damaged (the newest one's problem is named).
    """
    found = checkpoints(directory)
    problems: list[str] = []
    for checkpoint in reversed(found):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            if problems:
                echo(f"resuming from {checkpoint.name}, the newest intact checkpoint "
                     f"(skipped: {'; '.join(problems)})")
            return checkpoint
        problems.append(problem)
    if problems:
        raise InputProblem(
            f"no intact checkpoint to resume from in {Path(directory) / CHECKPOINT_DIR}: "
            f"{problems[0]}" + (f" (and {len(problems) - 1} older ones)" if len(problems) > 1
                                else "")
        )
    return None


def restore_checkpoint(run: TrainingRun, resume_from: Path) -> TrainPosition:
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
