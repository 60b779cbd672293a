"""Fixtures of the PRM tests: small stores and a tiny, fast model configuration."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from recovery.schema import Trajectory, Turn


def tiny_train_config(store: Path, out: Path, **overrides: object):
    """A PRM configuration small enough to train in a second or two on one CPU core."""
    from prm.train import TrainConfig

    config = TrainConfig(
        store=store, out=out, backbone="tiny", labels="recovery", label_base="outcome", epochs=2,
        batch_tokens=2048, lr=3e-3, max_length=256, max_prompt_tokens=32, log_every=1,
        progress=False, vocab_size=320, hidden_size=32, num_layers=2, num_heads=2,
        intermediate_size=64, threads=1,
    )
    return dataclasses.replace(config, **overrides)


def make_trajectory(task: str, sample: int, outcomes: list[str], *, run: str = "p",
                    success: bool | None = None, prompt: str = "") -> Trajectory:
    """A trajectory from a list of turn kinds: ``ok``, ``err`` (a tool error) or ``label-``."""
    turns = []
    for i, kind in enumerate(outcomes):
        if kind == "err":
            turns.append(Turn(action=f"lookup(id={i})", observation="Error: record not found",
                              error="tool_error"))
        elif kind == "label-":
            turns.append(Turn(action=f"act({i})", observation=f"done {i}", label=-1.0))
        else:
            turns.append(Turn(action=f"lookup(id={i})", observation=f"record {i} found"))
    if success is None:
        success = outcomes[-1] == "ok"
    return Trajectory(run=run, task_id=task, turns=turns, success=success, sample=sample,
                      prompt=prompt)


@pytest.fixture(scope="session")
def sim_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB store of simulator runs: 16 tasks x 3 samples x 2 policies, budget 12."""
    from recovery.simulate import PRESETS, SimConfig
    from tests.conftest import simulated_store

    store = tmp_path_factory.mktemp("prm-sim") / "sim.duckdb"
    simulated_store(
        SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]}, n_tasks=16,
                  n_samples=3, budgets=[12], seed=5),
        store,
    ).close()
    return store


@pytest.fixture(scope="session")
def trained_tiny(sim_store: Path, tmp_path_factory: pytest.TempPathFactory):
    """A tiny neural PRM trained on :func:`sim_store` (shared by the scoring tests)."""
    from prm.train import train

    out = tmp_path_factory.mktemp("prm-model") / "tiny-prm"
    result = train(tiny_train_config(sim_store, out, epochs=1, batch_tokens=4096),
                   echo=lambda *_: None)
    return out, result


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """One torch thread: on a shared, busy machine several threads spin and run far slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


TRUTH_LABELS_SQL = (
    "UPDATE turns SET label = CASE "
    "WHEN json_extract_string(meta, '$.true_error') IS NOT NULL THEN -1.0 "
    "WHEN json_extract_string(meta, '$.event') = 'stall' THEN 0.0 ELSE 1.0 END"
)
"""Ternary step labels from the simulator's truth: -1 on a true error, 0 on a stall, +1 else
(as a human labeller would mark wrong, neutral and right steps)."""


@pytest.fixture(scope="session")
def ternary_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulator store with ternary labels: 12 tasks x 2 samples x 2 policies."""
    from recovery.simulate import PRESETS, SimConfig
    from tests.conftest import simulated_store

    store = tmp_path_factory.mktemp("prm-ternary") / "ternary.duckdb"
    opened = simulated_store(
        SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]}, n_tasks=12,
                  n_samples=2, budgets=[8], seed=3),
        store,
    )
    opened.con.execute(TRUTH_LABELS_SQL)
    opened.close()
    return store


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    """No model hub, and converted weights cached under the test session's own folder."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("PRM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "prm-cache"))
