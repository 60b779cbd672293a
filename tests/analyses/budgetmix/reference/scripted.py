"""A scripted policy for the reference task's tests: fixed action preferences."""

from __future__ import annotations

import numpy as np
import torch

from analyses.budgetmix.reference.rollout import EpisodeBatch, run_episodes


class Scripted(torch.nn.Module):
    """A policy with fixed action preferences (logits), whatever the state."""

    def __init__(self, logits: list[float]):
        super().__init__()
        self.logits = torch.tensor(logits)

    def forward(self, features):
        return self.logits.expand(features.shape[0], -1)


def run(logits, env, n=3000, length=5, budget=30, seed=0):
    return run_episodes(
        Scripted(logits), env, EpisodeBatch(np.full(n, length), np.full(n, 0.5), np.full(n, budget)),
        np.random.default_rng(seed), torch.Generator().manual_seed(seed),
    )
