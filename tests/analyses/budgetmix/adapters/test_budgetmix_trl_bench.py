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
