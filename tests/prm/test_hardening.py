"""What a model folder or a store cannot make the PRM commands do, and clear messages for
damaged files: no pickle is opened, remote code runs only with the user's flag, a missing
store is never created, and resume skips a damaged checkpoint."""

from __future__ import annotations

import dataclasses
import json
import pickle
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_recovery_cli.prm import main
from prm.train import train
from tests.prm.conftest import tiny_train_config


class _Payload:
    """Unpickling this creates the marker file: what a malicious baseline.joblib would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


def _no_traceback(result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output


@pytest.fixture
def store(sim_store, tmp_path) -> Path:
    target = tmp_path / "store.duckdb"
    shutil.copy(sim_store, target)
    return target


def test_a_pickled_baseline_is_refused_by_score_and_eval(store, tmp_path):
    from prm.spec import PRMSpec

    folder = tmp_path / "evil"
    folder.mkdir()
    marker = tmp_path / "pwned"
    (folder / "baseline.joblib").write_bytes(pickle.dumps(_Payload(marker)))
    PRMSpec(kind="sklearn", backbone="sklearn").save(folder)
    (folder / "split.json").write_text(json.dumps({"seed": 0, "fractions": [0.8, 0.1, 0.1],
                                                   "tasks": {}}))
    before = store.read_bytes()
    for command in (["score", "--store", str(store), "--model", str(folder), "--no-progress"],
                    ["eval", "--store", str(store), "--model", str(folder), "--split", "all"]):
        result = _run(*command)
        assert result.exit_code == 1, result.output
        assert "pickle" in result.output and "baseline.joblib" in result.output
        _no_traceback(result)
    assert not marker.exists()
    pickle.loads((folder / "baseline.joblib").read_bytes())  # the payload does work
    assert marker.exists()
    assert store.read_bytes() == before


def test_remote_code_only_with_the_users_flag(trained_tiny, store, tmp_path):
    model_dir, _ = trained_tiny
    folder = tmp_path / "asks"
    shutil.copytree(model_dir, folder)
    spec_path = folder / "prm_config.json"
    spec = json.loads(spec_path.read_text())
    spec_path.write_text(json.dumps({**spec, "trust_remote_code": True}))
    for command in ("score", "eval"):
        result = _run(command, "--store", str(store), "--model", str(folder))
        assert result.exit_code == 2, result.output
        assert "--trust-remote-code" in result.output and "prm_config.json" in result.output
        _no_traceback(result)
    result = _run("score", "--store", str(store), "--model", str(folder), "--trust-remote-code",
                  "--no-progress")
    assert result.exit_code == 0, result.output  # the user's flag lets it load


def test_a_config_with_custom_code_is_not_run_without_the_flag(trained_tiny, store, tmp_path):
    model_dir, _ = trained_tiny
    folder = tmp_path / "custom"
    shutil.copytree(model_dir, folder)
    marker = tmp_path / "ran"
    (folder / "backbone" / "evil.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n"
        "from transformers import Qwen2Config\nclass EvilConfig(Qwen2Config):\n"
        "    model_type = 'qwen2'\n"
    )
    config_path = folder / "backbone" / "config.json"
    config = json.loads(config_path.read_text())
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig"}
    config_path.write_text(json.dumps(config))
    result = _run("score", "--store", str(store), "--model", str(folder), "--no-progress")
    _no_traceback(result)
    assert not marker.exists()


def test_commands_never_create_a_missing_store(trained_tiny, tmp_path):
    model_dir, _ = trained_tiny
    missing = tmp_path / "typo.duckdb"
    for command in (["score", "--model", str(model_dir), "--no-progress"],
                    ["eval", "--model", str(model_dir)],
                    ["train", "--out", str(tmp_path / "out")],
                    ["cv", "--backbone", "sklearn"],
                    ["export-trl", "--out", str(tmp_path / "rows.jsonl")]):
        result = _run(command[0], "--store", str(missing), *command[1:])
        assert result.exit_code == 1, (command, result.output)
        assert "does not exist" in result.output and str(missing) in result.output
        _no_traceback(result)
        assert not missing.exists()


def test_a_file_that_is_not_a_store_and_a_missing_model_are_named(trained_tiny, store, tmp_path):
    model_dir, _ = trained_tiny
    not_a_store = tmp_path / "notes.duckdb"
    not_a_store.write_text("just some text\n")
    result = _run("score", "--store", str(not_a_store), "--model", str(model_dir))
    assert result.exit_code == 1 and str(not_a_store) in result.output
    _no_traceback(result)
    assert not_a_store.read_text() == "just some text\n"
    result = _run("score", "--store", str(store), "--model", str(tmp_path / "missing"))
    assert result.exit_code == 1 and "does not exist" in result.output
    assert "Errno" not in result.output
    _no_traceback(result)


def _damaged_copy(model_dir: Path, tmp_path: Path, name: str, change) -> Path:
    folder = tmp_path / name
    shutil.copytree(model_dir, folder)
    change(folder)
    return folder


@pytest.mark.parametrize("damage, named", [
    (lambda f: (f / "tokenizer.json").write_text("{ not json"), "tokenizer.json"),
    (lambda f: (f / "prm_config.json").write_text(
        json.dumps({**json.loads((f / "prm_config.json").read_text()), "surprise": 1})),
     "prm_config.json"),
    (lambda f: (f / "prm_config.json").write_text("{"), "prm_config.json"),
    (lambda f: (f / "model.safetensors").write_bytes(
        (f / "model.safetensors").read_bytes()[:1000]), "model.safetensors"),
])
def test_damaged_model_files_are_named(trained_tiny, store, tmp_path, damage, named):
    model_dir, _ = trained_tiny
    folder = _damaged_copy(model_dir, tmp_path, "damaged", damage)
    result = _run("score", "--store", str(store), "--model", str(folder), "--no-progress")
    assert result.exit_code == 1, result.output
    assert named in result.output
    _no_traceback(result)


def test_resume_skips_a_truncated_newest_checkpoint(sim_store, tmp_path):
    from prm.neural.checkpoints import checkpoints

    config = tiny_train_config(sim_store, tmp_path / "run", save_every=2, keep_checkpoints=3,
                               batch_tokens=1024, epochs=1, keep_best=False)
    killed = train(dataclasses.replace(config, stop_after=5), echo=lambda *_: None)
    assert not killed.finished
    found = checkpoints(tmp_path / "run")
    assert [c.name for c in found] == ["step-00000002", "step-00000004"]
    weights = found[-1] / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    lines: list[str] = []
    resumed = train(dataclasses.replace(config, resume=True), echo=lines.append)
    assert resumed.finished
    said = "\n".join(lines)
    assert "resuming from step-00000002" in said and "step-00000004" in said
    assert "model.safetensors" in said
    assert "resuming at step 2" in said


def test_resume_with_every_checkpoint_damaged_names_the_file(sim_store, tmp_path):
    from prm.neural.checkpoints import checkpoints
    from recovery.errors import InputProblem

    config = tiny_train_config(sim_store, tmp_path / "run", save_every=2, keep_checkpoints=1,
                               batch_tokens=1024, epochs=1, keep_best=False)
    train(dataclasses.replace(config, stop_after=3), echo=lambda *_: None)
    (only,) = checkpoints(tmp_path / "run")
    (only / "trainer_state.json").write_text("{ truncated")
    with pytest.raises(InputProblem, match=r"trainer_state\.json"):
        train(dataclasses.replace(config, resume=True), echo=lambda *_: None)
    result = _run("train", "--store", str(sim_store), "--out", str(tmp_path / "run"),
                  "--backbone", "tiny", "--resume", "--save-every", "2", "--no-progress", "--threads", "1")
    assert result.exit_code == 1 and "trainer_state.json" in result.output
    _no_traceback(result)
