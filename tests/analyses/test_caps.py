"""Step caps: episodes that ran out of turns are censored, from the data, detected, or given."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recovery.caps import capped_frame, detect_cap, parse_max_turns
from recovery.errors import UsageProblem
from tests.cli_support import run_cli


def balrog_folder(root: Path, episodes: list[tuple[int, bool]],
                  undone: tuple[int, ...] = ()) -> Path:
    """A BALROG submission with one environment and task: (steps, success) per episode; every
    episode says done = true, as BALROG writes it also when the step cap stopped it, except
    the episodes ``undone`` (by index), whose summary lacks ``done``."""
    task_dir = root / "nle" / "nle-task" / "maze"
    task_dir.mkdir(parents=True)
    for i, (steps, success) in enumerate(episodes):
        with (task_dir / f"maze_run_{i:02d}.csv").open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["Step", "Action", "Reasoning", "Observation", "Reward", "Done"])
            for step in range(steps):
                last = step == steps - 1
                writer.writerow([step, f"move {step % 3}", "", f"room {i}-{step}",
                                 1.0 if last and success else 0.0, last])
        summary = {"task": "nle-task/maze", "done": True, "num_steps": steps,
                   "episode_return": 1.0 if success else 0.0,
                   "progression": 1.0 if success else 0.0, "seed": i}
        if i in undone:
            del summary["done"]
        (task_dir / f"maze_run_{i:02d}.json").write_text(json.dumps(summary))
    (root / "nle" / "nle_summary.json").write_text(json.dumps({"episodes_played": len(episodes)}))
    return root


def test_a_spike_at_the_largest_turn_count_is_a_cap() -> None:
    n = np.array([10] * 6 + [4, 6, 9])
    ok = np.array([False] * 6 + [False, True, False])
    assert detect_cap(n, ok) == 10
    # tau-bench airline's shape: 7 failures at 30, at most one at 25-29
    n = np.array([30] * 7 + [28, 27, 25, 23, 23, 20])
    assert detect_cap(n, np.zeros(len(n), dtype=bool)) == 30
    # natural ends spread out: no cap
    assert detect_cap(np.array([12, 11, 12, 10, 12, 11, 11]), np.zeros(7, dtype=bool)) is None
    assert detect_cap(np.array([10, 10, 4]), np.array([False, True, False])) is None  # 1 < 3
    # every episode one turn long (single-step tasks): not a cap
    assert detect_cap(np.ones(30, dtype=int), np.arange(30) % 2 == 0) is None


def test_a_cap_nearly_every_failure_hits_is_detected() -> None:
    """29 of 30 episodes end at 80 turns without success: a cap, with one shorter episode."""
    n = np.array([80] * 29 + [40])
    assert detect_cap(n, np.arange(30) == 29) == 80
    assert detect_cap(n, np.zeros(30, dtype=bool)) == 80
    traj = pd.DataFrame({"run": ["x"] * 30 + ["y"] * 12, "task_id": "game/t",
                         "success": [False] * 29 + [True] + [False] * 6 + [True] * 6,
                         "n_turns": [80] * 29 + [40] + [80] * 6 + list(range(30, 42)[:6]),
                         "end_reason": ["failure"] * 29 + ["success"] + ["failure"] * 6
                         + ["success"] * 6})
    capped = capped_frame(traj)
    assert int((capped.frame["end_reason"] == "budget").sum()) == 35
    assert [(c.turns, c.n_capped, c.n_failures) for c in capped.by_run["x"]] == [(80, 29, 29)]


def test_caps_come_from_the_flag_then_the_data_then_detection() -> None:
    traj = pd.DataFrame({
        "run": ["a"] * 6 + ["b"] * 4 + ["c"] * 3,
        "task_id": ["ga/t"] * 6 + ["gb/t"] * 4 + ["gc/t"] * 3,  # an environment each
        "success": [False, False, False, True, False, True, False, False, True, False,
                    True, False, False],
        "n_turns": [10, 10, 10, 3, 2, 4, 7, 7, 7, 5, 3, 4, 5],
        "end_reason": ["failure"] * 3 + ["success", "failure", "success"]
                      + ["budget", "budget", "success", "failure"]
                      + ["success", "failure", "failure"],
    })
    capped = capped_frame(traj, {"c": 5})
    caps = {run: [(c.turns, c.source, c.n_capped) for c in cs]
            for run, cs in capped.by_run.items()}
    assert caps == {"a": [(10, "detected", 3)], "b": [(7, "data", 2)],
                    "c": [(5, "--max-turns", 1)]}
    assert capped.frame["end_reason"].tolist() == (
        ["budget"] * 3 + ["success", "failure", "success"]
        + ["budget", "budget", "success", "failure"] + ["success", "failure", "budget"])
    with pytest.raises(UsageProblem, match="not among the runs"):
        capped_frame(traj, {"zz": 3})


def test_max_turns_values_are_parsed_strictly() -> None:
    assert parse_max_turns(["rl=100", "a=b=5"]) == {"rl": 100, "a=b": 5}
    for bad in ("rl", "rl=", "=5", "rl=0", "rl=2.5", "rl=true"):
        with pytest.raises(UsageProblem, match="RUN=N"):
            parse_max_turns([bad])


def test_a_balrog_folder_whose_failures_stop_at_the_cap(tmp_path: Path) -> None:
    folder = balrog_folder(tmp_path / "gpt", [(10, False)] * 6 + [(4, False), (6, True),
                                                                     (9, False)])
    out = tmp_path / "r.json"
    result = run_cli("analyze", folder, "--n-boot", "0", "--json", out)
    assert result.exit_code == 0, result.output
    quality = json.loads(out.read_text())["data_quality"]["gpt"]
    assert quality["step_cap"] == 10 and quality["step_cap_source"] == "detected"
    assert quality["end_reasons"]["budget"] == 6 and quality["end_reasons"]["failure"] == 2
    table = " ".join(" ".join(line.split()) for line in result.stdout.splitlines())
    assert "step cap 10 turns (detected: 6 of 8 unsuccessful episodes end there)" in table
    # the user's word wins
    out2 = tmp_path / "r2.json"
    result = run_cli("analyze", folder, "--n-boot", "0", "--json", out2, "--max-turns", "gpt=9")
    assert result.exit_code == 0, result.output
    quality = json.loads(out2.read_text())["data_quality"]["gpt"]
    assert quality["step_cap_source"] == "--max-turns"
    assert quality["end_reasons"]["budget"] == 7           # the 9-step failure too
    result = run_cli("analyze", folder, "--n-boot", "0", "--max-turns", "gpt=ten")
    assert result.exit_code == 2 and "RUN=N" in result.output


def test_censoring_at_the_cap_changes_the_hazards_not_the_success(tmp_path: Path) -> None:
    """A death at turn 10 and a censoring at turn 10 give different failure hazards."""
    from analyses.report import ReportOptions, report_from_frames

    traj = pd.DataFrame({
        "traj_id": [f"j{i}" for i in range(9)], "run": "a", "task_id": [f"t{i % 3}" for i in
                                                                           range(9)],
        "sample": [i // 3 for i in range(9)], "budget": np.nan,
        "success": [False] * 6 + [True, False, True], "n_turns": [10] * 6 + [4, 3, 6],
        "success_turn": [np.nan] * 6 + [4.0, np.nan, 6.0], "end_reason": ["failure"] * 6
        + ["success", "failure", "success"],
    })
    flags = pd.DataFrame({"traj_id": [], "t": [], "is_error": [], "error_kind": []})
    capped = report_from_frames(traj, flags, ReportOptions(n_boot=0, strata=1))
    plain = report_from_frames(traj, flags, ReportOptions(n_boot=0, strata=1,
                                                          max_turns={"a": 11}))
    assert capped.data_quality["a"].step_cap == 10
    assert (capped.runs["a"].pass_at(1, None) == plain.runs["a"].pass_at(1, None))
    f_capped = sum(p.events for p in capped.runs["a"].hazards["f"])
    f_plain = sum(p.events for p in plain.runs["a"].hazards["f"])
    assert f_capped == 1 and f_plain == 7       # six deaths at turn 10 became censorings


def test_a_balrog_folder_where_some_capped_episodes_lack_done(tmp_path: Path) -> None:
    """Two of eight episodes at the cap have no done: every one of the eight is censored, and
    the data-quality numbers say so together."""
    episodes = [(10, False)] * 8 + [(4, False), (6, True), (9, False), (3, True)]
    folder = balrog_folder(tmp_path / "gpt", episodes, undone=(0, 5))
    out = tmp_path / "r.json"
    result = run_cli("analyze", folder, "--n-boot", "0", "--json", out)
    assert result.exit_code == 0, result.output
    quality = json.loads(out.read_text())["data_quality"]["gpt"]
    assert quality["step_cap"] == 10 and quality["step_cap_source"] == "data"
    assert quality["end_reasons"]["budget"] == quality["n_budget_hit"] == 8
    assert quality["end_reasons"]["failure"] == 2
    table = " ".join(" ".join(line.split()) for line in result.stdout.splitlines())
    assert "10 turns (written in the data: 8 of 10 unsuccessful episodes end there)" in table
