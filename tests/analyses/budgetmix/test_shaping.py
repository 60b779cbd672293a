"""The shaped reward's identities (hypothesis) and its arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyses.budgetmix.shaping import ShapingOptions, discounted_returns, shape_rewards

trajectory_lists = st.lists(
    st.tuples(
        st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12),  # PRM scores of its turns
        st.floats(-1.0, 2.0),  # outcome R
    ),
    min_size=1,
    max_size=6,
)


def _flatten(trajectories):
    scores = np.concatenate([np.asarray(s, dtype=float) for s, _ in trajectories])
    is_first = np.concatenate([np.arange(len(s)) == 0 for s, _ in trajectories])
    is_last = np.concatenate([np.arange(len(s)) == len(s) - 1 for s, _ in trajectories])
    outcome = np.concatenate([np.full(len(s), r) for s, r in trajectories])
    return scores, is_first, is_last, outcome


@settings(max_examples=200, deadline=None)
@given(trajectory_lists, st.floats(0.0, 3.0), st.floats(0.05, 1.0), st.floats(0.0, 1.0))
def test_shaped_return_differs_only_by_the_telescoped_potential(trajs, lam, gamma, phi0):
    scores, is_first, is_last, outcome = _flatten(trajs)
    shaped = shape_rewards(scores, is_first, is_last, outcome,
                           ShapingOptions(lam=lam, gamma=gamma, initial_potential=phi0))
    start = 0
    for s, r in trajs:
        n = len(s)
        rewards = shaped.total[start:start + n]
        discount = gamma ** np.arange(n)
        unshaped = gamma ** (n - 1) * r  # the outcome arrives at the last turn
        # sum_t gamma^(t-1) r_t = unshaped + lam * (gamma^n * phi_terminal - phi(s_1)), phi_terminal = 0
        assert float(np.dot(discount, rewards)) == pytest.approx(unshaped - lam * phi0, abs=1e-9)
        if gamma == 1.0:
            assert rewards.sum() == pytest.approx(r - lam * phi0, abs=1e-9)
        # the shaping is a potential difference: phi(s_t+1) of turn t is phi(s_t+1) of turn t+1
        before = shaped.potential_before[start:start + n]
        after = shaped.potential_after[start:start + n]
        assert before[0] == phi0
        assert np.array_equal(before[1:], after[:-1])
        assert after[-1] == 0.0
        assert np.array_equal(before[1:], np.asarray(s[:-1]))
        assert shaped.shaping[start:start + n] == pytest.approx(lam * (gamma * after - before))
        assert shaped.outcome[start:start + n].tolist() == [0.0] * (n - 1) + [r]
        start += n


@settings(max_examples=100, deadline=None)
@given(trajectory_lists, st.floats(0.0, 3.0))
def test_reward_to_go_with_gamma_one_is_outcome_minus_potential(trajs, lam):
    scores, is_first, is_last, outcome = _flatten(trajs)
    shaped = shape_rewards(scores, is_first, is_last, outcome,
                           ShapingOptions(lam=lam, initial_potential=0.5))
    width = max(len(s) for s, _ in trajs)
    mask = np.zeros((len(trajs), width), bool)
    rewards = np.zeros((len(trajs), width))
    start = 0
    for i, (s, _) in enumerate(trajs):
        mask[i, :len(s)] = True
        rewards[i, :len(s)] = shaped.total[start:start + len(s)]
        start += len(s)
    returns = discounted_returns(rewards, mask, 1.0)
    start = 0
    for i, (s, r) in enumerate(trajs):
        # G_t = R - lam * phi(s_t): the shaping acts as a state-dependent baseline
        expected = r - lam * shaped.potential_before[start:start + len(s)]
        assert returns[i, :len(s)] == pytest.approx(expected, abs=1e-9)
        assert (returns[i, len(s):] == 0).all()
        start += len(s)


def test_discounted_returns_by_hand():
    rewards = np.array([[1.0, 2.0, 4.0], [3.0, 0.0, 0.0]])
    mask = np.array([[True, True, True], [True, False, False]])
    returns = discounted_returns(rewards, mask, 0.5)
    assert returns.tolist() == [[1 + 0.5 * 2 + 0.25 * 4, 2 + 0.5 * 4, 4.0], [3.0, 0.0, 0.0]]


def test_shape_rewards_rejects_bad_layout():
    with pytest.raises(ValueError, match="one shape"):
        shape_rewards([0.1, 0.2], [True, False], [False, True], [1.0])
    with pytest.raises(ValueError, match="first turn"):
        shape_rewards([0.1, 0.2], [False, False], [False, True], [1.0, 1.0])


def test_initial_potential_per_trajectory():
    shaped = shape_rewards([0.3, 0.6, 0.9], [True, False, True], [False, True, True],
                           [1.0, 1.0, 0.0], ShapingOptions(initial_potential=[0.2, 0.2, 0.7]))
    assert shaped.potential_before.tolist() == [0.2, 0.3, 0.7]
