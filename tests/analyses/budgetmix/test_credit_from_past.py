"""Per-turn credit reads the past only: a blind PRM's baseline phi(s_t) of turn t <= k does not
move when an episode's later turns change (other actions, more or fewer turns, another
outcome), and a hindsight PRM, whose earlier scores do move, is refused for credit.

The episodes go through the real TRL adapter (``budgeted_environment`` with the scorer), so the
scores compared are the ones the trainer's credit reads (``BudgetedEpisode.scores``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from analyses.budgetmix.adapters.trl import BudgetedEnvOptions, budgeted_environment
from analyses.budgetmix.adapters.trl_credit import (
    TurnCreditConfig,
    check_blind_scorer,
    future_reads,
    turn_advantages,
    turn_credit_trainer,
)
from recovery.errors import UsageProblem
from recovery.schema import Trajectory, Turn

OK = "Applied unit {} and verified it."
BAD = "Error: the batch conflicted with the account."
PROMPT = "Task: apply the units."
TOL = 1e-12  # the same up to floating-point summation order


class _Units:
    """A tool environment: ``apply`` works, ``batch`` fails; the row sets the outcome."""

    def reset(self, **row):
        self.win = float(row["win"])
        return PROMPT

    def apply(self, unit: int) -> str:
        """Apply one unit.

        Args:
            unit: The unit.
        """
        return OK.format(unit)

    def batch(self, units: str) -> str:
        """Apply several units at once.

        Args:
            units: A range such as 1-3.
        """
        return BAD

    def get_reward(self) -> float:
        return self.win


def _training_set(n: int = 60) -> list[Trajectory]:
    """Episodes whose failures end on a failed batch after a few clean turns (so a hindsight
    PRM learns from the turns left, and a blind one from the turns' texts)."""
    rng = np.random.default_rng(0)
    out = []
    for k in range(n):
        success = bool(k % 2)
        n_turns = int(rng.integers(2, 7))
        turns = [Turn(action=f'apply({{"unit": {t + 1}}})', observation=OK.format(t + 1))
                 for t in range(n_turns - 1)]
        last_ok = success or rng.random() < 0.2
        turns.append(Turn(action='apply({"unit": 9})' if last_ok else 'batch({"units": "1-3"})',
                          observation=OK.format(9) if last_ok else BAD))
        out.append(Trajectory(run="train", task_id=f"t{k // 2}", sample=k % 2, budget=8,
                              success=success, turns=turns, prompt=PROMPT))
    return out


@pytest.fixture(scope="module")
def scorers():
    from prm.online import StructuredStepScorer

    data = _training_set()
    return {"blind": StructuredStepScorer("outcome").fit(data),
            "hindsight": StructuredStepScorer("outcome", setting="hindsight").fit(data),
            "hindsight+outcome": StructuredStepScorer("outcome", setting="hindsight",
                                                      outcome_at_scoring=True).fit(data)}


BASES = [  # (calls, win): each call is (tool, argument)
    ([("apply", 1), ("apply", 2), ("apply", 3), ("apply", 4)], 1),
    ([("apply", 1), ("batch", "1-3"), ("apply", 2), ("apply", 3), ("batch", "2-4")], 0),
    ([("batch", "1-2"), ("apply", 1), ("apply", 2)], 1),
    ([("apply", 1), ("apply", 2), ("batch", "3-4"), ("batch", "3-4"), ("apply", 3),
      ("apply", 4)], 0),
]


def _variants(calls, win, k):
    """The episode with its turns after ``k`` changed: other actions, more turns, fewer turns,
    the other outcome, and all of these at once."""
    later = [("batch", "5-6") if tool == "apply" else ("apply", 7) for tool, _ in calls[k:]]
    return {"other actions": ([*calls[:k], *later], win),
            "more turns": ([*calls, ("apply", 8), ("batch", "8-9")], win),
            "fewer turns": (calls[:k], win),
            "other outcome": (calls, 1 - win),
            "all of these": ([*calls[:k], *later[:1]], 1 - win)}


def _episode(calls, win, scorer=None):
    """Run the calls through the TRL adapter's environment; the rewarded episode."""
    env = budgeted_environment(_Units, BudgetedEnvOptions(scorer=scorer))()
    env.reset(max_turns=len(calls) + 5, win=win)
    for tool, arg in calls:
        getattr(env, tool)(arg)
    env.get_reward()
    return env.budgetmix_episode


def _cases(max_k=3):
    """(base, k, variant name, variant) for every base episode and cutoff k."""
    return [((calls, win), k, name, variant) for calls, win in BASES
            for k in range(1, min(len(calls) - 1, max_k) + 1)
            for name, variant in _variants(calls, win, k).items()]


def _scores(scorer, episodes, with_outcome=False):
    """Each episode's scores as the adapter's scorer call gives them (one store for all; the
    adapter hands the trajectory without its outcome unless ``with_outcome``)."""
    trajectories = [e.trajectory() for e in episodes]
    if with_outcome:
        trajectories = [dataclasses.replace(t, success=bool(e.outcome))
                        for t, e in zip(trajectories, episodes, strict=True)]
    flat = scorer.score(trajectories)
    ends = np.cumsum([e.n_turns for e in episodes])
    return np.split(flat, ends[:-1])


def _phi(scores, config):
    """phi(s_t) of each turn: the value before it (initial potential, then the last score)."""
    return np.r_[config.initial_potential, scores[:-1]]


def _earlier_moves(scorer, cases, with_outcome=False):
    """Per case, the largest change of a turn <= k's score (variant against base)."""
    bases = _scores(scorer, [_episode(*base) for base, *_ in cases], with_outcome)
    others = _scores(scorer, [_episode(*variant) for *_, variant in cases], with_outcome)
    return [(name, float(np.max(np.abs(o[:k] - b[:k]))))
            for (_, k, name, _), b, o in zip(cases, bases, others, strict=True)]


def test_the_adapter_hands_the_credit_the_scorer_s_scores(scorers):
    for calls, win in BASES:
        episode = _episode(calls, win, scorers["blind"])
        assert episode.scores == pytest.approx(_scores(scorers["blind"], [episode])[0], abs=TOL)


def test_later_turns_leave_every_earlier_blind_baseline_unchanged(scorers):
    scorer, config = scorers["blind"], TurnCreditConfig(normalise="none")
    cases = _cases()
    bases = _scores(scorer, [_episode(*base) for base, *_ in cases])
    others = _scores(scorer, [_episode(*variant) for *_, variant in cases])
    for ((_, win), k, name, (calls, other_win)), b, o in zip(cases, bases, others, strict=True):
        where = f"{name}, k = {k}, {calls}"
        np.testing.assert_allclose(o[:k], b[:k], rtol=0, atol=TOL, err_msg=where)
        np.testing.assert_allclose(_phi(o, config)[:k], _phi(b, config)[:k], rtol=0,
                                   atol=TOL, err_msg=where)
        if other_win == win:  # same R: the credit A_t = R - phi(s_t) is the same too
            np.testing.assert_allclose(turn_advantages(o, other_win, config)[:k],
                                       turn_advantages(b, win, config)[:k],
                                       rtol=0, atol=TOL, err_msg=where)
    assert len(cases) >= 50
    # the blind scores are not constant: the comparison could have failed
    assert np.ptp(np.concatenate(bases)) > 0.05


def test_the_hindsight_scorer_fails_the_same_check(scorers):
    """The control: the same check on a hindsight PRM sees earlier scores move."""
    moves = _earlier_moves(scorers["hindsight"], _cases(max_k=1))
    # its features read the episode's length: more or fewer turns move earlier scores
    for kind in ("more turns", "fewer turns"):
        assert max(m for name, m in moves if name == kind) > 1e-3, kind
    # reading the outcome too, another outcome alone moves them
    moves = _earlier_moves(scorers["hindsight+outcome"], _cases(max_k=1), with_outcome=True)
    assert max(m for name, m in moves if name == "other outcome") > 1e-3
    # ... which the blind one, handed the outcome, ignores
    moves = _earlier_moves(scorers["blind"], _cases(max_k=1), with_outcome=True)
    assert max(m for _, m in moves) <= TOL


def test_blind_is_the_default_and_hindsight_is_refused_for_credit(scorers):
    from prm.online import StructuredStepScorer, TfidfStepScorer

    assert StructuredStepScorer().setting == "blind"
    assert future_reads(scorers["blind"]) is None and future_reads(TfidfStepScorer()) is None
    check_blind_scorer(scorers["blind"])
    for name in ("hindsight", "hindsight+outcome"):
        with pytest.raises(UsageProblem, match="blind PRM"):
            check_blind_scorer(scorers[name])
    with pytest.raises(UsageProblem, match="outcome"):
        check_blind_scorer(scorers["hindsight+outcome"])
    check_blind_scorer(StructuredStepScorer(outcome_at_scoring=True))  # blind never reads it
    with pytest.raises(UsageProblem, match="setting"):
        StructuredStepScorer(setting="future")


class _BaseTrainer:
    """Stands in for GRPOTrainer's constructor."""

    def __init__(self, *args, **kwargs):
        self.args = type("A", (), {"use_liger_kernel": False})()


def test_the_trainer_refuses_an_environment_scored_in_hindsight(scorers):
    trainer_cls = turn_credit_trainer(_BaseTrainer)
    hindsight_env = budgeted_environment(_Units, BudgetedEnvOptions(scorer=scorers["hindsight"]))
    with pytest.raises(UsageProblem, match="hindsight"):
        trainer_cls(environment_factory=hindsight_env, turn_credit=TurnCreditConfig())
    blind_env = budgeted_environment(_Units, BudgetedEnvOptions(scorer=scorers["blind"]))
    assert trainer_cls(environment_factory=blind_env).turn_credit.mode == "prm"
    # step groups read no PRM: the environment's scorer is not what their baseline is
    step = TurnCreditConfig(mode="step-groups")
    assert trainer_cls(environment_factory=hindsight_env, turn_credit=step).turn_credit is step


def _group_features(episodes, setting):
    """Features of one GRPO group (the episodes as samples of one task, outcomes known),
    sibling features included, indexed by (sample, t); and the feature names."""
    from prm.data.features import load_turn_frame, step_features
    from recovery.store import open_store
    from recovery.store.digest import make_traj_id

    trajectories = [dataclasses.replace(e.trajectory(run="r"), task_id="t0", sample=i,
                                        success=bool(e.outcome))
                    for i, e in enumerate(episodes)]
    sample = {make_traj_id(t.run, t.task_id, t.budget, t.sample): t.sample
              for t in trajectories}
    with open_store(None) as store:
        store.ingest_trajectories(trajectories, source="train-sim")
        frame = load_turn_frame(store.con)
    features = step_features(frame, setting)
    table = features.table.assign(sample=features.table["traj_id"].map(sample))
    return table.set_index(["sample", "t"]).sort_index(), features.names


def _largest_change(a, b, rows, names):
    return float(np.nanmax(np.abs(a.loc[rows, names].to_numpy() - b.loc[rows, names].to_numpy())))


def test_blind_sibling_features_read_siblings_finished_turns_never_own_later_ones():
    """A group sampled then scored (as GRPO has): a turn's blind features may read its
    siblings' finished episodes, never its own later turns, length or outcome."""
    group = [_episode(calls, win) for calls, win in BASES]
    base, names = _group_features(group, "blind")
    base_h, names_h = _group_features(group, "hindsight")
    sibling_moved, hindsight_moved = 0.0, 0.0
    for k in (1, 2):
        own = (1, slice(1, k))  # sample 1's turns 1..k
        for calls, win in _variants(*BASES[1], k).values():
            changed = [group[0], _episode(calls, win), *group[2:]]
            other, _ = _group_features(changed, "blind")
            assert _largest_change(other, base, own, names) <= TOL
            assert other.loc[own, ["action", "observation"]].equals(
                base.loc[own, ["action", "observation"]])
            sibling_moved = max(sibling_moved, _largest_change(other, base, 0, names))
            other_h, _ = _group_features(changed, "hindsight")
            hindsight_moved = max(hindsight_moved,
                                  _largest_change(other_h, base_h, own, names_h))
    assert any(n.startswith("sib_") for n in names)
    assert sibling_moved > 0  # a sibling's features do read this episode's finished turns
    assert hindsight_moved > 0  # the control: hindsight features of earlier turns move


def test_zero_tied_silences_a_group_whose_credit_is_the_baseline_alone():
    """A tied group's advantage R - phi(s_t) is the baseline alone; normalised, it looks like a
    signal. zero_tied gives such a group 0 (as GRPO does) and leaves the others as they were."""
    from analyses.budgetmix.adapters.trl import BudgetedEpisode
    from analyses.budgetmix.adapters.trl_credit import episode_advantages

    def episode(scores, outcome):
        n = len(scores)
        return BudgetedEpisode(max_turns=4, actions=["a"] * n, observations=["o"] * n,
                               outcome=outcome, scores=list(scores))

    tied = [episode([0.9, 0.8], 1.0), episode([0.1, 0.2], 1.0)]
    varied = [episode([0.9, 0.8], 1.0), episode([0.1, 0.2], 0.0)]
    plain = episode_advantages(tied + varied, TurnCreditConfig(), 2)
    assert np.abs(np.concatenate(plain[:2])).max() > 0.5  # noise at the scale of a signal
    zeroed = episode_advantages(tied + varied, TurnCreditConfig(zero_tied=True), 2)
    assert all((a == 0).all() for a in zeroed[:2])
    for a, b in zip(zeroed[2:], plain[2:], strict=True):
        np.testing.assert_array_equal(a, b)
