"""The one device resolver of the PRM commands (training, scoring, evaluation)."""

from __future__ import annotations

from recovery.errors import UsageProblem

DEVICES = ("auto", "cuda", "cpu")


def resolve_device(device: str = "auto", local_rank: int = 0) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ``cuda`` -> this process's GPU.

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        local_rank: This process's rank on its machine (``torchrun``'s ``LOCAL_RANK``).

    Returns:
        ``cpu`` or ``cuda:N``.

    Raises:
        UsageProblem: an unknown device, or CUDA asked for where there is none.
    """
    import torch

    if device not in DEVICES and not device.startswith("cuda:"):
        raise UsageProblem(f"unknown device {device!r}; use auto, cuda or cpu")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageProblem("--device cuda was asked for but CUDA is not available")
        return f"cuda:{local_rank}" if device == "cuda" else device
    return "cpu"
