"""The reference trainer's policy: a small torch MLP over the state, which includes the turns
left, so the policy sees its budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from analyses.budgetmix.reference.env import ACTIONS

if TYPE_CHECKING:
    import torch

FEATURES = ("units_left", "turns_left", "in_spell", "spell_age", "error_rate")
"""The policy's state features, in order (units and turns scaled by :data:`SCALE`)."""

SCALE = 32.0
"""Units and turns are divided by this in the features."""


def state_features(
    units_left: np.ndarray,
    turns_left: np.ndarray,
    in_spell: np.ndarray,
    spell_age: np.ndarray,
    errors: np.ndarray,
    turns_taken: np.ndarray,
) -> np.ndarray:
    """The policy's input (:data:`FEATURES`), ``(N, 5)`` float32."""
    return np.stack(
        [
            units_left / SCALE,
            turns_left / SCALE,
            in_spell.astype(float),
            np.minimum(spell_age, 4) / 4.0,
            errors / np.maximum(turns_taken, 1),
        ],
        axis=1,
    ).astype(np.float32)


def build_policy(hidden: int = 64) -> torch.nn.Module:
    """The policy network: an MLP from :data:`FEATURES` to one logit per action."""
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(len(FEATURES), hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.Tanh(),
        torch.nn.Linear(hidden, len(ACTIONS)),
    )


def masked_logits(policy: torch.nn.Module, features: torch.Tensor, in_spell: torch.Tensor
                  ) -> torch.Tensor:
    """Logits with the actions not allowed in the state set to ``-inf``.

    ``fast``/``safe`` are allowed outside a spell, ``retry``/``repair`` inside.
    """
    import torch

    logits = policy(features)
    spell_action = torch.tensor([False, False, True, True])
    allowed = spell_action[None, :] == in_spell[..., None]
    return logits.masked_fill(~allowed, float("-inf"))
