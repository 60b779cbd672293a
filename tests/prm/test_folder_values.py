"""Every value a scorer uses is checked when a model folder is loaded: the structured model's
feature names and numbers, ``.npy`` headers before any array is allocated, a tokenizer of the
kind the toolkit writes, deep JSON; and the structured PRM on labels that leave an inner fold
without a class, and on a store without turns."""

from __future__ import annotations

import json
import random
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from recovery.errors import InputProblem, UsageProblem


def _run(*args: str):
    from agent_recovery_cli.prm import main

    return CliRunner().invoke(main, list(args))


def _one_line(result, exit_code: int, *fragments: str) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    assert "Traceback" not in result.output
    assert result.exit_code == exit_code, result.output
    assert len(result.output.strip().splitlines()) <= 4, result.output
    for fragment in fragments:
        assert fragment in result.output, (fragment, result.output)


def _neutral_in_one_task_store(path: Path) -> Path:
    """Ternary labels (-1 / 0 / +1) whose neutral steps are all in one task: an inner fold
    that holds that task out sees two classes."""
    from recovery.schema import Trajectory, Turn
    from recovery.store import open_store

    rng = random.Random(0)
    trajectories = []
    for q in range(9):
        for k in range(2):
            turns = []
            for i in range(4):
                label = 0.0 if (q == 0 and i == 1) else rng.choice([1.0, 1.0, -1.0])
                turns.append(Turn(action=f"lookup(id={i})",
                                  observation="Error: not found" if label < 0 else f"rec {i}",
                                  label=label))
            trajectories.append(Trajectory(run="a", task_id=f"q{q}", turns=turns,
                                           success=bool(k), sample=k))
    store = open_store(path)
    store.ingest_trajectories(trajectories, source="fixture")
    store.close()
    return path


@pytest.fixture(scope="module")
def neutral_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _neutral_in_one_task_store(tmp_path_factory.mktemp("neutral") / "n.duckdb")


def _train_structured(store: Path, out: Path) -> Path:
    """Trained with the text scores on (left to the inner folds they may be dropped, and then
    the text arrays these tests corrupt would be empty)."""
    from dataclasses import dataclass

    import prm.linear.structured as structured

    @dataclass
    class TextOn(structured.StructuredStepModel):
        text: str = "on"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(structured, "StructuredStepModel", TextOn)
        result = _run("train", "--store", str(store), "--out", str(out), "--labels", "data",
                      "--backbone", "structured")
    assert result.exit_code == 0, (result.output, result.exception)
    return out


@pytest.fixture(scope="module")
def structured_dir(ternary_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A structured model folder (blind, ternary, with the text scores)."""
    return _train_structured(ternary_store, tmp_path_factory.mktemp("structured") / "model")


def _copy(folder: Path, tmp_path: Path) -> Path:
    target = tmp_path / "hostile"
    shutil.copytree(folder, target)
    return target


def _rewrite_npz(path: Path, **changes: np.ndarray) -> None:
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    np.savez(path, **{**arrays, **changes})


# --- the structured model ------------------------------------------------------------------

def test_ternary_labels_with_the_neutral_steps_in_one_task_fit_score_and_cross_validate(
        neutral_store, tmp_path):
    from prm.linear.structured import StructuredStepModel
    from prm.linear.structured_rows import score_structured
    from recovery.store import open_store

    model, record = StructuredStepModel.load(_train_structured(neutral_store, tmp_path / "model"))
    assert record["head"] == "ternary"
    store = open_store(neutral_store, read_only=True, must_exist=True)
    try:
        scores = score_structured(store.con, model)
    finally:
        store.close()
    assert len(scores) == 72 and scores["score"].between(0, 1).all()
    result = _run("cv", "--store", str(neutral_store), "--labels", "data", "--folds", "3",
                  "--n-boot", "20")
    assert result.exit_code == 0, result.output


def test_a_fold_that_saw_two_classes_gives_three_columns():
    """The binary fit's probabilities land in the columns of their classes; the unseen class
    gets 0."""
    from sklearn.linear_model import LogisticRegression

    from prm.linear.folder_checks import three_class_params
    from prm.linear.structured import StructuredStepModel

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    fitted = LogisticRegression().fit(X, y)
    probs = StructuredStepModel()._proba(X, *three_class_params(fitted))
    assert probs.shape == (40, 3)
    np.testing.assert_allclose(probs[:, [0, 2]], fitted.predict_proba(X), atol=1e-12)
    assert (probs[:, 1] == 0).all()


def test_an_unknown_feature_name_is_refused_at_load(structured_dir, ternary_store, tmp_path):
    from prm.linear.structured import STRUCTURED_FILE, StructuredStepModel

    folder = _copy(structured_dir, tmp_path)
    record = json.loads((folder / STRUCTURED_FILE).read_text())
    record["feature_names"][0] = "not_a_feature"
    (folder / STRUCTURED_FILE).write_text(json.dumps(record))
    with pytest.raises(InputProblem, match=r"structured\.json.*'not_a_feature'"):
        StructuredStepModel.load(folder)
    _one_line(_run("score", "--store", str(ternary_store), "--model", str(folder),
                   "--no-progress"), 1, "not_a_feature")


@pytest.mark.parametrize("name, value", [
    ("scales", 0.0), ("scales", -1.0), ("scales", 1e-300), ("coef", 1e308), ("intercept", -1e9),
    ("means", 1e300), ("text_scales", 0.0), ("ratios", 1e200),
])
def test_numbers_the_scorer_cannot_use_are_refused_at_load(structured_dir, tmp_path, name,
                                                           value):
    from prm.linear.structured import ARRAYS_FILE, StructuredStepModel

    folder = _copy(structured_dir, tmp_path)
    with np.load(folder / ARRAYS_FILE) as data:
        array = data[name].copy()
    array.flat[0] = value
    _rewrite_npz(folder / ARRAYS_FILE, **{name: array})
    with pytest.raises(InputProblem, match=rf"structured\.npz: '{name}' holds"):
        StructuredStepModel.load(folder)


def _npz_with_a_false_header(path: Path, member: str, shape: tuple[int, ...]) -> None:
    """Rewrite ``path`` with ``member``'s header declaring ``shape`` over a few bytes."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    with zipfile.ZipFile(path, "w") as archive:
        for key, array in arrays.items():
            with archive.open(f"{key}.npy", "w") as fh:
                if key == member:
                    header = {"descr": "<f8", "fortran_order": False, "shape": shape}
                    np.lib.format.write_array_header_1_0(fh, header)
                    fh.write(bytes(64))
                else:
                    np.lib.format.write_array(fh, array)


def _forbid_array_reads(monkeypatch) -> None:
    """Fail if any array is read from now on: the header checks must refuse first."""
    monkeypatch.setattr(np.lib.format, "read_array",
                        lambda *a, **k: pytest.fail("read an array"))


def test_a_header_declaring_10_to_the_13_elements_is_refused_before_allocating(
        structured_dir, tmp_path, monkeypatch):
    from prm.linear.structured import ARRAYS_FILE, StructuredStepModel

    folder = _copy(structured_dir, tmp_path)
    _npz_with_a_false_header(folder / ARRAYS_FILE, "means", (10**13,))
    _forbid_array_reads(monkeypatch)
    with pytest.raises(InputProblem) as err:
        StructuredStepModel.load(folder)
    message = str(err.value)
    assert "structured.npz" in message and "means.npy" in message and "\n" not in message


@pytest.mark.parametrize("descr", ["|O", "<c16", [("a", "<f8")]])
def test_an_array_of_other_than_plain_numbers_is_refused(structured_dir, tmp_path, descr,
                                                         monkeypatch):
    from prm.linear.folder_checks import npz_headers
    from prm.linear.structured import ARRAYS_FILE

    path = _copy(structured_dir, tmp_path) / ARRAYS_FILE
    with zipfile.ZipFile(path, "w") as archive, archive.open("coef.npy", "w") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": descr, "fortran_order": False,
                                                  "shape": (1,)})
        fh.write(bytes(16))
    _forbid_array_reads(monkeypatch)
    with pytest.raises(InputProblem, match=r"coef\.npy holds .*not plain numbers"):
        npz_headers(path)


# --- the TF-IDF baseline -------------------------------------------------------------------

@pytest.fixture
def baseline_dir(tmp_path) -> Path:
    from tests.prm.test_model_folders import _baseline_folder

    return _baseline_folder(tmp_path)


def test_a_baseline_header_declaring_10_to_the_13_elements_is_refused(
        baseline_dir, monkeypatch):
    from prm.linear.baseline import TfidfStepBaseline

    _npz_with_a_false_header(baseline_dir / "baseline.npz", "idf_action", (10**13,))
    _forbid_array_reads(monkeypatch)
    with pytest.raises(InputProblem, match=r"baseline\.npz.*idf_action\.npy"):
        TfidfStepBaseline.load(baseline_dir)


@pytest.mark.parametrize("name, value", [("coef", 1e308), ("intercept", float("inf")),
                                         ("idf_observation", -2.0)])
def test_baseline_numbers_are_checked(baseline_dir, neutral_store, name, value):
    from prm.linear.baseline import TfidfStepBaseline

    path = baseline_dir / "baseline.npz"
    with np.load(path) as data:
        array = data[name].copy()
    array.flat[0] = value
    _rewrite_npz(path, **{name: array})
    with pytest.raises(InputProblem, match=rf"baseline\.npz: '{name}' holds"):
        TfidfStepBaseline.load(baseline_dir)
    _one_line(_run("score", "--store", str(neutral_store), "--model", str(baseline_dir),
                   "--no-progress"), 1, "baseline.npz", name)


# --- the tokenizer -------------------------------------------------------------------------

HOSTILE_TOKENIZERS = {
    "replace": ("normalizer", {"type": "Replace", "pattern": {"String": "a" * 100_000},
                               "content": "b"}),
    "regex": ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": "(a+)+$"},
                                "behavior": "Isolated", "invert": False}),
    "sequence": ("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(\\w+\\s?)*$"}, "behavior": "Removed",
         "invert": False}]}),
    "replace regex": ("normalizer", {"type": "Replace", "pattern": {"Regex": "(a|a)*b"},
                                     "content": ""}),
    "unigram": ("model", {"type": "Unigram", "unk_id": 0, "vocab": [["a", 0.0]]}),
    "long token": ("added_tokens", [{"id": 0, "content": "x" * 5000, "special": True}]),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TOKENIZERS))
def test_a_tokenizer_not_of_the_toolkit_s_kind_is_refused_before_loading(
        trained_tiny, sim_store, tmp_path, monkeypatch, case):
    from transformers import AutoTokenizer

    from prm.data.tokenize import load_tokenizer

    folder = _copy(trained_tiny[0], tmp_path)
    field, value = HOSTILE_TOKENIZERS[case]
    data = json.loads((folder / "tokenizer.json").read_text())
    data[field] = value
    (folder / "tokenizer.json").write_text(json.dumps(data))
    monkeypatch.setattr(AutoTokenizer, "from_pretrained",
                        lambda *a, **k: pytest.fail("handed the tokenizer to transformers"))
    with pytest.raises(UsageProblem, match=r"tokenizer\.json") as err:
        load_tokenizer(folder)
    assert len(str(err.value)) < 300
    _one_line(_run("score", "--store", str(sim_store), "--model", str(folder),
                   "--no-progress"), 2, "tokenizer.json")


def test_the_tokenizers_the_toolkit_writes_pass(trained_tiny, tmp_path):
    """The tiny tokenizer (both digit settings) and MiniLM's, as a frozen folder saves it."""
    from transformers import AutoTokenizer

    from prm.backbones import resolve_backbone
    from prm.data.tokenize import load_tokenizer, train_tokenizer

    assert len(load_tokenizer(trained_tiny[0])) > 0
    train_tokenizer(["lookup(id=12) found 345"] * 3, 280, split_digits=True).save_pretrained(
        tmp_path / "digits")
    assert len(load_tokenizer(tmp_path / "digits")) > 0
    AutoTokenizer.from_pretrained(resolve_backbone("minilm")).save_pretrained(tmp_path / "mini")
    assert len(load_tokenizer(tmp_path / "mini")) == 30522


# --- deep JSON and a store without turns ---------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("name", ["prm_config.json", "split.json"])
def test_deep_model_folder_json_is_one_line(trained_tiny, sim_store, tmp_path, name):
    folder = _copy(trained_tiny[0], tmp_path)
    (folder / name).write_text(DEEP)
    command = ("eval", "--split", "all") if name == "split.json" else ("score", "--no-progress")
    _one_line(_run(command[0], "--store", str(sim_store), "--model", str(folder),
                   *command[1:]), 1, name, "nested")


def test_deep_structured_json_and_split_are_one_line(structured_dir, ternary_store, tmp_path):
    from prm.data.examples import TaskSplit
    from prm.linear.structured import StructuredStepModel

    folder = _copy(structured_dir, tmp_path)
    (folder / "split.json").write_text(DEEP)
    with pytest.raises(InputProblem, match=r"split\.json.*nested"):
        TaskSplit.load(folder / "split.json")
    _one_line(_run("eval", "--store", str(ternary_store), "--model", str(folder), "--split",
                   "all"), 1, "split.json")
    (folder / "structured.json").write_text(DEEP)
    with pytest.raises(InputProblem, match=r"structured\.json.*nested"):
        StructuredStepModel.load(folder)


def test_a_split_that_is_not_a_split_is_named(tmp_path):
    from prm.data.examples import TaskSplit

    path = tmp_path / "split.json"
    path.write_text(json.dumps({"seed": 0, "fractions": [0.8, 0.1, 0.1],
                                "tasks": {"a": "elsewhere"}}))
    with pytest.raises(InputProblem, match=r"split\.json: not a task split"):
        TaskSplit.load(path)


def test_a_store_without_turns_scores_zero_turns(structured_dir, tmp_path):
    from recovery.schema import Trajectory
    from recovery.store import open_store

    store = tmp_path / "empty.duckdb"
    opened = open_store(store)
    opened.ingest_trajectories([Trajectory(run="a", task_id=f"q{i}", turns=[], success=True,
                                        sample=0) for i in range(3)], source="fixture")
    opened.close()
    result = _run("score", "--store", str(store), "--model", str(structured_dir),
                  "--no-progress")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "0 turns of 3 trajectories" in result.output
    result = _run("eval", "--store", str(store), "--model", str(structured_dir), "--split",
                  "all")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "0 turns" in result.output
