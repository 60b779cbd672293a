"""Adaptive schedules from a store: shortfall and unrecovered evidence, both modes."""

from __future__ import annotations

import pytest

from analyses.budgetmix.evidence import EvidenceOptions, adaptive_schedule, budget_evidence
from analyses.budgetmix.schedule import evidence_weights
from recovery.errors import InputProblem, UsageProblem
from tests.analyses.budgetmix.helpers import budgeted_store, traj


def test_adaptive_shortfall_puts_weight_where_short_budgets_fall_short(con, memory_store):
    budgeted_store(memory_store, {4: 0.2, 8: 0.6, 16: 0.9})
    schedule = adaptive_schedule(con, [4, 8, 16], EvidenceOptions(evidence="shortfall", floor=0.2))
    assert sum(schedule.weights) == pytest.approx(1.0)
    assert schedule.params["mode"] == "budgeted"
    ev = {e.budget: e for e in schedule.evidence}
    # Pass@(1,T) with equal samples per task is the success share: 0.2, 0.6, 0.9.
    assert [ev[t].pass_at_1 for t in (4, 8, 16)] == pytest.approx([0.2, 0.6, 0.9])
    assert [ev[t].shortfall for t in (4, 8, 16)] == pytest.approx([0.7, 0.3, 0.0])
    assert ev[4].n_trajectories == 50 and ev[4].n_tasks == 5
    assert schedule.weights == pytest.approx(evidence_weights([0.7, 0.3, 0.0], 0.2))
    assert schedule.weights[0] > schedule.weights[1] > schedule.weights[2]


def test_adaptive_is_uniform_when_nothing_falls_short(con, memory_store):
    budgeted_store(memory_store, {4: 0.8, 8: 0.8, 16: 0.8})
    schedule = adaptive_schedule(con, [4, 8, 16])
    assert schedule.weights == pytest.approx([1 / 3] * 3)


def test_adaptive_truncation_mode(con, memory_store):
    # one budget (20): per task, successes at turns 2, 6, 12 and one failure
    trajectories = [
        traj("pol", f"t{task}", s, 20, n, ok)
        for task in range(4)
        for s, (n, ok) in enumerate([(2, True), (6, True), (12, True), (20, False)])
    ]
    memory_store.ingest_trajectories(trajectories)
    schedule = adaptive_schedule(con, [4, 8, 16], EvidenceOptions(mode="auto"))
    assert schedule.params["mode"] == "truncation"
    ev = {e.budget: e for e in schedule.evidence}
    assert [ev[t].pass_at_1 for t in (4, 8, 16)] == pytest.approx([0.25, 0.5, 0.75])
    assert schedule.weights[0] > schedule.weights[1] > schedule.weights[2]
    with pytest.raises(InputProblem, match="budgeted mode"):
        budget_evidence(con, [4, 8], mode="budgeted")


def test_adaptive_unrecovered_evidence(con, memory_store):
    # Budget 4: the error at turn 3 is still open when the episode stops (unrecovered).
    # Budget 12: the error at turn 3 is recovered at turn 4.
    trajectories = []
    for task in range(3):
        for s in range(4):
            trajectories.append(traj("pol", f"t{task}", s, 4, 4, False, error_turns=(3, 4)))
            trajectories.append(traj("pol", f"t{task}", s, 12, 6, True, error_turns=(3,)))
    memory_store.ingest_trajectories(trajectories)
    rows, info = budget_evidence(con, [4, 12])
    assert info["mode"] == "budgeted" and info["reference_budget"] == 12
    ev = {e.budget: e for e in rows}
    assert (ev[4].n_spells, ev[4].n_unrecovered, ev[4].unrecovered_share) == (12, 12, 1.0)
    assert (ev[12].n_spells, ev[12].n_unrecovered, ev[12].unrecovered_share) == (12, 0, 0.0)
    assert ev[4].unrecovered_excess == pytest.approx(1.0)
    schedule = adaptive_schedule(con, [4, 12], EvidenceOptions(evidence="unrecovered", floor=0.2))
    assert schedule.weights == pytest.approx([0.1 + 0.8, 0.1])
    assert schedule.evidence_kind == "unrecovered"
    # truncation mode reads the same spells cut at T: at T = 3 the spell is open
    rows, _ = budget_evidence(con, [3, 12], runs=["pol"], mode="truncation")
    three = rows[0]
    assert three.n_spells == 24 and three.n_unrecovered == 24


def test_adaptive_errors(con, memory_store):
    with pytest.raises(InputProblem, match="no trajectories"):
        adaptive_schedule(con, [4, 8])
    budgeted_store(memory_store, {4: 0.5, 8: 0.5})
    with pytest.raises(UsageProblem, match="unknown evidence"):
        adaptive_schedule(con, [4, 8], EvidenceOptions(evidence="vibes"))
    with pytest.raises(InputProblem, match="no trajectories"):
        adaptive_schedule(con, [4, 8], EvidenceOptions(runs=["nope"]))
    with pytest.raises(UsageProblem, match="unknown mode 'exact'"):
        adaptive_schedule(con, [4, 8], EvidenceOptions(mode="exact"))
    with pytest.raises(UsageProblem, match=r"floor must lie in \[0, 1\], got 1.5") as err:
        adaptive_schedule(con, [4, 8], EvidenceOptions(floor=1.5))
    assert not isinstance(err.value, ValueError)
    with pytest.raises(UsageProblem, match="no budgets to describe"):
        budget_evidence(con, [])
    with pytest.raises(UsageProblem, match="floor must lie"):
        evidence_weights([1.0], floor=-0.1)
    with pytest.raises(ValueError, match="non-negative"):  # a caller's bug, not the user's
        evidence_weights([-1.0, 1.0])


def test_trajectories_without_a_budget_are_left_out_of_budgeted_mode(con, memory_store):
    budgeted_store(memory_store, {4: 0.2, 8: 0.6})
    memory_store.ingest_trajectories([traj("pol", f"task{k}", 0, None, 3, True) for k in range(5)])
    rows, info = budget_evidence(con, [4, 8])
    assert info["mode"] == "budgeted"  # every budget asked for was run
    assert [r.n_trajectories for r in rows] == [50, 50]  # the 5 without a budget are not read
    assert [r.pass_at_1 for r in rows] == pytest.approx([0.2, 0.6])
    rows, info = budget_evidence(con, [4, 8], mode="truncation")
    assert [r.n_trajectories for r in rows] == [105, 105]  # truncation reads them all
