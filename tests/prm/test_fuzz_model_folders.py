"""Fuzz the loading of PRM model folders: a model folder is data from elsewhere, so whatever
its files hold, the scorer either works (finite scores in [0, 1]) or refuses it in one line.

Two valid starting points are made once per module: a structured model trained on a small
simulator store (``prm train --backbone structured``), and a tokenizer of the kind ``prm
train`` writes (:func:`prm.data.tokenize.train_tokenizer`, saved as a folder). Hypothesis then
changes them:

- ``structured.json``: a value replaced (0, negatives, 1e308, NaN and infinities as JSON
  tokens, integers too large for a float, a wrong type, random text as a feature name), a key
  dropped or added, nesting thousands deep;
- ``structured.npz``: a member's ``.npy`` header rewritten (shapes up to 10**13, dtypes
  ``object``, ``<U``, complex, big-endian, records; Fortran order) over the real bytes or a
  few, a member truncated, dropped or added, values made NaN, infinite or huge;
- ``tokenizer.json``: its normalizer or pre-tokenizer swapped for ``Replace`` / ``Split`` with
  long or backtracking patterns, the model's type changed, huge or odd vocabulary entries,
  any value replaced at random.

The property: loading (and, for the structured model, scoring the store; for the tokenizer,
tokenising a few texts) works with finite scores in [0, 1], or raises a
:class:`recovery.errors.Problem` whose message is one line; no other exception, and each
example runs under an alarm.

The default suite runs a few examples of each; ``make test-slow`` runs many more.
"""

from __future__ import annotations

import copy
import io
import json
import math
import shutil
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from recovery.errors import Problem
from tests.recovery.formats._support import deadline
from tests.recovery.test_fuzz_readers import DEEP, _paths, dumps

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NUMBERS = st.one_of(
    st.sampled_from([0, 0.0, -1, -1.0, 1e308, -1e308, 1e-300, 10**30, -(10**30), 2**63,
                     float("nan"), float("inf"), float("-inf"), True, None, "1", [], {}]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.text(max_size=30),
    st.integers(min_value=30, max_value=5_000).map(lambda n: f"{DEEP}{n}__"),
)


def _change_json(value: Any, data: st.DataObject) -> Any:
    """``value`` with one value replaced, or a key dropped or added, at a random place."""
    value = copy.deepcopy(value)
    path = data.draw(st.sampled_from(_paths(value)), label="path")
    if not path:
        return data.draw(NUMBERS, label="whole")
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    action = data.draw(st.sampled_from(["replace", "replace", "replace", "drop", "add"]),
                       label="action")
    if action == "drop":
        del parent[path[-1]]
    elif action == "add" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=12), label="key")] = data.draw(NUMBERS)
    else:
        parent[path[-1]] = data.draw(NUMBERS, label="value")
    return value


def _one_line(err: Problem) -> None:
    message = str(err)
    assert message and "\n" not in message and len(message) < 2000, message


# --------------------------------------------------------------------------------------------
# The structured model


@pytest.fixture(scope="module")
def ternary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulator store with ternary step labels (8 tasks x 2 samples x 2 runs)."""
    from recovery.simulate import PRESETS, SimConfig
    from tests.conftest import simulated_store
    from tests.prm.conftest import TRUTH_LABELS_SQL

    store = tmp_path_factory.mktemp("fuzz-ternary") / "ternary.duckdb"
    opened = simulated_store(SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
                                       n_tasks=8, n_samples=2, budgets=[8], seed=3), store)
    opened.con.execute(TRUTH_LABELS_SQL)
    opened.close()
    return store


@pytest.fixture(scope="module")
def structured_model(ternary: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from click.testing import CliRunner

    from agent_recovery_cli.prm import main

    out = tmp_path_factory.mktemp("fuzz-structured") / "model"
    result = CliRunner().invoke(main, ["train", "--store", str(ternary), "--out",
                                       str(out), "--labels", "data", "--backbone", "structured"])
    assert result.exit_code == 0, (result.output, result.exception)
    return out


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _npy(header: dict[str, Any], body: bytes) -> bytes:
    fh = io.BytesIO()
    np.lib.format.write_array_header_1_0(fh, header)
    return fh.getvalue() + body


DESCRS = st.sampled_from(["<f8", "<f4", ">f8", "<i8", "|b1", "|O", "<U10", "<c16", "|V8",
                          "<M8[s]", [("a", "<f8")]])
SHAPES = st.lists(st.sampled_from([0, 1, 2, 3, 7, 10**6, 10**9, 10**13]), max_size=3).map(
    tuple)


def _change_member(real: bytes, data: st.DataObject) -> bytes | None:
    """One member of the ``.npz`` changed: a false header, truncated, odd values, or gone."""
    try:
        array = np.lib.format.read_array(io.BytesIO(real), allow_pickle=False)
        kinds = ["header", "truncate", "values", "drop"]
    except (ValueError, EOFError, OSError):  # an earlier change broke it: bytes only
        array, kinds = np.zeros(0), ["truncate", "drop"]
    kind = data.draw(st.sampled_from(kinds), label="member change")
    if kind == "header":
        header = {"descr": data.draw(DESCRS, label="descr"),
                  "fortran_order": data.draw(st.booleans(), label="fortran"),
                  "shape": data.draw(st.sampled_from([array.shape]) | SHAPES, label="shape")}
        body = array.tobytes() if data.draw(st.booleans(), label="real bytes") else bytes(64)
        return _npy(header, body)
    if kind == "truncate":
        return real[:data.draw(st.integers(0, max(len(real) - 1, 0)), label="cut")]
    if kind == "values" and array.size:
        array = array.astype(float)
        array.flat[data.draw(st.integers(0, array.size - 1))] = data.draw(st.sampled_from(
            [float("nan"), float("inf"), -float("inf"), 1e308, -1e300, 0.0]), label="number")
        fh = io.BytesIO()
        np.lib.format.write_array(fh, array)
        return fh.getvalue()
    return None


def _hostile_structured(source: Path, target: Path, data: st.DataObject) -> None:
    from prm.linear.structured import ARRAYS_FILE, STRUCTURED_FILE

    shutil.copytree(source, target)
    for _ in range(data.draw(st.integers(1, 2), label="changes")):
        if data.draw(st.booleans(), label="json"):
            record = json.loads((source / STRUCTURED_FILE).read_text(encoding="utf-8"))
            (target / STRUCTURED_FILE).write_text(dumps(_change_json(record, data)),
                                                  encoding="utf-8")
            continue
        members = _members(target / ARRAYS_FILE)
        name = data.draw(st.sampled_from(sorted(members)), label="member")
        changed = _change_member(members[name], data)
        members.pop(name)
        if changed is not None:
            members[name] = changed
        if data.draw(st.booleans(), label="stray member"):
            members["extra.npy"] = _npy({"descr": "<f8", "fortran_order": False,
                                         "shape": (1,)}, bytes(8))
        with zipfile.ZipFile(target / ARRAYS_FILE, "w") as archive:
            for member, content in members.items():
                archive.writestr(member, content)


def _fuzz_structured(source: Path, store: Path, work: Path, data: st.DataObject) -> None:
    from prm.linear.structured import StructuredStepModel
    from prm.linear.structured_rows import score_structured
    from recovery.store import open_store

    folder = work / "model"
    _hostile_structured(source, folder, data)
    with deadline(60):
        try:
            model, _ = StructuredStepModel.load(folder)
            with open_store(store, read_only=True, must_exist=True) as opened:
                scores = score_structured(opened.con, model)
        except Problem as err:
            _one_line(err)
            return
    values = scores["score"].to_numpy(dtype=float)
    assert len(values) and np.isfinite(values).all(), values
    assert ((values >= 0) & (values <= 1)).all(), values


# --------------------------------------------------------------------------------------------
# The tokenizer


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer as ``prm train`` writes it (the ``tiny`` backbone's)."""
    from prm.data.tokenize import train_tokenizer

    out = tmp_path_factory.mktemp("fuzz-tokenizer") / "tok"
    train_tokenizer(["lookup(id=12) found 345", "Error: record not found", "buy(8) ok"] * 3,
                    300, split_digits=False).save_pretrained(out)
    return out


PATTERNS = st.one_of(
    st.sampled_from(["(a+)+$", "(a|a)*b", "(\\w+\\s?)*$", "(.*a){20}", "a" * 100_000,
                     "\\p{L}+", "(?i)x", "", " ", "[", "\\"]),
    st.text(max_size=40),
    st.integers(17, 200_000).map(lambda n: "x" * n),
)
STEPS = st.one_of(
    st.builds(lambda kind, pattern, content: {
        "type": "Replace", "pattern": {kind: pattern}, "content": content},
        st.sampled_from(["String", "Regex"]), PATTERNS, st.text(max_size=20)),
    st.builds(lambda kind, pattern, behavior, invert: {
        "type": "Split", "pattern": {kind: pattern}, "behavior": behavior, "invert": invert},
        st.sampled_from(["String", "Regex"]), PATTERNS,
        st.sampled_from(["Isolated", "Removed", "MergedWithPrevious", "Contiguous", "x"]),
        st.booleans()),
)


def _tokenizer_change(value: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    value = copy.deepcopy(value)
    shaped = (isinstance(value, dict) and isinstance(value.get("model"), dict)
              and isinstance(value["model"].get("vocab"), dict))  # not after a random change
    kind = data.draw(st.sampled_from(["normalizer", "pre_tokenizer", "sequence", "model-type",
                                      "vocab", "random", "random"] if shaped else ["random"]),
                     label="tokenizer change")
    if kind in ("normalizer", "pre_tokenizer"):
        value[kind] = data.draw(STEPS, label="step")
    elif kind == "sequence":
        steps = data.draw(st.lists(STEPS, min_size=1, max_size=10), label="steps")
        field = data.draw(st.sampled_from(["normalizer", "pre_tokenizer"]), label="field")
        value[field] = ({"type": "Sequence", "normalizers": steps} if field == "normalizer"
                        else {"type": "Sequence", "pretokenizers": steps})
    elif kind == "model-type":
        value["model"]["type"] = data.draw(st.sampled_from(
            ["Unigram", "WordLevel", "WordPiece", "BPE", ""]) | st.text(max_size=10))
    elif kind == "vocab":
        token = data.draw(st.integers(1, 200_000).map(lambda n: "v" * n) | st.text(max_size=20))
        value["model"]["vocab"][token] = data.draw(
            st.sampled_from([-1, 0, 2**40, 1.5, "3", None]) | st.integers(0, 400))
    else:
        value = _change_json(value, data)
    return value


def _fuzz_tokenizer(source: Path, work: Path, data: st.DataObject) -> None:
    from prm.data.tokenize import load_tokenizer, tokenise

    folder = work / "tok"
    shutil.copytree(source, folder)
    original = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    changed = original
    for _ in range(data.draw(st.integers(1, 2), label="changes")):
        changed = _tokenizer_change(changed, data)
    (folder / "tokenizer.json").write_text(dumps(changed), encoding="utf-8")
    with deadline(60):
        try:
            tokenizer = load_tokenizer(folder)
            ids = tokenise(tokenizer, ["lookup(id=12) found", "a" * 40 + "b", "Error: ✈️"])
        except Problem as err:
            _one_line(err)
            return
    assert all(isinstance(i, int) for row in ids for i in row), ids


SUPPRESS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
            HealthCheck.data_too_large]
# No shrinking: a failure's draws are printed as they were (shrinking one that scores a
# store takes minutes).
PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
FAST = settings(max_examples=20, deadline=None, derandomize=True, phases=PHASES,
                suppress_health_check=SUPPRESS)
SLOW = settings(max_examples=400, deadline=None, phases=PHASES, suppress_health_check=SUPPRESS)


def test_the_valid_folders_load_and_score(structured_model: Path, tokenizer_folder: Path,
                                          ternary: Path) -> None:
    """Unchanged, both pass (so a refusal in the fuzz is the change's)."""
    from prm.data.tokenize import load_tokenizer, tokenise
    from prm.linear.structured import StructuredStepModel
    from prm.linear.structured_rows import score_structured
    from recovery.store import open_store

    model, _ = StructuredStepModel.load(structured_model)
    with open_store(ternary, read_only=True, must_exist=True) as store:
        scores = score_structured(store.con, model)["score"]
    assert len(scores) and scores.between(0, 1).all() and not math.isnan(scores.sum())
    assert tokenise(load_tokenizer(tokenizer_folder), ["lookup(id=12)"])[0]


@FAST
@given(data=st.data())
def test_a_hostile_structured_model_scores_or_is_refused_cleanly(
    structured_model: Path, ternary: Path, tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
) -> None:
    _fuzz_structured(structured_model, ternary, tmp_path_factory.mktemp("s"), data)


@FAST
@given(data=st.data())
def test_a_hostile_tokenizer_loads_or_is_refused_cleanly(
    tokenizer_folder: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz_tokenizer(tokenizer_folder, tmp_path_factory.mktemp("t"), data)


@pytest.mark.slow
@SLOW
@given(data=st.data())
def test_a_hostile_structured_model_scores_or_is_refused_cleanly_many(
    structured_model: Path, ternary: Path, tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
) -> None:
    _fuzz_structured(structured_model, ternary, tmp_path_factory.mktemp("s"), data)


@pytest.mark.slow
@SLOW
@given(data=st.data())
def test_a_hostile_tokenizer_loads_or_is_refused_cleanly_many(
    tokenizer_folder: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz_tokenizer(tokenizer_folder, tmp_path_factory.mktemp("t"), data)
