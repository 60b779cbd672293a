"""The registry of PRM kinds: every kind keeps the same contract (fit -> save -> load ->
predict_steps), with the scores surviving the round trip exactly, in both settings."""

from __future__ import annotations

import pandas as pd
import pytest

from prm.kinds import KIND_NAMES, build, folder_kind, load_model, resolve_options
from prm.kinds.base import FitData
from recovery.errors import UsageProblem
from tests.prm.conftest import tiny_train_config


@pytest.fixture(scope="module")
def frozen_backbone(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny local transformers model folder for the frozen kind (no download)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from prm.data.tokenize import train_tokenizer

    folder = tmp_path_factory.mktemp("lm") / "lm"
    tokenizer = train_tokenizer(["Action: lookup(id=1)\nObservation: record 1 found"] * 5,
                                vocab_size=280)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer) + 1, hidden_size=32,
                                 intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)
                     ).save_pretrained(folder)
    return str(folder)


BACKBONES = {"structured": None, "tfidf": None, "neural": "tiny", "frozen": "lm"}


@pytest.mark.parametrize("setting", ["blind", "hindsight"])
@pytest.mark.parametrize("kind", KIND_NAMES)
def test_every_kind_round_trips_its_scores_exactly(kind, setting, sim_store, frozen_backbone,
                                                   tmp_path):
    from prm.data.examples import TaskSplit, load_step_examples
    from recovery.store import open_store

    backbone = frozen_backbone if BACKBONES[kind] == "lm" else BACKBONES[kind]
    config = tiny_train_config(sim_store, tmp_path / "fit", model_kind=kind, backbone=backbone,
                               setting=setting, labels="outcome", epochs=1,
                               batch_tokens=4096)
    with open_store(sim_store, read_only=True, must_exist=True) as store:
        examples = load_step_examples(store.con, "outcome", base="outcome")
    split = TaskSplit.make(examples, seed=0, fractions=(0.7, 0.15, 0.15))
    model = build(config, echo=lambda *_: None)
    assert model.name == kind
    assert model.fit(FitData(examples, split, store=sim_store)) is model  # reads the store
    model.save(tmp_path / "saved")
    assert folder_kind(tmp_path / "saved") == kind
    loaded = load_model(tmp_path / "saved", setting=setting, device="cpu")
    with open_store(sim_store, read_only=True, must_exist=True) as store:
        before = model.predict_steps(examples[:6], con=store.con)
        after = loaded.predict_steps(examples[:6], con=store.con)
    assert type(loaded) is type(model) and loaded.setting in (None, setting)
    assert len(before) == sum(e.n_steps for e in examples[:6])
    assert before["score"].between(0, 1).all()
    pd.testing.assert_frame_equal(before, after, check_exact=True)
    assert loaded.error_threshold == model.error_threshold


@pytest.mark.parametrize("old, kind", [("sklearn", "tfidf"), ("structured", "structured")])
def test_the_old_backbone_spelling_names_a_kind_with_one_note(old, kind, sim_store, tmp_path):
    notes: list[str] = []
    config = resolve_options(tiny_train_config(sim_store, tmp_path, backbone=old),
                             notes.append)
    assert config.model_kind == kind and config.backbone is None
    assert notes == [f"--backbone {old} is deprecated: use --model-kind {kind}"]
    assert resolve_options(tiny_train_config(sim_store, tmp_path, backbone=None),
                           notes.append).model_kind == "structured"
    assert resolve_options(tiny_train_config(sim_store, tmp_path, backbone="minilm"),
                           notes.append).model_kind == "frozen"
    assert resolve_options(tiny_train_config(sim_store, tmp_path, backbone="tiny"),
                           notes.append).model_kind == "neural"
    assert len(notes) == 1


@pytest.mark.parametrize("overrides", [
    {"model_kind": "structured", "backbone": "tiny"},
    {"model_kind": "neural", "mode": "frozen"},
    {"model_kind": "frozen", "mode": "lora"},
])
def test_options_a_kind_does_not_take_are_refused_on_one_line(overrides, sim_store, tmp_path):
    with pytest.raises(UsageProblem) as err:
        resolve_options(tiny_train_config(sim_store, tmp_path, **overrides))
    assert "\n" not in str(err.value)


def test_prm_train_takes_model_kind_and_the_old_spelling_with_a_note(sim_store, tmp_path):
    from click.testing import CliRunner

    from agent_recovery_cli.prm import main

    common = ["train", "--store", str(sim_store), "--labels", "outcome", "--label-base",
              "outcome", "--no-progress"]
    new = CliRunner().invoke(main, [*common, "--out", str(tmp_path / "a"), "--model-kind",
                                    "tfidf"], catch_exceptions=False)
    assert new.exit_code == 0, new.output
    assert "TF-IDF baseline" in new.stdout and "deprecated" not in new.stderr
    old = CliRunner().invoke(main, [*common, "--out", str(tmp_path / "b"), "--backbone",
                                    "sklearn"], catch_exceptions=False)
    assert old.exit_code == 0, old.output
    notes = [line for line in old.stderr.splitlines() if "deprecated" in line]
    assert notes == ["--backbone sklearn is deprecated: use --model-kind tfidf"]
    assert folder_kind(tmp_path / "a") == folder_kind(tmp_path / "b") == "tfidf"
    assert (tmp_path / "a" / "baseline.npz").read_bytes() == \
        (tmp_path / "b" / "baseline.npz").read_bytes()


def test_the_online_scorers_fit_through_the_registry(monkeypatch, tmp_path):
    from prm.kinds.structured import StructuredKind
    from prm.kinds.tfidf import TfidfKind
    from prm.online import StructuredStepScorer, TfidfStepScorer
    from tests.prm.conftest import make_trajectory

    fits: list[str] = []
    for cls in (StructuredKind, TfidfKind):
        def counted(self, data, fit=cls.fit):
            fits.append(self.name)
            return fit(self, data)

        monkeypatch.setattr(cls, "fit", counted)
    trajectories = [make_trajectory(f"q{i}", s, ["ok", "err"] if i % 2 else ["ok", "ok", "ok"])
                    for i in range(6) for s in range(2)]
    scorer = StructuredStepScorer(labels="outcome", setting="blind").fit(trajectories)
    tfidf = TfidfStepScorer(labels="outcome").fit(trajectories)
    assert fits == ["structured", "tfidf"] and scorer.n_fits == tfidf.n_fits == 1
    for scores in (scorer.score(trajectories[:2]), tfidf.score(trajectories[:2])):
        assert len(scores) == 6 and ((scores >= 0) & (scores <= 1)).all()
    tfidf.save(tmp_path / "tfidf")
    assert folder_kind(tmp_path / "tfidf") == "tfidf"
