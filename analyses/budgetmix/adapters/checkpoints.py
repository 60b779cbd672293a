"""Checkpoint rollouts during training, written for ``recovery analyze --series``.

Every ``every`` training steps the current policy is rolled out (on held-out tasks, at each
evaluation budget: whatever the rollout function does) and the trajectories are written as
canonical JSONL, one file per checkpoint, ``<out>/<prefix>-<step>.jsonl``: each trajectory's
run is ``<prefix>-<step>`` and its ``meta.step`` the training step, so either
``--series run`` or ``--series meta.step`` orders the checkpoints.

:class:`CheckpointWriter` needs no trainer; :func:`trl_checkpoint_callback` wraps it as a
``transformers.TrainerCallback`` (what TRL's trainers take in ``callbacks=``), imported only
when it is called.

Example:
    >>> writer = CheckpointWriter(lambda: rollouts(policy, tasks, budgets=[4, 8]),
    ...                           out_dir="ckpts", every=20, prefix="budgetmix")
    >>> trainer = GRPOTrainer(..., callbacks=[trl_checkpoint_callback(writer)])
    >>> # then: recovery analyze ckpts/*.jsonl --series run
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from recovery.schema import Trajectory

RolloutFn = Callable[[], Iterable["Trajectory"]]
"""Rolls the current policy out and returns its trajectories (any run name: it is replaced)."""


def checkpoint_run(prefix: str, step: int) -> str:
    """The run name of the checkpoint at ``step``: ``<prefix>-<step>`` (the step is the last
    number in it, which ``--series run`` reads).

    Raises:
        ValueError: for a negative step, or a prefix that is empty or holds a path separator.
    """
    if step < 0:
        raise ValueError(f"a training step is 0 or more, got {step}")
    if not prefix or re.search(r"[/\\\x00]", prefix):
        raise ValueError(f"checkpoint prefix {prefix!r}: give a plain name (no '/')")
    return f"{prefix}-{int(step)}"


def write_checkpoint(rollout: RolloutFn, step: int, out_dir: str | Path,
                     prefix: str = "ckpt") -> Path:
    """Roll the policy out and write its trajectories as ``<out_dir>/<prefix>-<step>.jsonl``,
    run ``<prefix>-<step>``, ``meta.step = step`` (other meta kept). Returns the file."""
    from recovery.schema import write_jsonl

    run = checkpoint_run(prefix, step)
    trajectories = [dataclasses.replace(traj, run=run, meta={**traj.meta, "step": int(step)})
                    for traj in rollout()]
    path = Path(out_dir) / f"{run}.jsonl"
    write_jsonl(trajectories, path)
    return path


@dataclass
class CheckpointWriter:
    """Writes a checkpoint (:func:`write_checkpoint`) at step 0 and every ``every`` steps.

    Attributes:
        rollout: Rolls the current policy out.
        out_dir: Folder of the checkpoint files.
        every: Steps between checkpoints (at least 1).
        prefix: Run names are ``<prefix>-<step>``.
        written: The files written so far, in order.
    """

    rollout: RolloutFn
    out_dir: str | Path
    every: int
    prefix: str = "ckpt"
    written: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"every: checkpoints every 1 or more steps, got {self.every}")
        checkpoint_run(self.prefix, 0)  # a bad prefix fails now, not at the first checkpoint

    def at_step(self, step: int) -> Path | None:
        """Write the checkpoint of ``step`` when it is due (a multiple of ``every``, and not
        written yet); the file, or ``None``."""
        if step % self.every or any(p.stem == checkpoint_run(self.prefix, step)
                                    for p in self.written):
            return None
        path = write_checkpoint(self.rollout, step, self.out_dir, self.prefix)
        self.written.append(path)
        return path


def trl_checkpoint_callback(writer: CheckpointWriter) -> Any:
    """A ``transformers.TrainerCallback`` that calls ``writer.at_step`` when training begins
    (step 0) and after each optimizer step (``state.global_step``)."""
    from transformers import TrainerCallback

    class CheckpointRollouts(TrainerCallback):  # type: ignore[misc]
        """Checkpoint rollouts for ``recovery analyze --series``."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            writer.at_step(int(state.global_step))

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            writer.at_step(int(state.global_step))

    return CheckpointRollouts()
