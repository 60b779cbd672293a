"""The ``prm`` command line: train, score, eval, export-trl; DDP through torchrun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_recovery_cli.prm import main
from recovery.store import open_store

TINY = ["--backbone", "tiny", "--vocab-size", "320", "--hidden-size", "32", "--num-layers", "2", "--num-heads", "2",
        "--intermediate-size", "64", "--max-length", "256", "--threads", "1", "--no-progress"]


@pytest.fixture
def store(sim_store, tmp_path) -> Path:
    target = tmp_path / "store.duckdb"
    shutil.copy(sim_store, target)
    return target


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_help_lists_the_commands():
    output = _invoke("--help")
    for name in ("train", "score", "eval", "export-trl"):
        assert name in output


def test_baseline_train_score_eval_and_export(store, tmp_path):
    out = tmp_path / "sk"
    _invoke("train", "--store", str(store), "--out", str(out), "--backbone", "sklearn",
            "--labels", "recovery")
    output = _invoke("score", "--store", str(store), "--model", str(out), "--name", "tfidf")
    assert "as model 'tfidf'" in output
    opened = open_store(store, read_only=True)
    n_scores, n_turns = opened.con.execute(
        "SELECT (SELECT count(*) FROM step_scores WHERE model = 'tfidf'), "
        "(SELECT count(*) FROM turns)").fetchone()
    opened.close()
    assert n_scores == n_turns
    report_path = tmp_path / "eval.json"
    output = _invoke("eval", "--store", str(store), "--model", str(out), "--split", "all",
                     "--ks", "1,2", "--json", str(report_path))
    assert "step AUROC" in output and "Best-of-2" in output
    report = json.loads(report_path.read_text())
    assert report["split"] == "all" and [r["k"] for r in report["best_of_k"]] == [1, 2]
    export = tmp_path / "trl.jsonl"
    output = _invoke("export-trl", "--store", str(store), "--out", str(export))
    assert len(export.read_text().splitlines()) == 96 and "96 trajectories" in output


def test_neural_train_from_the_command_line(store, tmp_path):
    out = tmp_path / "tiny"
    output = _invoke("train", "--store", str(store), "--out", str(out), "--epochs", "1",
                     "--batch-tokens", "4096", "--labels", "outcome", *TINY)
    assert "saved" in output and (out / "model.safetensors").exists()
    spec = json.loads((out / "prm_config.json").read_text())
    assert spec["labels"] == "outcome" and spec["tiny"]["hidden_size"] == 32


def test_bad_input_gives_a_clear_error(store, tmp_path):
    result = CliRunner().invoke(main, ["train", "--store", str(tmp_path / "missing.duckdb"),
                                       "--out", str(tmp_path / "x")])
    assert result.exit_code != 0 and "does not exist" in result.output


@pytest.mark.slow
def test_ddp_two_cpu_processes_train_and_save_one_model(store, tmp_path):
    """torchrun --nproc_per_node=2 (gloo) trains and rank 0 alone writes the model."""
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node=2", "-m", "agent_recovery_cli.prm", "train", "--store", str(store),
               "--out", str(out), "--epochs", "1", "--batch-tokens", "2048", "--device", "cpu",
               "--save-every", "5", *TINY]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("saved ") == 1  # rank 0 only
    assert "x2" in done.stdout
    assert (out / "model.safetensors").exists()
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["finished"] and summary["steps"] == summary["total_steps"] > 0
    checkpoint = sorted((out / "checkpoints").iterdir())[-1]
    assert {p.name for p in checkpoint.glob("rng_rank*.safetensors")} == {
        "rng_rank0.safetensors", "rng_rank1.safetensors"}
    log = (out / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in log if "loss" in json.loads(line)]
    assert steps == sorted(set(steps))  # one writer


def test_default_backbone_is_structured_and_a_log_only_folder_is_explained(store, tmp_path):
    """prm train's default is the structured PRM (no --max-length warning, seconds); a folder
    that a stopped run left holding only metrics.jsonl is named as such and started afresh."""
    out = tmp_path / "killed"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 0.7}\n')
    output = _invoke("train", "--store", str(store), "--out", str(out), "--labels", "outcome")
    assert "holds only metrics.jsonl" in output and "stopped before it saved" in output
    assert "--max-length" not in output and "structured PRM" in output
    assert (out / "structured.json").exists() and not (out / "metrics.jsonl").exists()
