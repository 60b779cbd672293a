"""Report costs linear in the data: the hazard curves binned in one pass and summarised per bin
when long (a trajectory of many thousand turns), and ``--by`` with many groups capped."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analyses.report.group_cap import MAX_GROUP_REPORTS, reported_values
from analyses.report.hazard_points import (
    MAX_POINTS,
    curve_per_bin,
    curve_points,
    per_bin,
    run_curves,
    with_bins,
)
from analyses.report.run_records import HazardPoint
from tests.cli_support import run_cli


def reference_with_bins(points: list[HazardPoint], min_at_risk: int) -> list[HazardPoint]:
    """The binning as it was (one scan of every point per bin), kept as the reference."""
    ids: list[int] = []
    current, acc = 0, 0
    threshold = max(min_at_risk, 1e-300)
    for point in points:
        ids.append(current)
        acc += point.at_risk
        if acc >= threshold:
            current, acc = current + 1, 0
    if ids and acc > 0 and ids[-1] > 0:
        last = ids[-1]
        ids = [i - 1 if i == last else i for i in ids]
    for bin_id in set(ids):
        members = [p for p, i in zip(points, ids, strict=True) if i == bin_id]
        events = sum(p.events for p in members)
        at_risk = sum(p.at_risk for p in members)
        for p in members:
            p.bin_start, p.bin_end = members[0].x, members[-1].x
            p.bin_events, p.bin_at_risk = events, at_risk
    return points


def random_points(rng: random.Random, n: int) -> list[HazardPoint]:
    x = 0
    points = []
    for _ in range(n):
        x += rng.choice([1, 1, 1, 2, 5])
        at_risk = rng.choice([0, 1, 2, 3, 10, 40, 100])
        points.append(HazardPoint(x=x, value=rng.random(), events=rng.randint(0, at_risk),
                                  at_risk=at_risk))
    return points


def as_tuples(points: list[HazardPoint]) -> list[tuple]:
    return [(p.x, p.value, p.events, p.at_risk, p.bin_start, p.bin_end, p.bin_events,
             p.bin_at_risk) for p in points]


@pytest.mark.parametrize("seed", range(40))
def test_one_pass_binning_equals_the_reference_on_random_curves(seed: int) -> None:
    rng = random.Random(seed)
    points = random_points(rng, rng.randint(0, 60))
    min_at_risk = rng.choice([0, 1, 5, 30, 200])
    fast = with_bins([HazardPoint(p.x, p.value, p.events, p.at_risk) for p in points],
                     min_at_risk)
    slow = reference_with_bins(points, min_at_risk)
    assert as_tuples(fast) == as_tuples(slow)


def best_seconds(fn: Callable[[], Any], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.process_time()
        fn()
        best = min(best, time.process_time() - began)
    return best


def long_curve(n: int) -> list[HazardPoint]:
    """Two trajectories' worth of a long curve: 2 turns at risk at every clock value."""
    return [HazardPoint(x=i, value=0.1, events=i % 7 == 0, at_risk=2) for i in range(n)]


def test_binning_grows_linearly_with_the_curve() -> None:
    n = 5000
    small = best_seconds(lambda: with_bins(long_curve(n), 30))
    large = best_seconds(lambda: with_bins(long_curve(4 * n), 30))
    assert large / max(small, 1e-4) < 6, (small, large)


def hazard_rows(n: int) -> pd.DataFrame:
    """Rows of :func:`analyses.descriptive.hazard_curves` for a curve ``h`` of ``n`` values
    and a short curve ``rho``, listed in reverse order."""
    xs = list(range(n))[::-1]
    return pd.concat([
        pd.DataFrame({"run": "r", "hazard": "h", "x": xs, "value": 0.5,
                      "events": [x % 2 for x in xs], "at_risk": 2}),
        pd.DataFrame({"run": "r", "hazard": "rho", "x": [1, 2, 3], "value": 0.25,
                      "events": [1, 0, 0], "at_risk": [4, 3, 1]}),
    ], ignore_index=True)


def test_a_short_curve_keeps_every_clock_value() -> None:
    curves, notes = run_curves("r", hazard_rows(100), min_at_risk=30)
    assert [p.x for p in curves["h"]] == list(range(100))
    assert sum(p.events for p in curves["h"]) == 50
    assert [p.x for p in curves["rho"]] == [1, 2, 3]
    assert {(p.bin_start, p.bin_end, p.bin_at_risk) for p in curves["rho"]} == {(1, 3, 8)}
    assert notes == []


def test_a_long_curve_keeps_one_point_per_bin_and_says_so() -> None:
    n = MAX_POINTS + 1000
    curves, notes = run_curves("r", hazard_rows(n), min_at_risk=30)
    h = curves["h"]
    # 2 turns at risk per value: 15 values a bin, the last bin (too small) joined to the one
    # before
    assert len(h) == n // 15
    assert [p.x for p in h] == [p.bin_start for p in h] == sorted(p.x for p in h)
    assert sum(p.at_risk for p in h) == 2 * n
    assert sum(p.events for p in h) == n // 2
    assert all(p.at_risk == p.bin_at_risk and p.events == p.bin_events for p in h)
    assert h[-1].bin_end == n - 1
    assert len(curves["rho"]) == 3
    assert notes == [f"run r: the hazard curves h ({n:,} values) list one point per bin of at "
                     f"least 30 turns at risk (more than {MAX_POINTS:,} clock values)"]


def test_per_bin_points_carry_the_bins_of_the_full_curve() -> None:
    rng = random.Random(7)
    points = with_bins(random_points(rng, 300), 30)
    summary = per_bin(points)
    full = {(p.bin_start, p.bin_end, p.bin_events, p.bin_at_risk) for p in points}
    assert {(p.bin_start, p.bin_end, p.bin_events, p.bin_at_risk) for p in summary} == full
    assert len(summary) == len(full)
    # a bin's points share its value (the bin's rate); the summary keeps its first point's
    first_value = {}
    for p in points:
        first_value.setdefault(p.bin_start, p.value)
    assert [p.value for p in summary] == [first_value[p.x] for p in summary]


@pytest.mark.parametrize("seed", range(60))
def test_per_bin_from_the_columns_equals_per_bin_of_every_point(seed: int) -> None:
    """A long curve's summary straight from its columns is the one of its full points."""
    rng = random.Random(seed)
    points = random_points(rng, rng.choice([0, 1, 2, rng.randint(3, 400)]))
    if rng.random() < 0.2:   # trailing values without turns at risk
        points += [HazardPoint(x=(points[-1].x if points else 0) + i + 1, value=0.0, events=0,
                               at_risk=0) for i in range(rng.randint(1, 3))]
    min_at_risk = rng.choice([0, 1, 5, 30, 200])
    part = pd.DataFrame({"x": [p.x for p in points], "value": [p.value for p in points],
                         "events": [p.events for p in points],
                         "at_risk": [p.at_risk for p in points]},
                        columns=["x", "value", "events", "at_risk"]).sample(frac=1.0,
                                                                            random_state=seed)
    expected = per_bin(curve_points(part, min_at_risk))
    assert as_tuples(curve_per_bin(part, min_at_risk)) == as_tuples(expected)


def write_long(path: Path, n_turns: int) -> Path:
    """Two tasks of one sample each, ``n_turns`` turns each, every seventh an error."""
    lines = []
    for task in ("a", "b"):
        turns: list[dict[str, Any]] = []
        for i in range(n_turns):
            turn: dict[str, Any] = {"action": f"act {i % 17}", "observation": f"obs {i % 13}"}
            if i % 7 == 3:
                turn.update(error="tool_error", observation="Error: failed")
            turns.append(turn)
        lines.append(json.dumps({"task_id": task, "sample": 0, "success": task == "a",
                                 "turns": turns}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_analyze_of_long_trajectories_writes_binned_curves(tmp_path: Path) -> None:
    data = write_long(tmp_path / "long.jsonl", 3 * MAX_POINTS)
    out = tmp_path / "out.json"
    result = run_cli("analyze", str(data), "--json", str(out), "--n-boot", "0")
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    h = report["runs"]["long"]["hazards"]["h"]
    assert 0 < len(h) <= MAX_POINTS
    assert all(p["x"] == p["bin_start"] and p["at_risk"] == p["bin_at_risk"] for p in h)
    assert any("list one point per bin" in note for note in report["notes"])


# ------------------------------------------------------------------------------------------
# --by with many groups


def test_reported_groups_are_the_largest_and_all_under_the_cap() -> None:
    order = ["a", "b", "c", "d"]
    sizes = {"a": 1, "b": 5, "c": 5, "d": 3}
    assert reported_values(sizes, order, cap=2) == {"b", "c"}
    assert reported_values(sizes, order, cap=3) == {"b", "c", "d"}
    assert reported_values({"a": 2, "b": 2, "c": 2}, ["a", "b", "c"], cap=2) == {"a", "b"}
    assert reported_values(sizes, order, cap=4) == set(order)
    assert reported_values(sizes, order, cap=0) == set(order)
    assert MAX_GROUP_REPORTS == 20


def write_envs(path: Path, n_envs: int, seed: int) -> Path:
    """One task per environment ``envNN/task``; environment i has i + 2 samples."""
    rng = random.Random(seed)
    lines = []
    for env in range(n_envs):
        for sample in range(env + 2):
            turns = [{"action": f"move {t}", "observation": f"obs {t}",
                      **({"error": "invalid_action"} if rng.random() < 0.3 else {})}
                     for t in range(rng.randint(2, 6))]
            lines.append(json.dumps({"task_id": f"env{env:02d}/task", "sample": sample,
                                     "success": rng.random() < 0.5, "turns": turns}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_by_env_above_the_cap_reports_the_largest_groups_and_a_row_for_each(
        tmp_path: Path) -> None:
    base = write_envs(tmp_path / "base.jsonl", 6, seed=1)
    out = tmp_path / "out.json"
    result = run_cli("analyze", str(base), "--by", "env", "--max-groups", "3", "--n-boot", "0",
                     "--json", str(out))
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    full = [g["value"] for g in report["groups"] if g["report"] is not None]
    assert full == ["env03", "env04", "env05"]  # the three with the most trajectories
    assert [r["value"] for r in report["group_summary"]] == [f"env{i:02d}" for i in range(6)]
    rows = {r["value"]: r for r in report["group_summary"]}
    assert rows["env00"]["n_trajectories"] == {"base": 2}
    assert rows["env00"]["problem"].startswith("not reported in detail: only the 3 largest")
    note = ("6 groups by env: only the 3 largest (by trajectories) get a full report, the other "
            "3 a row of the table; --max-groups 0 reports every group")
    assert report["notes"] == [note]
    assert " ".join(note.split()) in " ".join(result.output.split())  # said on the terminal


def test_by_env_under_the_cap_reports_every_group(tmp_path: Path) -> None:
    base = write_envs(tmp_path / "base.jsonl", 3, seed=2)
    out = tmp_path / "out.json"
    result = run_cli("analyze", str(base), "--by", "env", "--n-boot", "0", "--json", str(out),
                     "--quiet")
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert all(g["report"] is not None for g in report["groups"]) and report["notes"] == []


def test_a_negative_group_cap_is_refused_in_one_line(tmp_path: Path) -> None:
    base = write_envs(tmp_path / "base.jsonl", 2, seed=3)
    result = run_cli("analyze", str(base), "--by", "env", "--max-groups", "-1")
    assert result.exit_code != 0
    assert "--max-groups: give 0 (every group) or more, got -1" in result.output


# ------------------------------------------------------------------------------------------
# analyze of long trajectories: the model curve and the hazard binning


def analyze_cpu_seconds(workdir: Path, n_turns: int) -> float:
    """CPU seconds of ``recovery analyze --json`` (the library face, defaults: 200 bootstrap
    resamples, 5 strata) of two trajectories of ``n_turns`` turns."""
    from analyses.report.analyze import AnalyzeConfig, analyze

    data = write_long(workdir / f"long{n_turns}.jsonl", n_turns)
    began = time.process_time()
    analyze(AnalyzeConfig(files=[data], json_out=workdir / f"long{n_turns}.json"))
    return time.process_time() - began


def test_analyze_cost_grows_about_linearly_with_the_turns(tmp_path: Path) -> None:
    analyze_cpu_seconds(tmp_path, 100)   # imports and first calls
    small = analyze_cpu_seconds(tmp_path, 5000)
    large = analyze_cpu_seconds(tmp_path, 20000)
    assert large / small < 6, (small, large)


@pytest.mark.slow
def test_analyze_of_two_80k_turn_trajectories_takes_under_8_cpu_seconds(tmp_path: Path) -> None:
    """The bound of the hardening round (under 10 s), in CPU seconds so that a loaded machine
    does not fail it; it took 10 to 13 s of CPU before the model curve skipped its FFTs."""
    analyze_cpu_seconds(tmp_path, 100)
    spent = analyze_cpu_seconds(tmp_path, 80000)
    assert spent < 8, spent
    assert json.loads((tmp_path / "long80000.json").read_text())["runs"]["long80000"]
