"""What one neural training run holds (:class:`TrainingRun`) and where it is
(:class:`TrainPosition`): made by :mod:`prm.neural.setup`, stepped by :mod:`prm.neural.loop`,
saved and restored by :mod:`prm.neural.checkpoints`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.spec import METRICS_FILE

if TYPE_CHECKING:
    from prm.config import TrainConfig
    from prm.data.examples import TaskSplit
    from prm.neural.distributed import Distributed
    from prm.spec import PRMSpec


@dataclass
class TrainPosition:
    """Where a run is: optimizer steps taken, the epoch and the batch group to start at next,
    and the best validation loss so far with its step."""

    step: int = 0
    epoch: int = 0
    group: int = 0
    best_loss: float | None = None
    best_step: int | None = None


@dataclass
class TrainingRun:
    """What one training run holds, made by :func:`prm.neural.setup.setup_run` and used by
    the loop's parts and the checkpoints.

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
        split: The task split (saved with the model and every checkpoint).
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
    split: TaskSplit

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
