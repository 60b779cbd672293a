"""Task splits that cannot leak: each split draws from its own random stream, task ids carry
the split's name, and :func:`check_disjoint` refuses any evaluation task (its parameters and
environment seed) that occurs in another split."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

SPLITS = ("warmup", "train", "prm", "plan", "bank", "eval")
"""Warm-up conversations, GRPO training rows, PRM fitting, schedule planning (training-side
tasks: the adaptive schedule never sees an evaluation task), the bank of states the pilot
probes, and the held-out evaluation."""

PROMPT = "Call one tool per turn.\n"


def task_key(row: Mapping[str, Any]) -> tuple[int, float, int]:
    """What makes two tasks the same: length, difficulty and environment seed."""
    return int(row["task_length"]), float(row["difficulty"]), int(row["seed"])


def split_rows(seed: int, sizes: Mapping[str, int], length_min: int = 3,
               length_max: int = 6) -> dict[str, list[dict[str, Any]]]:
    """``sizes[name]`` tasks per split (TRL dataset rows), each split from its own stream.

    The streams are children of one ``SeedSequence`` (independent by construction); task ids
    are ``<split>-<i>``. The result is checked by :func:`check_disjoint`.

    Args:
        seed: The run's seed.
        sizes: Tasks per split; names from :data:`SPLITS`.
        length_min: Shortest task (units).
        length_max: Longest task.
    """
    unknown = sorted(set(sizes) - set(SPLITS))
    if unknown:
        raise ValueError(f"unknown split(s) {unknown}; known: {', '.join(SPLITS)}")
    streams = dict(zip(SPLITS, np.random.SeedSequence([int(seed), 37]).spawn(len(SPLITS)),
                       strict=True))
    out = {}
    for name, n in sizes.items():
        rng = np.random.default_rng(streams[name])
        out[name] = [{"prompt": [{"role": "user", "content": PROMPT}], "task_id": f"{name}-{i}",
                      "task_length": int(rng.integers(length_min, length_max + 1)),
                      "difficulty": round(float(rng.random()), 3),
                      "seed": int(rng.integers(1 << 30))} for i in range(int(n))]
    check_disjoint(out)
    return out


def check_disjoint(splits: Mapping[str, list[Mapping[str, Any]]], held_out: str = "eval") -> None:
    """Raise ``ValueError`` when a ``held_out`` task (id, or length + difficulty + seed) occurs
    in another split."""
    own = splits.get(held_out, [])
    keys = {task_key(r): r["task_id"] for r in own}
    ids = {r["task_id"] for r in own}
    for name, rows in splits.items():
        if name == held_out:
            continue
        for row in rows:
            if row["task_id"] in ids or task_key(row) in keys:
                raise ValueError(f"evaluation task {keys.get(task_key(row), row['task_id'])} "
                                 f"also occurs in split {name!r} (as {row['task_id']})")
