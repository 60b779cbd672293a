"""Crashes: an episode whose harness failed and that holds no turn is left out and counted."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_support import run_cli


def tau_records(n_tasks: int, crashed: set[int], succeed: set[int]) -> list[dict]:
    out = []
    for i in range(n_tasks):
        if i in crashed:
            out.append({"task_id": i, "trial": 0, "reward": 0.0, "traj": [],
                        "info": {"error": "litellm.RateLimitError: quota exceeded"}})
            continue
        traj = [{"role": "system", "content": "policy"}, {"role": "user", "content": "help"},
                {"role": "assistant", "content": "done" if i in succeed else "sorry"},
                {"role": "user", "content": "thanks"}]
        out.append({"task_id": i, "trial": 0, "reward": 1.0 if i in succeed else 0.0,
                    "traj": traj, "info": {}})
    return out


def test_a_crashed_tau_bench_record_is_a_crash_left_out_and_counted(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    # a: 30 of 60 tasks crashed; of the rest half succeed. b: no crash, half succeed.
    a.write_text(json.dumps(tau_records(60, set(range(30)), set(range(30, 45)))))
    b.write_text(json.dumps(tau_records(60, set(), set(range(0, 60, 2)))))
    out = tmp_path / "r.json"
    result = run_cli("analyze", a, b, "--baseline", "a", "--n-boot", "50", "--json", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    qa = data["data_quality"]["a"]
    assert qa["end_reasons"]["crash"] == 30 and qa["end_reasons"]["failure"] == 15
    assert data["runs"]["a"]["n_trajectories"] == 30        # the crashed ones are left out
    assert any("30 of 60 trajectories (50.0%) crashed" in w for w in data["data_warnings"])
    headline = data["headline"][0]
    assert "crash rates differ: a 30 of 60, b 0 of 60 (left out of every number)" in headline


def test_a_crash_with_turns_is_flagged_but_kept(tmp_path: Path) -> None:
    records = tau_records(3, set(), {0})
    records[1]["info"] = {"error": "timeout after the episode"}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(records))
    out = tmp_path / "r.json"
    result = run_cli("analyze", path, "--n-boot", "0", "--json", out)
    assert result.exit_code == 0, result.output
    quality = json.loads(out.read_text())["data_quality"]["t"]
    assert quality["end_reasons"]["crash"] == 0 and quality["n_trajectories"] == 3
