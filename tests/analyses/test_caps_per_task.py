"""Step caps per task and environment: runs that span environments with caps 100 and 80, and
one environment whose levels stop at 64 or 128, get every capped episode censored, the same in
the report, its data-quality numbers, the task timeline and ``budgetmix plan``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recovery.caps import capped_frame
from recovery.errors import UsageProblem
from recovery.schema import Trajectory, Turn
from recovery.store import open_store

RUNS = ("a", "b")
CAPS = {"nle/t0": 100, "nle/t1": 100, "nle/t2": 100, "crafter/t0": 80, "crafter/t1": 80,
        "crafter/t2": 80, "babyai/goto": 64, "babyai/open": 64, "babyai/putnext": 128,
        "babyai/pickup": 128}
"""Each task's step cap."""


def _episodes(cap: int) -> list[tuple[int, bool]]:
    """(turns, success) of one run's episodes of a task: failures at the cap, successes and a
    natural failure well before it."""
    if cap in (80, 100):
        return [(cap, False), (cap, False), (cap // 3, True), (cap // 4, False)]
    return [(cap, False)] * 3 + [(cap // 3, True), (cap // 2, True), (cap // 4, False)]


N_CAPPED = sum(n == CAPS[t] and not ok for t in CAPS for n, ok in _episodes(CAPS[t]))
"""Capped episodes of each run (24)."""


def _trajectories(written: dict[str, int] | None = None) -> list[Trajectory]:
    """Both runs' episodes; ``written``: task -> how many of each run's capped episodes there
    the format wrote as ``budget`` (the others say ``failure``, as BALROG's ``done`` does)."""
    out = []
    for run in RUNS:
        for task, cap in CAPS.items():
            marked = (written or {}).get(task, 0)
            for sample, (n, ok) in enumerate(_episodes(cap)):
                capped = n == cap and not ok
                turns = [Turn(action=f"go {run} {sample} {t}", observation=f"room {t}")
                         for t in range(n)]
                out.append(Trajectory(
                    run=run, task_id=task, sample=sample, turns=turns, success=ok,
                    end_reason=None if ok else "budget" if capped and sample < marked
                    else "failure"))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("caps") / "caps.duckdb"
    store = open_store(path)
    store.ingest_trajectories(_trajectories())
    store.close()
    return path


def _frame(trajectories: list[Trajectory]) -> pd.DataFrame:
    return pd.DataFrame({"traj_id": [f"{t.run}:{t.task_id}:{t.sample}" for t in trajectories],
                         "run": [t.run for t in trajectories],
                         "task_id": [t.task_id for t in trajectories],
                         "success": [bool(t.success) for t in trajectories],
                         "n_turns": [len(t.turns) for t in trajectories],
                         "end_reason": [t.end_reason or "success" for t in trajectories]})


def test_every_episode_at_its_tasks_cap_is_censored() -> None:
    traj = _frame(_trajectories())
    capped = capped_frame(traj)
    cap = traj["task_id"].map(CAPS).to_numpy()
    at_cap = (~traj["success"] & (traj["n_turns"] == cap)).to_numpy()
    assert (capped.frame["end_reason"].to_numpy() == "budget").tolist() == at_cap.tolist()
    assert capped.cap.tolist() == cap.astype(float).tolist()
    assert set(capped.source) == {"detected"}
    assert capped.env_caps() == {"babyai": [64, 128], "crafter": [80], "nle": [100]}
    parts = {(c.env, c.turns): (c.n_capped, c.n_failures) for c in capped.by_run["a"]}
    assert parts == {("babyai", 64): (6, 16), ("babyai", 128): (6, 16),
                     ("crafter", 80): (6, 9), ("nle", 100): (6, 9)}


def test_a_cap_written_for_some_episodes_holds_for_every_episode_of_the_task() -> None:
    """One capped episode per run written as budget in each nle task: the other capped
    episodes there are censored too, from the data."""
    traj = _frame(_trajectories({"nle/t0": 1, "nle/t1": 1, "nle/t2": 1}))
    capped = capped_frame(traj)
    nle = traj["task_id"].str.startswith("nle/").to_numpy()
    assert set(capped.source[nle]) == {"data"}
    assert int((capped.frame["end_reason"][nle] == "budget").sum()) == 12
    assert "100 turns in nle (written in the data: 6 of 9 unsuccessful episodes end there)" in [
        c.describe() for c in capped.by_run["a"]]


def test_max_turns_names_a_run_an_environment_or_both() -> None:
    traj = _frame(_trajectories())
    capped = capped_frame(traj, {"a": 30, "crafter": 20, "a/nle": 25})
    run, env = traj["run"].to_numpy(), traj["task_id"].str.split("/").str[0].to_numpy()
    expected = np.where(env == "crafter", 20, np.where((run == "a") & (env == "nle"), 25,
                        np.where(run == "a", 30, traj["task_id"].map(CAPS))))
    assert capped.cap.tolist() == expected.astype(float).tolist()
    assert set(capped.source[(run == "b") & (env == "babyai")]) == {"detected"}
    # a name that is a run and an environment means the run
    both = traj.assign(run=np.where(run == "a", "nle", "b"))
    capped = capped_frame(both, {"nle": 7})
    assert (capped.cap[both["run"].to_numpy() == "nle"] == 7).all()
    assert capped.cap[(both["run"].to_numpy() == "b") & (env == "nle")].tolist() == [100.0] * 12
    with pytest.raises(UsageProblem, match=r"not among the runs .* nor the environments"):
        capped_frame(traj, {"c/nle": 5})


def test_the_report_counts_what_it_censors(store: Path) -> None:
    from analyses.report import ReportOptions, build_report

    opened = open_store(store, read_only=True)
    try:
        report = build_report(opened.con, None, ReportOptions(n_boot=0, strata=1))
    finally:
        opened.close()
    for run in RUNS:
        q = report.data_quality[run]
        assert q.end_reasons["budget"] == q.n_budget_hit == N_CAPPED
        assert q.end_reasons["failure"] == 10
        assert q.step_cap == 128 and q.step_cap_source == "detected"
        for part in ("64 turns in babyai", "128 turns in babyai", "80 turns in crafter",
                     "100 turns in nle"):
            assert part in q.step_cap_note
        # the natural failures are the only failure events of the hazards
        assert sum(p.events for p in report.runs[run].hazards["f"]) == 10
    pooled = [w for w in report.data_warnings if "different step caps" in w]
    assert len(pooled) == 2 and all("--by env" in w for w in pooled)


@pytest.mark.parametrize(("task", "cap"), [("babyai/goto", 64), ("babyai/pickup", 128),
                                           ("nle/t1", 100)])
def test_the_timeline_ends_capped_rows_by_budget(store: Path, task: str, cap: int) -> None:
    from recovery.graph import task_timeline

    opened = open_store(store, read_only=True)
    try:
        timeline = task_timeline(opened.con, task)
    finally:
        opened.close()
    labels = [(len(r.cells), r.end_label) for r in timeline.rows]
    n_capped = sum(n == cap and not ok for n, ok in _episodes(cap)) * len(RUNS)
    assert labels.count((cap, f"budget (cap {cap})")) == n_capped
    assert not any(label == "failure" and n == cap for n, label in labels)


def test_budgetmix_plan_sees_the_same_caps_and_warns(store: Path) -> None:
    from analyses.budgetmix.plan import PlanConfig, plan_schedule, schedule_lines

    schedule = plan_schedule(PlanConfig(store=store, budgets=[40, 80, 128]))
    assert schedule.params["n_censored"] == N_CAPPED * len(RUNS)
    assert schedule.params["step_caps"] == {"babyai": [64, 128], "crafter": [80], "nle": [100]}
    warned = [line for line in schedule_lines(schedule) if line.startswith("warning:")]
    assert len(warned) == 1 and "--by env" in warned[0] and "babyai 64/128" in warned[0]
    one_env = plan_schedule(PlanConfig(store=store, budgets=[40, 80], max_turns=["crafter=80"],
                                       runs=["a"]))
    assert one_env.params["step_caps"]["crafter"] == [80]


def test_the_turn_graph_of_a_capped_episode_says_it_ran_out_of_turns(store: Path) -> None:
    from recovery.graph import turn_graph
    from recovery.graph.draw import graph_figure

    opened = open_store(store, read_only=True)
    try:
        (capped_id,), (natural_id,) = (opened.con.execute(
            "SELECT traj_id FROM trajectories WHERE run = 'a' AND task_id = 'babyai/goto' "
            "AND sample = ?", [sample]).fetchone() for sample in (0, 5))
        capped, natural = turn_graph(opened.con, capped_id), turn_graph(opened.con, natural_id)
    finally:
        opened.close()
    assert (capped.graph["end_reason"], capped.graph["cap"]) == ("budget", 64)
    assert natural.graph["end_reason"] == "failure" and "cap" not in natural.graph
    figure = graph_figure(capped)
    assert figure._suptitle.get_text().endswith("ran out of turns (cap 64)")


def test_graph_takes_max_turns_as_analyze_does(tmp_path: Path) -> None:
    """A cap the data cannot show (two episodes of one task) given with --max-turns: the
    timeline and the turn graph censor the episode that reached it, as analyze does."""
    import json

    from tests.cli_support import run_cli

    path = tmp_path / "two.duckdb"
    store = open_store(path)
    store.ingest_trajectories([
        Trajectory(run="a", task_id="solo", sample=s, success=False, end_reason="failure",
                   turns=[Turn(action=f"a {s} {t}", observation=f"o {t}") for t in range(n)])
        for s, n in ((0, 30), (1, 12))])
    (capped_id,) = store.con.execute(
        "SELECT traj_id FROM trajectories WHERE sample = 0").fetchone()
    store.close()

    def timeline_ends(*extra: str) -> list[str]:
        out = tmp_path / "t.json"
        result = run_cli("graph", "--task", "solo", "--view", "timeline", "--store", str(path),
                         "--out", str(out), *extra)
        assert result.exit_code == 0, result.output
        rows = json.loads(out.read_text())["rows"]
        return sorted(str(r["end_label"]) for r in rows)

    def turn_graph_end(*extra: str) -> str:
        out = tmp_path / "g.json"
        result = run_cli("graph", capped_id, "--store", str(path), "--out", str(out), *extra)
        assert result.exit_code == 0, result.output
        return json.loads(out.read_text())["graph"]["end_reason"]

    assert not any("budget" in label for label in timeline_ends())
    assert turn_graph_end() == "failure"
    assert sum("budget" in label for label in timeline_ends("--max-turns", "a=30")) == 1
    assert turn_graph_end("--max-turns", "a=30") == "budget"
