"""This process's place in a (possibly multi-process) run: ``torchrun`` sets it up.

Under ``torchrun`` (``WORLD_SIZE`` > 1) every process joins one process group (NCCL on CUDA,
gloo on CPU) and runs on its own device; rank 0 logs and writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from prm.neural.device import resolve_device


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


def init_distributed(device: str = "auto") -> Distributed:
    """Join the process group when launched by ``torchrun``; pick this process's device."""
    import torch
    import torch.distributed as dist

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    resolved = resolve_device(device, local_rank)
    if resolved.startswith("cuda"):
        torch.cuda.set_device(torch.device(resolved))
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if resolved.startswith("cuda") else "gloo")
    return Distributed(rank=rank, world_size=world_size, local_rank=local_rank, device=resolved)


def barrier(info: Distributed) -> None:
    """Wait for every process (nothing to do in a single-process run)."""
    if info.enabled:
        import torch.distributed as dist

        dist.barrier()
