"""Running a policy on a batch of the reference task's episodes, all at once (one policy call
per turn index)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from analyses.budgetmix.reference.env import ACTIONS, ENDS, EVENTS, EnvParams, Rollouts
from analyses.budgetmix.reference.policy import FEATURES, masked_logits, state_features
from recovery.config import need

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EpisodeBatch:
    """The episodes :func:`run_episodes` runs, one entry each."""

    length: np.ndarray = need("``L`` per episode.")
    difficulty: np.ndarray = need("``d`` per episode.")
    budget: np.ndarray = need("Turn budget per episode.")


def run_episodes(
    policy: torch.nn.Module,
    env: EnvParams,
    batch: EpisodeBatch,
    rng: np.random.Generator,
    generator: torch.Generator,
) -> Rollouts:
    """Run every episode of ``batch`` at once (one policy call per turn index), the
    environment's draws from ``rng`` and the policy's actions from ``generator``.

    Long because it steps every episode at once with numpy arrays per turn index; the arrays
    made at its top are the loop's state.
    """
    length, difficulty, budget = batch.length, batch.difficulty, batch.budget
    import torch

    n = len(length)
    max_turns = int(budget.max()) if n else 0
    p_error = np.stack(env.error_rates(difficulty), axis=1)
    gain = np.array([env.fast_progress, 1])
    features = np.zeros((n, max_turns, len(FEATURES)), np.float32)
    in_spell_log = np.zeros((n, max_turns), bool)
    actions = np.zeros((n, max_turns), np.int64)
    events = np.zeros((n, max_turns), np.int8)
    before = np.zeros((n, max_turns), np.int16)
    after = np.zeros((n, max_turns), np.int16)
    mask = np.zeros((n, max_turns), bool)
    progress = np.zeros(n, np.int64)
    in_spell = np.zeros(n, bool)
    spell_age = np.zeros(n, np.int64)
    errors = np.zeros(n, np.int64)
    active = np.ones(n, bool)
    end = np.full(n, ENDS.index("budget"), np.int8)
    rows = np.arange(n)
    for t in range(max_turns):
        active &= t < budget
        if not active.any():
            break
        idx = rows[active]
        feats = state_features(length[idx] - progress[idx], budget[idx] - t, in_spell[idx],
                               spell_age[idx], errors[idx], np.full(len(idx), t))
        with torch.no_grad():
            logits = masked_logits(policy, torch.from_numpy(feats),
                                   torch.from_numpy(in_spell[idx]))
            choice = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
        act = choice[:, 0].numpy()
        u = rng.random(len(idx))
        spell = in_spell[idx]
        event = np.empty(len(idx), np.int8)
        new_progress = progress[idx].copy()
        # outside a spell: error, else progress
        out = ~spell
        err = out & (u < p_error[idx, np.minimum(act, 1)])
        event[err] = EVENTS.index("error")
        ok = out & ~err
        event[ok] = EVENTS.index("progress")
        new_progress[ok] += gain[act[ok]]
        # inside a spell: recover, fatal, or repeat
        retry = act == ACTIONS.index("retry")
        p_rec = np.where(retry, env.p_recover_retry, env.p_recover_repair)
        p_fat = np.where(retry, env.p_fatal_retry, env.p_fatal_repair)
        rec = spell & (u < p_rec)
        fat = spell & ~rec & (u < p_rec + p_fat)
        rep = spell & ~rec & ~fat
        event[rec] = EVENTS.index("recover")
        event[fat] = EVENTS.index("fatal")
        event[rep] = EVENTS.index("repeat")
        new_progress[rec & retry] += 1
        new_progress = np.minimum(new_progress, length[idx])
        features[idx, t] = feats
        in_spell_log[idx, t] = spell
        actions[idx, t] = act
        events[idx, t] = event
        before[idx, t] = progress[idx]
        after[idx, t] = new_progress
        mask[idx, t] = True
        progress[idx] = new_progress
        errors[idx] += err | rep | fat
        spell_age[idx] = np.where(err, 1, np.where(rep, spell_age[idx] + 1, 0))
        in_spell[idx] = err | rep
        won = new_progress >= length[idx]
        end[idx[won]] = ENDS.index("success")
        end[idx[fat]] = ENDS.index("fatal")
        active[idx[won | fat]] = False
    n_turns = mask.sum(axis=1)
    return Rollouts(
        length=length, difficulty=difficulty, budget=budget, features=features,
        in_spell=in_spell_log, actions=actions, events=events, progress_before=before,
        progress_after=after, mask=mask, n_turns=n_turns,
        success=end == ENDS.index("success"), end=end,
    )
