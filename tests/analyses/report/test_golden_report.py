"""The report's JSON against golden files written by the report as it was before it read the
per-task statistics instead of a per-turn frame: every number the same to 1e-12 (timings
and sources left out), on tau-bench airline and on the simulator (truncation and budgeted
mode, a trajectory selection, strata by success rate, a grouped report).

Regenerate the golden files (only when a number is meant to change) with
``python tests/analyses/report/test_golden_report.py --write``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).with_name("golden")
SKIPPED = {"timings", "cpu_timings", "sources"}
TAU = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "tau-bench" / (
    "gpt-4o-airline.json")


def _sim_store(budgets: list[int], n_tasks: int, n_samples: int):
    from recovery.simulate import PRESETS, SimConfig
    from tests.conftest import simulated_store

    return simulated_store(SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
                                     n_tasks=n_tasks, n_samples=n_samples, budgets=budgets,
                                     seed=3))


def _report_json(report, tmp: Path) -> dict:
    from analyses.report.records import write_json

    path = write_json(report, tmp / "report.json")
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _reports(tmp: Path) -> dict[str, dict]:
    """Each case's report JSON."""
    from analyses.report import ReportOptions, build_report
    from analyses.report.grouped import Grouping, build_grouped_report
    from recovery.store import open_store

    out = {}
    store = open_store(None)
    try:
        store.ingest_file(TAU)
        out["tau"] = _report_json(build_report(store.con, options=ReportOptions(n_boot=40)), tmp)
        out["tau_capped"] = _report_json(build_report(store.con, options=ReportOptions(
            n_boot=0, strata=2, max_turns={"gpt-4o-airline": 20})), tmp)
    finally:
        store.close()
    store = _sim_store([30], 60, 4)
    try:
        con = store.con
        out["sim"] = _report_json(build_report(con, options=ReportOptions(
            baseline="base", n_boot=40)), tmp)
        ids = [r[0] for r in con.execute(
            "SELECT traj_id FROM trajectories WHERE task_id < 'task0030'").fetchall()]
        out["sim_where"] = _report_json(build_report(con, options=ReportOptions(
            baseline="base", n_boot=20, strata=2, strata_by="success"), traj_ids=ids), tmp)
        out["sim_grouped"] = _report_json(build_grouped_report(
            con, Grouping("meta.task.domain", 0), options=ReportOptions(n_boot=0)), tmp)
    finally:
        store.close()
    store = _sim_store([10, 20], 40, 3)
    try:
        out["sim_budgeted"] = _report_json(build_report(store.con, options=ReportOptions(
            n_boot=20)), tmp)
    finally:
        store.close()
    return out


def _differences(want, got, path: str = "") -> list[str]:
    """Where two JSON values differ (numbers by more than 1e-12), timings left out."""
    if isinstance(want, dict) and isinstance(got, dict):
        if set(want) - SKIPPED != set(got) - SKIPPED:
            return [f"{path}: keys {sorted(set(want) ^ set(got))}"]
        return [d for k in want if k not in SKIPPED
                for d in _differences(want[k], got[k], f"{path}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(want)} items, now {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got, strict=True))
                for d in _differences(a, b, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers) and not isinstance(want, bool):
        if (math.isnan(want) and math.isnan(got)) or abs(want - got) <= 1e-12:
            return []
        return [f"{path}: {want} now {got}"]
    return [] if want == got else [f"{path}: {want!r} now {got!r}"]


def _without_timings(value):
    """The JSON value with every timing (and the sources) left out."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k not in SKIPPED}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_report_json_equals_the_golden_files(tmp_path) -> None:
    if not TAU.exists():
        pytest.skip(f"real data not found at {TAU}")
    for name, got in _reports(tmp_path).items():
        want = json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8"))
        diffs = _differences(want, got)
        assert not diffs, f"{name}: " + "\n".join(diffs[:20])


def test_the_comparison_sees_a_change() -> None:
    want = {"a": [1.0, {"b": 0.5, "timings": {"x": 1.0}}], "c": "text"}
    assert _differences(want, json.loads(json.dumps(want))) == []
    assert _differences(want, {"a": [1.0, {"b": 0.5 + 1e-9, "timings": {}}], "c": "text"})
    assert _differences(want, {"a": [1.0], "c": "text"})
    assert _differences(want, {"a": [1.0, {"b": 0.5}], "c": "other"})


if __name__ == "__main__" and "--write" in sys.argv:
    import tempfile

    GOLDEN.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case, data in _reports(Path(tmp)).items():
            (GOLDEN / f"{case}.json").write_text(json.dumps(_without_timings(data), indent=1,
                                                                sort_keys=True)
                                                 + "\n", encoding="utf-8")
            print("wrote", case)
