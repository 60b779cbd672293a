"""``bench/budgetmix_trl.py --quick`` end to end (TRL's GRPOTrainer, five modes, three seeds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]


@pytest.mark.slow
def test_the_quick_bench_trains_evaluates_and_analyses_every_mode(tmp_path):
    pytest.importorskip("trl")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "budgetmix_trl.py"), "--quick",
                           "--work", str(tmp_path)], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Pass@(1,T), mean over 3 seeds" in done.stdout
    data = json.loads((tmp_path / "results.json").read_text())
    modes = ["fixed:3", "fixed:12", "budgetmix", "budgetmix-adaptive", "budgetmix+prm"]
    assert [r["seed"] for r in data["results"]] == [0, 1, 2]
    for result in data["results"]:
        assert sorted(result["pass_at_1"]) == sorted(modes)
        for mode in modes:
            assert set(result["pass_at_1"][mode]) == {"3", "6", "12"}
            assert (tmp_path / f"seed-{result['seed']}" / f"{mode.replace(':', '-')}.jsonl").exists()
        assert sum(result["adaptive_schedule"].values()) == pytest.approx(1.0)


def test_resume_keeps_only_modes_with_rollouts_policy_and_record(tmp_path):
    """A mode counts as finished only when its rollouts, saved policy and record all exist."""
    import json

    from bench.budgetmix_trl import finished_mode

    record = {"wall_s": 5.0, "cpu_s": 4.0, "p_fast": {"3": 0.5}, "train_log": [{"loss": 1.0}]}
    (tmp_path / "mode-budgetmix-prm.json").write_text(json.dumps(record))
    assert finished_mode(tmp_path, "budgetmix+prm") is None  # no rollouts, no policy
    (tmp_path / "budgetmix+prm.jsonl").write_text("")
    assert finished_mode(tmp_path, "budgetmix+prm") is None  # no saved policy
    (tmp_path / "policies" / "budgetmix-prm").mkdir(parents=True)
    assert finished_mode(tmp_path, "budgetmix+prm") == (5.0, 4.0, {"3": 0.5}, [{"loss": 1.0}])
    assert finished_mode(tmp_path, "fixed:3") is None
