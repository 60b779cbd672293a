"""The frozen kind through the command line, fast: the code path of the MiniLM test.

``test_pretrained.py``'s MiniLM test (slow: about 100 s on 2 cores) trains a frozen ternary head
with ``prm train``, scores with the loaded model and cross-validates with ``prm cv``. This runs
the same commands and checks over a tiny local transformers folder as the frozen backbone;
only the packaged weights (their loading and the causal mask, covered by the fast
``test_minilm_loads_offline_and_a_turn_never_sees_later_turns``) are left to the slow test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from agent_recovery_cli.prm import main


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer Qwen2 with its tokenizer, saved as a transformers folder."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from prm.data.tokenize import train_tokenizer

    lm = tmp_path_factory.mktemp("frozen-lm") / "lm"
    tokenizer = train_tokenizer(["Action: lookup(id=1)\nObservation: record 1 found"] * 5,
                                vocab_size=280)
    tokenizer.save_pretrained(lm)
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=32,
                                 intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)
                     ).save_pretrained(lm)
    return lm


def test_frozen_head_trains_scores_and_cross_validates_ternary(ternary_store: Path,
                                                               tiny_lm: Path,
                                                               tmp_path: Path) -> None:
    from prm.data.examples import load_step_examples
    from prm.kinds import load_model
    from recovery.store import open_store

    common = ["--store", str(ternary_store), "--labels", "data", "--backbone", str(tiny_lm),
              "--mode", "frozen", "--threads", "1", "--no-progress", "--max-length", "256"]
    out = tmp_path / "frozen"
    result = CliRunner().invoke(main, ["train", "--out", str(out), *common])
    assert result.exit_code == 0, result.output
    spec = json.loads((out / "prm_config.json").read_text())
    assert (spec["mode"], spec["head"]) == ("frozen", "ternary")
    assert (out / "model.safetensors").stat().st_size < 100_000  # the head alone
    store = open_store(ternary_store, read_only=True)
    examples = load_step_examples(store.con, "data")
    store.close()
    scores = load_model(out, device="cpu").predict_steps(examples[:4])
    assert {"score", "p_neutral"} <= set(scores.columns)
    assert scores["score"].between(0, 1).all() and (scores["p_neutral"] <= scores["score"]).all()
    report_path = tmp_path / "cv.json"
    result = CliRunner().invoke(main, ["cv", *common, "--folds", "3", "--n-boot", "200",
                                       "--json", str(report_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(report_path.read_text())
    n_turns = sum(e.n_steps for e in examples)
    assert report["n_trajectories"] == len(examples) and report["n_steps"] == n_turns
    assert len(report["per_fold"]) == 3
    assert sum(f["n_steps"] for f in report["per_fold"]) == n_turns
    for name in ("step_acc", "first_error_acc", "step_auroc", "floor_all_correct_step_acc"):
        low, high = report["intervals"][name]
        assert 0.0 <= low <= report[name] <= high <= 1.0
    targets = np.array([x for e in examples for x in e.targets])
    assert report["floor_all_correct_step_acc"] == pytest.approx(np.mean(targets == 1.0))
    assert report["mode"] == "frozen" and report["head"] == "ternary"
