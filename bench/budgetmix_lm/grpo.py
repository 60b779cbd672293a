"""GRPO settings a small policy survives, and a trainer that logs whether it moves.

Settings (:func:`grpo_args`): temperature 1.0 (the warm start's own spread; 0.7 made groups
tie), a constant learning rate (a linear decay shrank the late steps to nothing), a KL term
``beta`` > 0 (``beta = 0`` at a high rate collapsed the tiny policy in a few steps), gradient
clipping at norm 1. :func:`moving_trainer` adds: tokens generated after the episode ended (the
budget used up, or the task finished) are dropped from the loss, so they get no advantage; an
optimizer step whose groups are all tied (no reward variance: no policy gradient, only the KL
pull) is skipped and counted; each step logs the share of tied groups, the token entropy
(TRL's ``entropy``) and the well-formed-call rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def grpo_args(*, output_dir: Path, batch: int, generations: int, steps: int, max_turns: int,
              learning_rate: float, beta: float, seed: int, device: str, bf16: bool) -> Any:
    """TRL's ``GRPOConfig`` with the bench's settings (see the module)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(output_dir), per_device_train_batch_size=batch,
        num_generations=generations, max_steps=steps, max_completion_length=80 * (max_turns + 2),
        # two more calls than the budget: a malformed call costs no turn
        max_tool_calling_iterations=max_turns + 2, temperature=1.0,
        learning_rate=learning_rate, lr_scheduler_type="constant", beta=beta, max_grad_norm=1.0,
        logging_steps=1, report_to="none", use_cpu=device == "cpu", save_strategy="no",
        seed=seed, bf16=bf16, gradient_checkpointing=False, dataloader_num_workers=0,
        disable_tqdm=True)


def after_end_mask(tool_mask: np.ndarray, episodes: Sequence[Any]) -> tuple[np.ndarray, int]:
    """``tool_mask`` with every token after the tool answer that ended each episode set to 0.

    The tool answers are the runs of zeros; the ``ended_at``-th one closes the episode. A
    rollout whose count of answers differs from its count of calls (several calls in one
    message, or an answer dropped at the length cap) is left as it is and counted.

    Returns:
        The new mask and the number of rollouts left unmasked for that reason.
    """
    mask = np.array(tool_mask, copy=True)
    mismatched = 0
    for i, episode in enumerate(episodes):
        if episode.ended_at is None:
            continue
        row = mask[i]
        starts = np.flatnonzero((row[1:] == 0) & (row[:-1] == 1)) + 1
        if row.size and row[0] == 0:
            starts = np.concatenate([[0], starts])
        if len(starts) != len(episode.calls):
            mismatched += 1
            continue
        answer = starts[episode.ended_at - 1]  # the answer to the call that ended it
        ones = np.flatnonzero(row[answer:] == 1)
        if ones.size:
            row[answer + ones[0]:] = 0
    return mask, mismatched


def step_stats(episodes: Sequence[Any], group: int) -> dict[str, float]:
    """Share of tied groups, well-formed-call rate, turns and success of one generation batch.

    A call is well formed when it ran as a turn; malformed calls and episodes that stopped
    calling tools while the task was open and turns were left count against the rate.
    """
    outcomes = np.array([e.outcome if e.outcome is not None else np.nan for e in episodes])
    groups = outcomes[: len(outcomes) // group * group].reshape(-1, group)
    tied = float(np.mean([np.unique(g).size == 1 for g in groups])) if groups.size else 1.0
    turns = sum(e.n_turns for e in episodes)
    bad = sum(e.calls.count("malformed") + (e.ended_at is None) for e in episodes)
    return {"tied_groups": tied, "well_formed": turns / max(turns + bad, 1),
            "turns": turns / max(len(episodes), 1), "success": float(np.nanmean(outcomes))}


def moving_trainer(base: type) -> type:
    """A subclass of ``base`` (TRL's ``GRPOTrainer`` or a subclass) doing what the module says;
    its ``bench_log`` holds one dict per logged step, ``skipped_steps`` the steps skipped."""

    class MovingGRPOTrainer(base):  # type: ignore[misc, valid-type]
        """GRPO that drops post-end tokens, skips all-tied steps and logs the bench's stats."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.bench_log: list[dict[str, float]] = []
            self.skipped_steps = 0
            self._batch_stats: dict[str, float] = {}

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            import torch

            output = super()._generate_and_score_completions(inputs)
            episodes = [env.budgetmix_episode for env in self.environments]
            self._batch_stats = step_stats(episodes, self.num_generations)
            if output.get("tool_mask") is not None:
                mask, mismatched = after_end_mask(output["tool_mask"].cpu().numpy(), episodes)
                output["tool_mask"] = torch.as_tensor(mask, device=output["tool_mask"].device,
                                                      dtype=output["tool_mask"].dtype)
                self._batch_stats["unmasked_rollouts"] = float(mismatched)
            return output

        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            loss = super().training_step(model, inputs, num_items_in_batch)
            if self._batch_stats.get("tied_groups") == 1.0:
                # no reward variance anywhere: drop the gradient (Adam skips a parameter
                # without one, so its moments do not move the weights either)
                for parameter in model.parameters():
                    parameter.grad = None
                self.skipped_steps += 1
            return loss

        def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
            training = "loss" in logs
            if training:
                logs = {**logs, **self._batch_stats, "skipped_steps": float(self.skipped_steps)}
            super().log(logs, *args, **kwargs)
            if training and self.state.log_history:  # TRL adds entropy, KL, ... in its log
                self.bench_log.append(dict(self.state.log_history[-1]))

    return MovingGRPOTrainer
