"""What BudgetMix needs from a process reward model: fit on trajectories, score their turns.

``analyses`` never imports the ``prm`` package: the reference trainer and the TRL adapter take
a :class:`StepScorer` object, and the command that joins the two (``recovery budgetmix
train-sim``, in ``agent_recovery_cli/recovery/budgetmix/train_sim.py``) builds one from ``prm`` and passes it in. Any
object with these methods works, e.g. a stub in a test or a scorer around your own PRM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from recovery.schema import Trajectory


@runtime_checkable
class TurnScorer(Protocol):
    """Scores turns: all the TRL environment wrapper needs from a PRM."""

    def score(self, trajectories: Sequence[Trajectory]) -> np.ndarray:
        """Score every turn: one probability that the step is right per turn, trajectory by
        trajectory, in turn order (flat)."""


@runtime_checkable
class StepScorer(TurnScorer, Protocol):
    """A PRM the reference trainer fits on its own rollouts and scores them with.

    Attributes:
        n_fits: Fits that produced a model so far; 0 means :meth:`score` cannot be called yet.
    """

    n_fits: int

    def fit(self, trajectories: Sequence[Trajectory]) -> None:
        """Fit (or refit) on the trajectories; keep the previous model when there is nothing
        to learn (e.g. every target is one class)."""

    def save(self, directory: Path) -> None:
        """Write the fitted model as a folder ``prm score --model`` reads."""


ScorerFactory = Callable[[], StepScorer]
"""Builds a fresh, unfitted scorer (one per training mode that needs a PRM)."""
