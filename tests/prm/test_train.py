"""Training: loss falls, seeds reproduce, resume is exact, the baseline fits (prm.train)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from pathlib import Path

import pytest

from prm.data.windows import epoch_batches
from prm.neural.checkpoints import latest_checkpoint
from prm.neural.setup import lr_factor
from prm.train import train
from recovery.errors import InputProblem
from recovery.store import open_store
from tests.prm.conftest import make_trajectory, tiny_train_config


@pytest.fixture(scope="module")
def error_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 tasks x 2 samples whose error turns say so in their observation."""
    rng = random.Random(0)
    trajectories = [
        make_trajectory(f"t{task:02d}", sample,
                        [rng.choice(["ok", "ok", "err"]) for _ in range(5)] + ["ok"])
        for task in range(40) for sample in range(2)
    ]
    store = tmp_path_factory.mktemp("prm-train") / "errors.duckdb"
    con = open_store(store)
    con.ingest_trajectories(trajectories)
    con.close()
    return store


def _weights(directory: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def _quiet(*_: object) -> None:
    pass


def test_loss_falls(error_store, tmp_path):
    config = tiny_train_config(error_store, tmp_path / "m", labels="error", epochs=3,
                               batch_tokens=256)
    result = train(config, echo=_quiet)
    losses = [loss for _, loss in result.losses]
    assert result.finished and result.steps == result.total_steps == len(losses)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert first > 0.3  # an untrained head is near log(2) = 0.69
    assert last < 0.2 and last < first / 3
    assert 0 <= result.padding_fraction < 0.5
    log = [json.loads(line) for line in (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in log if "loss" in r] == pytest.approx(losses)
    validations = [r for r in log if "val_loss" in r]
    assert len(validations) == 3 and all("val_auroc" in r for r in validations)
    best = min(validations, key=lambda r: r["val_loss"])
    assert result.best_step == best["step"]  # the saved model is the best validation epoch
    for name in ("model.safetensors", "prm_config.json", "split.json", "tokenizer.json",
                 "train_summary.json"):
        assert (tmp_path / "m" / name).exists()


def test_resume_after_a_kill_ends_with_the_same_weights(error_store, tmp_path):
    import torch

    config = tiny_train_config(error_store, tmp_path / "straight", save_every=3, grad_accum=2,
                               batch_tokens=256, keep_best=False)
    straight = train(config, echo=_quiet)
    assert straight.total_steps > 6
    killed = train(dataclasses.replace(config, out=tmp_path / "killed", stop_after=5),
                   echo=_quiet)
    assert not killed.finished and killed.steps == 5
    assert not (tmp_path / "killed" / "model.safetensors").exists()
    assert latest_checkpoint(tmp_path / "killed").name == "step-00000003"
    resumed = train(dataclasses.replace(config, out=tmp_path / "killed", resume=True),
                    echo=_quiet)
    assert resumed.finished and resumed.steps == straight.steps
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "killed")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    other_seed = train(dataclasses.replace(config, out=tmp_path / "seed1", seed=1, save_every=0),
                       echo=_quiet)
    assert other_seed.finished
    c = _weights(tmp_path / "seed1")
    assert not all(torch.equal(a[k], c[k]) for k in a if a[k].shape == c[k].shape)


def test_epoch_batches_cover_every_window_and_shard_across_ranks():
    lengths = [random.Random(i).randint(10, 200) for i in range(300)]
    batches = epoch_batches(lengths, 1000, seed=0, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(300))
    assert batches == epoch_batches(lengths, 1000, seed=0, epoch=0)
    assert batches != epoch_batches(lengths, 1000, seed=0, epoch=1)
    shards = [epoch_batches(lengths, 1000, 0, 0, world_size=2, rank=r) for r in (0, 1)]
    assert len(shards[0]) == len(shards[1])
    assert {i for s in shards for b in s for i in b} == set(range(300))
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    assert 1 - sum(lengths) / padded < 0.05  # length bucketing keeps padding small


def test_lr_schedule_warms_up_then_decays_to_zero():
    factors = [lr_factor(s, 100, 10, "cosine") for s in range(100)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(factors[9:]))
    assert lr_factor(100, 100, 10, "linear") == 0.0


def test_sklearn_backbone_trains_the_baseline(error_store, tmp_path):
    result = train(tiny_train_config(error_store, tmp_path / "sk", backbone="sklearn",
                                     labels="error"), echo=_quiet)
    assert result.kind == "tfidf" and result.n_train > 0
    assert (tmp_path / "sk" / "baseline.json").exists()
    assert (tmp_path / "sk" / "baseline.npz").exists()
    assert not (tmp_path / "sk" / "baseline.joblib").exists()  # no pickle
    spec = json.loads((tmp_path / "sk" / "prm_config.json").read_text())
    assert spec["kind"] == "sklearn"


def test_labels_with_no_target_are_refused_with_a_hint(error_store, tmp_path):
    # error_store has no process labels, so neither data nor advantage targets exist
    for labels, hint in (("data", "no process labels"), ("advantage", "--mc-rollouts")):
        with pytest.raises(InputProblem, match=hint):
            train(tiny_train_config(error_store, tmp_path / labels, backbone="sklearn",
                                    labels=labels))
        assert not (tmp_path / labels).exists()


def test_a_local_model_path_is_a_backbone(error_store, tmp_path):
    """Any local decoder checkpoint works: here a small Qwen2 causal LM saved to disk."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from prm.data.tokenize import STEP_TOKEN, train_tokenizer
    from prm.neural.folder import load_scorer

    tokenizer = train_tokenizer(["Action: lookup(id=1)\nObservation: record 1 found"] * 5,
                                vocab_size=280)
    tokenizer.save_pretrained(tmp_path / "lm")
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=32,
                                 intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)
                     ).save_pretrained(tmp_path / "lm")
    result = train(tiny_train_config(error_store, tmp_path / "m", backbone=str(tmp_path / "lm"),
                                     labels="error", epochs=1), echo=_quiet)
    assert result.finished and result.steps > 0
    loaded = load_scorer(tmp_path / "m")
    assert loaded.spec.backbone == str(tmp_path / "lm")
    assert loaded.tokenizer.convert_tokens_to_ids(STEP_TOKEN) is not None
    assert type(loaded.scorer.backbone).__name__ == "Qwen2Model"


def test_gradient_checkpointing_gives_the_same_training(error_store, tmp_path):
    import torch

    config = tiny_train_config(error_store, tmp_path / "plain", labels="error", epochs=1,
                               batch_tokens=512, keep_best=False)
    train(config, echo=_quiet)
    train(dataclasses.replace(config, out=tmp_path / "ckpt", gradient_checkpointing=True),
          echo=_quiet)
    a, b = _weights(tmp_path / "plain"), _weights(tmp_path / "ckpt")
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
