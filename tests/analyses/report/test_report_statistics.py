"""The report reads per-task statistics, never a per-turn frame: through one source that
another engine can supply, with ``--where``'s trajectory filter applied in the SQL."""

from __future__ import annotations

import pytest

from analyses.report import ReportOptions, build_report
from analyses.task_stats import merge, task_statistics
from tests.conftest import simulated_store


@pytest.fixture(scope="module")
def sim_con():
    from recovery.simulate import PRESETS, SimConfig

    store = simulated_store(SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
                                      n_tasks=40, n_samples=3, budgets=[25], seed=5))
    yield store.con
    store.close()


def _ids(con, parity: int) -> list[str]:
    rows = con.execute("SELECT traj_id FROM trajectories ORDER BY traj_id").fetchall()
    return [r[0] for i, r in enumerate(rows) if i % 2 == parity]


def _no_turn_frames(monkeypatch) -> None:
    """Make every reader of per-turn (or per-spell) rows fail."""
    import analyses.frames

    def refuse(*_args, **_kwargs):
        raise AssertionError("a per-turn frame was read")

    for name in ("turn_flags_frame", "spells_frame"):
        monkeypatch.setattr(analyses.frames, name, refuse)


def test_build_report_reads_no_per_turn_frame(sim_con, monkeypatch) -> None:
    _no_turn_frames(monkeypatch)
    report = build_report(sim_con, options=ReportOptions(n_boot=5, strata=2))
    assert report.runs["rl"].recovery.n_spells > 0
    assert report.comparisons and report.runs["base"].errors.n_error_turns > 0


def test_grouped_report_reads_no_per_turn_frame(sim_con, monkeypatch) -> None:
    from analyses.report.grouped import Grouping, build_grouped_report

    _no_turn_frames(monkeypatch)
    grouped = build_grouped_report(sim_con, Grouping("meta.task.domain", 0),
                                   options=ReportOptions(n_boot=0, strata=1))
    assert any(group.report is not None for group in grouped.groups)


def test_statistics_filter_trajectories_in_sql(sim_con) -> None:
    whole = task_statistics(sim_con)
    even = task_statistics(sim_con, traj_ids=_ids(sim_con, 0))
    odd = task_statistics(sim_con, traj_ids=_ids(sim_con, 1))
    assert not even.equals(whole)
    assert merge(even, odd).equals(whole)


def test_build_report_takes_its_statistics_from_the_source(sim_con) -> None:
    calls = []

    def halves(runs, mode, caps):
        """The statistics as another engine would give them: two shards merged."""
        calls.append((runs, mode, caps))
        return merge(*(task_statistics(sim_con, runs, mode, caps=caps,
                                       traj_ids=_ids(sim_con, p)) for p in (0, 1)))

    options = ReportOptions(n_boot=10, strata=2, seed=2)
    default = build_report(sim_con, options=options)
    merged = build_report(sim_con, options=options, statistics=halves)
    assert len(calls) == 1 and calls[0][1] == "truncation"
    for name in ("base", "rl"):
        assert merged.runs[name].model_fit == default.runs[name].model_fit
        assert merged.runs[name].recovery == default.runs[name].recovery
        assert merged.runs[name].descriptive == default.runs[name].descriptive
    assert merged.comparisons[0].by_t == default.comparisons[0].by_t


def test_where_selection_is_applied_to_the_statistics(sim_con) -> None:
    ids = _ids(sim_con, 0)
    some = build_report(sim_con, options=ReportOptions(n_boot=0, strata=1), traj_ids=ids)
    every = build_report(sim_con, options=ReportOptions(n_boot=0, strata=1))
    spells = sum(some.runs[r].recovery.n_spells for r in some.runs)
    assert 0 < spells < sum(every.runs[r].recovery.n_spells for r in every.runs)
    assert sum(r.n_trajectories for r in some.runs.values()) == len(ids)
