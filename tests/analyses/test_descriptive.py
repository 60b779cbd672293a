"""Descriptive numbers, hazard curves, spells, matched states; tau-bench."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyses.decompose import FitOptions, model_fit
from analyses.descriptive import (
    descriptive,
    hazard_curves,
    latency_distribution,
    matched_state_errors,
    spell_stats,
)
from analyses.hazards import HAZARD_NAMES
from tests.analyses.helpers import frames, two_runs

# ------------------------------------------------------------------------------------------
# Descriptive numbers, hazard curves, spells


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.text("CE", min_size=1, max_size=8), st.booleans(), st.sampled_from("AB")),
        min_size=1, max_size=20,
    ),
    st.lists(st.one_of(st.none(), st.integers(1, 9)), min_size=1, max_size=4, unique=True),
)
def test_descriptive_identity_and_brute_force(specs, ts):
    traj, flags = frames(
        [(f"j{i}", p, ok, None, run) for i, (p, ok, run) in enumerate(specs)]
    )
    out = descriptive(traj, flags, ts)
    assert len(out) == len(ts) * len({run for _, _, run in specs})
    for row in out.itertuples():
        sub = [(p, ok) for p, ok, run in specs if run == row.run]
        limit = 99 if pd.isna(row.t) else row.t
        # a success's own success turn (its last) is never an error turn
        erred = [("E" in (p[:-1] if ok else p)[:limit]) for p, ok in sub]
        won = [ok and len(p) <= limit for p, ok in sub]
        assert row.n == len(sub)
        assert row.e == pytest.approx(np.mean(erred))
        assert row.success == pytest.approx(np.mean(won))
        # S = (1 - e) c + e r, with an empty condition contributing nothing
        c = 0.0 if np.isnan(row.c) else row.c
        r = 0.0 if np.isnan(row.r) else row.r
        assert (1 - row.e) * c + row.e * r == pytest.approx(row.success, abs=1e-12)


def test_hazard_curves_tidy_frame():
    traj, flags = two_runs(
        dict(h=0.1, s=0.1, f=0.0, rho=0.4, phi=0.05),
        dict(h=0.1, s=0.1, f=0.0, rho=0.4, phi=0.05),
        n_tasks=10, n_samples=20, budget=15, seed=0,
    )
    curves = hazard_curves(traj, flags, min_at_risk=30)
    assert set(curves["run"]) == {"A", "B"}
    assert set(curves["hazard"]) == set(HAZARD_NAMES)
    h0 = curves[(curves["run"] == "A") & (curves["hazard"] == "h") & (curves["x"] == 0)]
    assert int(h0["at_risk"].iloc[0]) == 200
    assert set(curves.loc[curves["hazard"] == "rho", "clock"]) == {"d"}
    by_stratum = hazard_curves(traj, flags, ["A"], strata=2)
    assert set(by_stratum["stratum"]) == {0, 1}


def test_spell_stats_and_latency_by_hand():
    traj, flags = frames(
        [
            ("a", "CEECE", False, None, "A"),   # spell 2-3 recovered (latency 2), 5 fatal
            ("b", "EC", True, None, "A"),       # spell 1 recovered at 2 (latency 1)
            ("c", "CCE", True, None, "A"),      # a mark on the success turn: no spell
            ("d", "CC", False, None, "B"),
        ]
    )
    stats = spell_stats(traj, flags).set_index("run")
    assert stats.loc["A", "n_spells"] == 3
    assert stats.loc["A", "n_recovered"] == 2
    assert stats.loc["A", "n_fatal"] == 1
    assert stats.loc["A", "fatal_rate"] == pytest.approx(1 / 3)
    assert stats.loc["A", "mean_latency"] == pytest.approx(1.5)
    assert stats.loc["B", "n_spells"] == 0 and np.isnan(stats.loc["B", "fatal_rate"])
    lat = latency_distribution(traj, flags)
    assert lat[["latency", "n"]].values.tolist() == [[1, 1], [2, 1]]
    assert lat["share"].tolist() == [0.5, 0.5]


def test_matched_state_errors_by_hand():
    traj, flags = frames(
        [
            ("a1", "EC", False, None, "A"),
            ("a2", "CC", False, None, "A"),
            ("b1", "CC", False, None, "B"),
            ("b2", "CE", False, None, "B"),
            ("c1", "C", False, None, "C"),
        ]
    )
    # state before each turn; s0 shared by all, s1 by a2 and b1/b2, s9 only A, s7 only C
    states = pd.DataFrame(
        {
            "traj_id": ["a1", "a1", "a2", "a2", "b1", "b1", "b2", "b2", "c1"],
            "t": [1, 2, 1, 2, 1, 2, 1, 2, 1],
            "state_id": [0, 9, 0, 1, 0, 1, 0, 1, 7],
        }
    )
    out = matched_state_errors(states, traj, flags, "A", "B").set_index("run")
    # matched states: 0 and 1. A: from 0 turns a1t1 (E), a2t1 (C); from 1 a2t2 (C).
    # B: from 0 b1t1, b2t1 (C, C); from 1 b1t2 (C), b2t2 (E). a1t2 follows an error: left out.
    assert out.loc["A", "n_states"] == 2
    assert (out.loc["A", "n_turns"], out.loc["A", "n_errors"]) == (3, 1)
    assert (out.loc["B", "n_turns"], out.loc["B", "n_errors"]) == (4, 1)
    # standardised: weights 4 (state 0) and 3 (state 1)
    assert out.loc["A", "standardised_error_rate"] == pytest.approx((4 * 0.5 + 3 * 0) / 7)
    assert out.loc["B", "standardised_error_rate"] == pytest.approx((4 * 0 + 3 * 0.5) / 7)
    none = matched_state_errors(states, traj, flags, "A", "C")
    assert (none["n_states"] == 0).all()



def test_real_tau_bench_airline(tau_airline, con, memory_store):
    from analyses.frames import spells_frame, trajectories_frame, turn_flags_frame


    memory_store.ingest_file(tau_airline)
    traj, flags = trajectories_frame(con), turn_flags_frame(con)
    run = traj["run"].iloc[0]
    desc = descriptive(traj, flags, [None]).iloc[0]
    assert desc["e"] == pytest.approx(36 / 200)       # 36 trajectories have an `Error:` turn
    assert desc["success"] == pytest.approx(0.42)
    fit = model_fit(traj, flags, run, [5, 10, 20, 30, None], FitOptions(strata=1))
    assert fit["empirical"].iloc[-1] == pytest.approx(0.42)
    assert (fit["model"] - fit["empirical"]).abs().max() <= 0.02, fit
    stats = spell_stats(traj, flags).iloc[0]
    assert stats["n_trajectories"] == 200 and stats["n_spells"] >= 36
    # the same counts as the store's own error_spells table
    spells = spells_frame(con)
    assert (stats["n_spells"], stats["n_recovered"], stats["n_fatal"]) == (
        len(spells), spells["recovered"].sum(), spells["fatal"].sum())
