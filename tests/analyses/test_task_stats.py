"""Per-task sufficient statistics (analyses.task_stats): the statistics of two halves of a store
merge into those of the whole, exactly, and every number computed from them equals the frame
path's on the same store (Pass@(K,T), the hazard counts, the strata key, e/c/r), on the
simulator and on tau-bench, with step caps, a crash and an unknown outcome, in a DuckDB store
and in a Parquet folder store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyses.task_stats import merge, step_caps, task_statistics
from analyses.task_stats_measures import (
    clean_success_key,
    descriptive_from_statistics,
    hazard_counts,
    pass_at_kt_from_statistics,
)
from recovery.errors import UsageProblem
from recovery.store import make_traj_id, open_store

SIM_BUDGETS = (12, 25)
EDGE_CAP = {"edge": 5}
"""A --max-turns cap for the hand-made run: its failures of 5 turns or more are censored."""


def _turns(marks: str, done_at: int | None = None) -> list[dict]:
    """Turns from ``"CEC"`` (C clean, E marked error), distinct so that no rule marks them."""
    out = []
    for t, mark in enumerate(marks, start=1):
        turn = {"action": f"act {t}", "observation": f"obs {t}",
                "error": "tool_error" if mark == "E" else None}
        if done_at == t:
            turn["done"] = True
        out.append(turn)
    return out


def _edge_records() -> list[dict]:
    """Hand-made cases: an early success with marks on and after its success turn, a spell
    open at the budget and one open at a failure, an all-error failure, no turn at all, a
    success at turn 1 marked error, a crash and an unknown outcome (both left out), and
    failures that the cap of :data:`EDGE_CAP` censors (one ending clean, one in a spell)."""
    cases = [
        ("e1", 0, "CEECE", True, 3, None, None),
        ("e1", 1, "CCCCEE", False, None, 6, None),
        ("e1", 2, "EECE", False, None, None, None),
        ("e2", 0, "EEE", False, None, None, None),
        ("e2", 1, "", False, None, None, None),
        ("e2", 2, "E", True, None, None, None),
        ("e3", 0, "CC", False, None, None, "crash"),
        ("e3", 1, "CE", False, None, None, "unknown"),
        ("e3", 2, "CECEECC", False, None, None, None),
        ("e3", 3, "CCEECEE", False, None, None, None),
    ]
    return [{"run": "edge", "task_id": task, "sample": sample, "budget": budget,
             "success": success, "turns": _turns(marks, done_at),
             **({"end_reason": reason} if reason else {})}
            for task, sample, marks, success, done_at, budget, reason in cases]


def _traj_parity(record: dict) -> int:
    budget = record.get("budget")
    tid = make_traj_id(record["run"], str(record["task_id"]),
                       None if budget is None else int(budget), int(record["sample"]))
    return int(tid, 16) % 2


def _write_lines(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _ingest(location: str | Path, files: list[Path]):
    store = open_store(location)
    for path in files:
        store.ingest_file(path)
    return store


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory):
    """The simulator (2 policies, 24 tasks, 4 samples at budgets 12 and 25) and the hand-made
    run: a DuckDB store of it all, each half (by traj id parity) in its own store, and a
    folder store of it all. Yields ``{"whole", "half0", "half1", "folder"}`` -> store."""
    from recovery.schema import trajectory_to_dict
    from recovery.simulate import SimConfig, simulate

    root = tmp_path_factory.mktemp("task-stats-sim")
    config = SimConfig(n_tasks=24, n_samples=4, budgets=list(SIM_BUDGETS), seed=3)
    records = [trajectory_to_dict(t) for ts in simulate(config).values() for t in ts]
    records += _edge_records()
    whole = [_write_lines(root / "whole" / "all.jsonl", records)]
    halves = [[_write_lines(root / f"half{p}" / "all.jsonl",
                            [r for r in records if _traj_parity(r) == p])] for p in (0, 1)]
    stores = {"whole": _ingest(root / "whole.duckdb", whole),
              "half0": _ingest(root / "half0.duckdb", halves[0]),
              "half1": _ingest(root / "half1.duckdb", halves[1]),
              "folder": _ingest(f"{root / 'folder'}/", whole)}
    yield stores
    for store in stores.values():
        store.close()


@pytest.fixture(scope="module")
def tau(tmp_path_factory: pytest.TempPathFactory):
    """tau-bench airline (its step cap of 30 is detected) with one crashed record added, in a
    DuckDB store and in a folder store: ``{"whole", "folder"}`` -> store. (Its halves are
    left to the simulator: each tau-bench ingest takes about a second.)"""
    from tests.conftest import TAU_AIRLINE

    if not TAU_AIRLINE.exists():
        pytest.skip(f"real data not found at {TAU_AIRLINE} (../shared/data is absent)")
    root = tmp_path_factory.mktemp("task-stats-tau")
    records = json.loads(TAU_AIRLINE.read_text(encoding="utf-8"))
    records.append({"task_id": 999, "trial": 0, "reward": 0.0, "traj": [],
                    "info": {"error": "the harness died"}})
    whole = [root / TAU_AIRLINE.name]  # the run is the file's stem
    whole[0].write_text(json.dumps(records), encoding="utf-8")
    stores = {"whole": _ingest(root / "whole.duckdb", whole),
              "folder": _ingest(f"{root / 'folder'}/", whole)}
    assert stores["whole"].con.execute(
        "SELECT count(*) FROM trajectories WHERE end_reason = 'crash'").fetchone() == (1,)
    yield stores
    for store in stores.values():
        store.close()


def _data(request: pytest.FixtureRequest, name: str) -> dict:
    return request.getfixturevalue(name)


def _caps(con, name: str) -> pd.DataFrame:
    """The step caps the report would apply: detected (tau: 30 turns) and, on the simulator,
    ``--max-turns edge=5``."""
    return step_caps(con, max_turns=EDGE_CAP if name == "sim" else None)


def _frames(con, caps: dict[str, int] | None):
    """The frame path's inputs: trajectories with the caps applied, and the turn flags."""
    from analyses.frames import trajectories_frame, turn_flags_frame
    from recovery.caps import capped_frame

    traj = trajectories_frame(con)
    traj = capped_frame(traj.assign(task_id=traj["task_id"].astype(str)), caps).frame
    return traj, turn_flags_frame(con)


# ------------------------------------------------------------------------------------------
# Merging


@pytest.mark.parametrize("mode", ["truncation", "budgeted"])
def test_halves_merge_into_the_whole_exactly(sim, mode):
    stores = sim
    caps = _caps(stores["whole"].con, "sim")  # a cap is the environment's: the same for both
    whole, a, b = (task_statistics(stores[s].con, mode=mode, caps=caps)
                   for s in ("whole", "half0", "half1"))
    assert len(a.cell_n) and len(b.cell_n)
    assert not whole.equals(a)
    merged = merge(a, b)
    assert merged.equals(whole)
    assert merged.cell_n.dtype.kind == "i"
    assert merge(b, a).equals(whole)


def test_merge_is_associative_and_refuses_mixed_modes(sim, tau):
    parts = [task_statistics(s.con) for s in (sim["half0"], sim["half1"], tau["folder"])]
    left = merge(merge(parts[0], parts[1]), parts[2])
    right = merge(parts[0], merge(parts[1], parts[2]))
    assert left.equals(right)
    assert set(left.runs) == {"base", "rl", "edge", "gpt-4o-airline"}
    with pytest.raises(UsageProblem, match="budgeted"):
        merge(parts[0], task_statistics(sim["half1"].con, mode="budgeted"))
    with pytest.raises(UsageProblem, match="mode"):
        task_statistics(sim["whole"].con, mode="pooled")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["sim", "tau"])
def test_folder_store_gives_the_same_statistics(request, name):
    stores = _data(request, name)
    for mode in ("truncation", "budgeted"):
        caps = _caps(stores["whole"].con, name)
        duck = task_statistics(stores["whole"].con, mode=mode, caps=caps)
        folder = task_statistics(stores["folder"].con, mode=mode, caps=caps)
        assert folder.equals(duck)


# ------------------------------------------------------------------------------------------
# The numbers from the statistics equal the frame path's


@pytest.mark.parametrize("name", ["sim", "tau"])
@pytest.mark.parametrize("kind", ["whole", "folder"])
def test_pass_at_kt_truncation_matches(request, name, kind):
    from analyses.frames import trajectories_frame
    from analyses.passkt import GridOptions, pass_at_kt

    con = _data(request, name)[kind].con
    ks, ts = [1, 2, 3, 4, 8], [1, 2, 3, 4, 5, 10, 17, 30, 100, None]
    stats = task_statistics(con, caps=_caps(con, name))
    mine = pass_at_kt_from_statistics(stats, ks, ts)
    theirs = pass_at_kt(trajectories_frame(con), GridOptions(ks=ks, ts=ts, n_boot=0,
                                                              warn_mixed=False))
    _same_grid(mine, theirs)
    assert (mine["value"] > 0).any() and (mine["n_tasks_left_out"] > 0).any()


@pytest.mark.parametrize("kind", ["whole", "folder"])
def test_pass_at_kt_budgeted_matches(sim, kind):
    from analyses.frames import trajectories_frame
    from analyses.passkt import GridOptions, pass_at_kt

    con = sim[kind].con
    runs = ["base", "rl"]
    stats = task_statistics(con, runs, mode="budgeted", caps=_caps(con, "sim"))
    mine = pass_at_kt_from_statistics(stats, [1, 2, 4], list(SIM_BUDGETS))
    theirs = pass_at_kt(trajectories_frame(con, runs),
                        GridOptions(ks=[1, 2, 4], ts=list(SIM_BUDGETS), mode="budgeted",
                                    n_boot=0))
    _same_grid(mine, theirs)
    with pytest.raises(UsageProblem, match="lacks 13"):
        pass_at_kt_from_statistics(stats, [1], [13])


def _same_grid(mine: pd.DataFrame, theirs: pd.DataFrame) -> None:
    assert list(mine["run"]) == list(theirs["run"])
    assert list(mine["k"]) == list(theirs["k"])
    assert list(mine["t"].astype(object)) == list(theirs["t"].astype(object))
    assert np.array_equal(mine["n_tasks"], theirs["n_tasks"])
    assert np.array_equal(mine["n_tasks_left_out"], theirs["n_tasks_left_out"])
    np.testing.assert_allclose(mine["value"], theirs["value"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["sim", "tau"])
@pytest.mark.parametrize("mode", ["truncation", "budgeted"])
def test_hazard_counts_match_event_counts(request, name, mode):
    from analyses.hazards import event_counts, turn_table
    from analyses.strata import key_counts

    con = _data(request, name)["folder"].con
    caps = _caps(con, name)
    stats = task_statistics(con, mode=mode, caps=caps)
    given = EDGE_CAP if name == "sim" else None
    traj, flags = _frames(con, given)
    assert (traj["end_reason"] == "budget").any()  # the caps censor some episodes
    groups = _budget_groups(traj, mode)
    for run in stats.runs:
        pairs = stats.run_pairs(run)
        for budget, rows in groups:
            sub = traj[(traj["run"] == run).to_numpy() & rows].reset_index(drop=True)
            tasks = stats.tasks[stats.pair_task[pairs]]
            task_of_row = pd.Index(tasks).get_indexer(sub["task_id"])
            table = turn_table(sub, flags)
            for length in (table.length, 4):  # the second clips the clocks, as event_counts does
                theirs = event_counts(table, task_of_row, len(tasks), length)
                group = np.full(len(stats.pair_run), -1)
                group[pairs] = np.arange(len(pairs))
                mine = hazard_counts(stats, group, len(pairs), length, budget)
                assert np.array_equal(mine, theirs), (run, budget, length)
            hits, trials = clean_success_key(stats, budget)
            assert np.array_equal(np.stack([hits[pairs], trials[pairs]]),
                                  np.stack(key_counts(theirs)))


def _budget_groups(traj: pd.DataFrame, mode: str) -> list[tuple[int | None, np.ndarray]]:
    if mode == "truncation":
        return [(None, np.ones(len(traj), dtype=bool))]
    budget = traj["budget"].fillna(-1).to_numpy()
    return [(int(b), budget == b) for b in np.unique(budget)]


def test_hazard_counts_of_the_hand_made_run_by_hand(sim):
    """The hand-made run counted by hand (rows: 2k events, 2k + 1 at risk of h, s, f, rho,
    phi), with its cap of 5 turns and without."""
    con = sim["whole"].con
    capped = task_statistics(con, ["edge"], caps=step_caps(con, ["edge"], EDGE_CAP))
    as_stored = task_statistics(con, ["edge"])
    one_group = np.zeros(len(capped.pair_run), dtype=np.int64)
    counts, stored = (hazard_counts(s, one_group, 1, 10)[0] for s in (capped, as_stored))
    # The crash and the unknown outcome are left out: 8 trajectories, 7 of at least a turn.
    assert counts[1, 0] == 7                 # h at risk at n = 0: every first turn
    assert counts[2].sum() == 2              # s events: e1/0 (at its done turn) and e2/2
    assert counts[6].sum() == 5              # rho events: the five recovered spells
    # Error turns at risk of phi: 16 less the two last turns the budget ends (e1/1, e3/3).
    assert counts[9].sum() == 14
    assert counts[8].sum() == 2              # phi events: e1/2 and e2/0 end in a spell
    assert counts[4].sum() == 0              # f: e3/2 ends clean at 7 turns, past the cap
    assert stored[4].sum() == 1 and stored[8].sum() == 3 and stored[9].sum() == 15


@pytest.mark.parametrize(("name", "mode"), [
    ("sim", "truncation"), ("sim", "budgeted"), ("tau", "truncation")])
def test_descriptive_numbers_match(request, name, mode):
    from analyses.descriptive import descriptive

    con = _data(request, name)["whole"].con
    ts = list(SIM_BUDGETS) if mode == "budgeted" else [1, 3, 8, 20, None]
    stats = task_statistics(con, mode=mode)
    traj, flags = _frames(con, None)
    theirs = descriptive(traj, flags, ts, mode=mode)
    mine = descriptive_from_statistics(stats, ts)
    assert list(mine["run"]) == list(theirs["run"])
    assert np.array_equal(mine["n"], theirs["n"])
    for column in ("e", "c", "r", "success"):
        np.testing.assert_allclose(mine[column], theirs[column], rtol=0, atol=1e-12)


def test_hazard_counts_in_blocks_of_groups_equal_one_block(sim, monkeypatch):
    """Groups are counted a block at a time (memory); the blocks' counts are the whole's."""
    import analyses.task_stats_measures as measures

    stats = task_statistics(sim["whole"].con)
    group = np.arange(len(stats.pair_run)) % 7 - 1  # six groups and some pairs left out
    whole = hazard_counts(stats, group, 6, 40)
    monkeypatch.setattr(measures, "_BLOCK", 4)
    blocks = hazard_counts(stats, group, 6, 40)
    assert whole.sum() > 0 and np.array_equal(blocks, whole)
