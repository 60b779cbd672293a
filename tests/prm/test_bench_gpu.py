"""bench/prm_gpu.py: a clear stop without CUDA, and its code checked on the CPU (--smoke)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "prm_gpu.py"


def test_without_cuda_it_stops_with_a_message():
    import torch

    if torch.cuda.is_available():
        pytest.skip("the machine has a GPU")
    run = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2
    assert "needs a CUDA GPU" in run.stderr and "--smoke" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.slow
def test_smoke_runs_every_part_on_the_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--json", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "packed documents are kept apart" in run.stdout
    names = [m["name"] for m in json.loads(out.read_text())]
    assert names == ["prm train smollm2 full", "prm train smollm2 lora",
                     "Qwen2-0.5B shape, packed"]
