"""Checkpoint rollouts written during training: canonical JSONL with ``meta.step``, one file
per checkpoint, that ``recovery analyze --series`` orders and compares."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from analyses.budgetmix.adapters.checkpoints import (
    CheckpointWriter,
    checkpoint_run,
    trl_checkpoint_callback,
    write_checkpoint,
)
from recovery.schema import Trajectory, Turn

BUDGETS = (3, 6)


class FakePolicy:
    """A policy that gets better as training goes on: rollouts succeed more at later steps."""

    def __init__(self) -> None:
        self.step = 0
        self.calls = 0

    def rollout(self) -> list[Trajectory]:
        self.calls += 1
        rng = random.Random(self.step)
        p = min(0.2 + self.step / 100, 0.9)
        out = []
        for task in range(12):
            for budget in BUDGETS:
                for sample in range(2):
                    n = rng.randint(1, budget)
                    win = rng.random() < p
                    turns = [Turn(action=f"a{i}", observation="ok", done=win and i == n - 1)
                             for i in range(n)]
                    out.append(Trajectory(run="policy", task_id=f"t{task}", turns=turns,
                                          success=win, sample=sample, budget=budget,
                                          meta={"seed": 5}))
        return out


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_write_checkpoint_names_the_run_and_sets_meta_step(tmp_path):
    path = write_checkpoint(FakePolicy().rollout, 40, tmp_path, prefix="fixed-6")
    assert path == tmp_path / "fixed-6-40.jsonl"
    records = _records(path)
    assert len(records) == 12 * len(BUDGETS) * 2
    assert {r["run"] for r in records} == {"fixed-6-40"}
    assert all(r["meta"] == {"seed": 5, "step": 40} for r in records)
    assert {r["budget"] for r in records} == set(BUDGETS)


def test_writer_writes_at_zero_and_every_n_steps_once(tmp_path):
    policy = FakePolicy()
    writer = CheckpointWriter(policy.rollout, tmp_path, every=10)
    for step in [0, 0, *range(1, 31)]:
        policy.step = step
        writer.at_step(step)
    assert [p.name for p in writer.written] == [
        "ckpt-0.jsonl", "ckpt-10.jsonl", "ckpt-20.jsonl", "ckpt-30.jsonl"]
    assert policy.calls == 4


@pytest.mark.parametrize("kwargs", [{"every": 0}, {"every": 5, "prefix": "a/b"},
                                    {"every": 5, "prefix": ""}])
def test_bad_writer_settings_are_refused_at_once(tmp_path, kwargs):
    with pytest.raises(ValueError):
        CheckpointWriter(FakePolicy().rollout, tmp_path, **kwargs)
    with pytest.raises(ValueError):
        checkpoint_run("ckpt", -1)


def test_trl_callback_writes_at_train_begin_and_step_end(tmp_path):
    pytest.importorskip("transformers")
    policy = FakePolicy()
    writer = CheckpointWriter(policy.rollout, tmp_path, every=2, prefix="bm")
    callback = trl_checkpoint_callback(writer)
    callback.on_train_begin(None, SimpleNamespace(global_step=0), None)
    for step in (1, 2, 3, 4):
        callback.on_step_end(None, SimpleNamespace(global_step=step), None)
    assert [p.stem for p in writer.written] == ["bm-0", "bm-2", "bm-4"]


@pytest.mark.parametrize("key", ["run", "meta.step"])
def test_written_checkpoints_make_a_series(tmp_path, key):
    from agent_recovery_cli.recovery import main

    policy = FakePolicy()
    writer = CheckpointWriter(policy.rollout, tmp_path / "ckpts", every=30, prefix="bm")
    for step in (0, 30, 60):
        policy.step = step
        writer.at_step(step)
    out = tmp_path / "s.json"
    result = CliRunner().invoke(main, [
        "analyze", *map(str, writer.written), "--series", key, "--n-boot", "10",
        "--strata", "1", "--json", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["mode"] == "budgeted"
    assert [(p["run"], p["step"]) for p in report["series"]] == [
        ("bm-0", 0), ("bm-30", 30), ("bm-60", 60)]
    assert [c["t"] for c in report["series"][2]["pass_at_1"]] == list(BUDGETS)
