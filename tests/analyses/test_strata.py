"""Task strata and their bootstrap weights."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyses.strata import strata_weights, task_strata

# ------------------------------------------------------------------------------------------
# Strata


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 4), st.integers(1, 4)),
             min_size=1, max_size=25, unique_by=lambda x: x[0]),
    st.integers(1, 8),
)
def test_task_strata_match_numpy_array_split(tasks, k):
    rows = []
    for task, n_ok, n in tasks:
        for i in range(n):
            rows.append({"task_id": f"x{task}", "success": i < min(n_ok, n)})
    traj = pd.DataFrame(rows)
    got = task_strata(traj, k, by="success")
    rates = traj.groupby("task_id")["success"].mean().reset_index()
    ordered = rates.sort_values(["success", "task_id"]).reset_index(drop=True)
    parts = np.array_split(ordered["task_id"].to_numpy(), k)
    expected = {tid: j for j, part in enumerate(parts) for tid in part}
    assert dict(zip(got["task_id"], got["stratum"], strict=True)) == expected
    assert list(got["task_id"]) == list(ordered["task_id"])


def test_task_strata_by_clean_turn_success_rate_by_hand():
    # key = successes / clean turns at risk of ending in success (the turns at risk of s):
    # a: 2 successes, 2 + 3 clean turns (one error each) -> 2/5; b: a success at its first
    # turn and a 4-turn failure with no budget -> 1/5; c: one success in 6 clean turns -> 1/6.
    traj = pd.DataFrame(
        {
            "traj_id": ["a1", "a2", "b1", "b2", "c1"],
            "task_id": ["a", "a", "b", "b", "c"],
            "success": [True, True, True, False, True],
            "n_turns": [3, 4, 1, 4, 6],
            "success_turn": [3, 4, 1, None, 6],
            "budget": [None] * 5,
        }
    )
    flags = pd.DataFrame(
        {"traj_id": ["a1", "a2"], "t": [1, 2], "is_error": [True, True]}
    )
    got = task_strata(traj, 3, flags)
    # clean turns at risk of ending in success: a 2 + 3, b 1 + 4, c 6
    assert dict(zip(got["task_id"], got["key"], strict=True)) == pytest.approx(
        {"a": 2 / 5, "b": 1 / 5, "c": 1 / 6}
    )
    assert list(got["task_id"]) == ["c", "b", "a"]
    assert list(got["stratum"]) == [0, 1, 2]
    with pytest.raises(ValueError, match="strata_by"):
        task_strata(traj, 2, flags, by="length")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=12), st.integers(1, 5))
def test_bootstrap_strata_weights_cut_the_copies_like_array_split(copies, k):
    weights = strata_weights(np.array([copies]), k)[0]
    expanded = np.repeat(np.arange(len(copies)), copies)
    expected = np.zeros((len(copies), k))
    for j, part in enumerate(np.array_split(expanded, k)):
        for task in part:
            expected[task, j] += 1
    np.testing.assert_array_equal(weights, expected)


