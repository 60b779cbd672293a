"""bench/prm_gpu.py: a clear stop without CUDA, and its code checked on the CPU (--smoke)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "prm_gpu.py"


def test_without_cuda_it_stops_with_a_message(monkeypatch, capsys):
    import importlib.util

    import torch

    if torch.cuda.is_available():
        pytest.skip("the machine has a GPU")
    spec = importlib.util.spec_from_file_location("prm_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "prm_gpu", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    monkeypatch.setattr(sys, "argv", [str(SCRIPT)])
    assert module.main() == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "--smoke" in err


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
