"""One rule for an episode's success, and every consumer reads it the same way.

The rule is :func:`recovery.schema.derive_success` (the record's flag wins over its reward; a
reward counts at and above the threshold), applied once at ingest, with its SQL twin on the
fast ingest path. Which episodes count is :mod:`recovery.population` (a crash or an unknown
end is left out). analyze's success, the PRM's ``outcome`` targets and BudgetMix's shaped
rewards must agree on the odd cases: the flag and the reward disagreeing, one of them alone,
neither, and a crashed episode. (The rule and its SQL twin are checked in
tests/test_definitions.py, ``test_success_has_one_rule_and_its_sql_twin_agrees``.)
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from recovery.schema import Trajectory, Turn
from recovery.store import open_store

ODD_RECORDS = {
    # task_id: the record's own success fields (flag, reward, end reason)
    "flag-true-reward-0": {"success": True, "reward": 0.0},
    "flag-false-reward-1": {"success": False, "reward": 1.0},
    "reward-only-1": {"reward": 1.0},
    "reward-only-half": {"reward": 0.5},
    "flag-only-true": {"success": True},
    "flag-only-false": {"success": False},
    "crashed": {"success": False, "reward": 0.0, "end_reason": "crash"},
    # a success ends by success whatever the source says: counted, not left out as a crash
    "crash-said-of-a-success": {"reward": 1.0, "end_reason": "crash"},
}
NEITHER = "neither"
"""An episode with neither flag nor reward: the canonical format refuses it, so it is stored
from a Trajectory with an unknown outcome."""


def expected_success(task: str) -> bool | None:
    """The rule's answer for a case; ``None`` = left out of every number."""
    from recovery.population import LEFT_OUT_END_REASONS
    from recovery.schema import derive_success, end_reason

    fields = ODD_RECORDS.get(task, {})
    success = derive_success(fields.get("success"), fields.get("reward"), required=False)
    reason = end_reason(success, 2, None, fields.get("end_reason"))
    return None if reason in LEFT_OUT_END_REASONS else success


@pytest.fixture(scope="module")
def odd_store(tmp_path_factory: pytest.TempPathFactory):
    """The odd cases through both ingest paths (run ``fast``: the SQL reader; run ``py``: an
    unknown key sends the copy to the Python reader), each turn scored 0.5 by PRM ``m``."""
    from prm.score import write_step_scores

    root = tmp_path_factory.mktemp("success-rule")
    turns = [{"action": "look", "observation": "a room"}, {"action": "go", "observation": "ok"}]
    for run, extra in (("fast", {}), ("py", {"extra_key": 1})):
        (root / f"{run}.jsonl").write_text("".join(
            json.dumps({"task_id": task, "turns": turns} | fields | extra) + "\n"
            for task, fields in ODD_RECORDS.items()))
    store = open_store(None)
    store.ingest_files([root / "fast.jsonl", root / "py.jsonl"])
    store.ingest_trajectories([Trajectory(
        run=run, task_id=NEITHER, turns=[Turn(action="x", observation="y")], success=None)
        for run in ("fast", "py")])
    all_turns = store.con.execute("SELECT traj_id, t FROM turns").df()
    write_step_scores(store, all_turns.assign(score=0.5), "m")
    yield store.con
    store.close()


def _keyed(con, frame: pd.DataFrame, value: str) -> dict[tuple[str, str], object]:
    """``(run, task_id) -> True/False`` from a 1.0/0.0 column; NaN -> ``None``; any other
    number stays as it is (and fails the comparison)."""
    names = con.execute("SELECT traj_id, run, task_id FROM trajectories").df()
    merged = frame[["traj_id", value]].merge(names, on="traj_id")
    out: dict[tuple[str, str], object] = {}
    for (run, task), group in merged.groupby(["run", "task_id"]):
        # NaN is not equal to itself: map it to None before the one-outcome check
        values = {None if v is None or math.isnan(v) else v for v in group[value].tolist()}
        assert len(values) == 1, (run, task, values)  # one outcome per episode
        (v,) = values
        out[(run, task)] = None if v is None else {1.0: True, 0.0: False}.get(v, v)
    return out


def analyze_success(con) -> dict[tuple[str, str], bool | None]:
    from analyses.frames import trajectories_frame

    frame = trajectories_frame(con)
    return {(r, t): bool(s) for r, t, s in zip(frame["run"], frame["task_id"], frame["success"],
                                               strict=True)}


def prm_outcome(con) -> dict[tuple[str, str], object]:
    from prm.data.labels import step_targets

    return _keyed(con, step_targets(con, "outcome"), "target")


def rewards_success(con) -> dict[tuple[str, str], object]:
    from analyses.budgetmix.rewards import shaped_rewards_frame

    frame, _ = shaped_rewards_frame(con, "m")
    last = frame[frame["is_last"]].assign(outcome=lambda f: f["outcome"].astype(float))
    return _keyed(con, last, "outcome")


def _cases() -> list[tuple[str, str]]:
    return [(run, task) for run in ("fast", "py") for task in [*ODD_RECORDS, NEITHER]]


def _known(answers: dict[tuple[str, str], object]) -> dict[tuple[str, str], object]:
    return {k: v for k, v in answers.items() if v is not None}


def test_analyze_prm_and_budgetmix_rewards_agree_on_every_odd_case(odd_store) -> None:
    expected = {case: expected_success(case[1]) for case in _cases()}
    assert _known(expected) == analyze_success(odd_store)
    assert _known(expected) == rewards_success(odd_store)
    prm = prm_outcome(odd_store)
    assert {k: v for k, v in prm.items() if k[1] != "crashed"} == {
        k: v for k, v in expected.items() if k[1] != "crashed"}


def test_prm_outcome_targets_leave_crashed_episodes_out(odd_store) -> None:
    prm = prm_outcome(odd_store)
    assert {k: v for k, v in prm.items() if k[1] == "crashed"} == {
        ("fast", "crashed"): None, ("py", "crashed"): None}
