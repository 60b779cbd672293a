"""prm's commands agree on their defaults, work on a store without step labels, and refuse
from Python what the command line refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recovery.errors import UsageProblem
from tests.analyses.report.test_crashes import tau_records
from tests.cli_support import run_cli


def prm(*args: object):
    """``prm ARGS...`` in-process; a mistake must be a message, never a traceback."""
    from click.testing import CliRunner

    from agent_recovery_cli.prm import main

    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    return result


@pytest.fixture(scope="module")
def unlabelled_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tau-bench records (no process labels): 12 tasks x 3 trials, about half solved."""
    tmp = tmp_path_factory.mktemp("unlabelled")
    records = []
    for trial in range(3):
        for record in tau_records(12, set(), {i for i in range(12) if (i + trial) % 2}):
            records.append({**record, "trial": trial})
    (tmp / "t.json").write_text(json.dumps(records))
    store = tmp / "s.duckdb"
    assert run_cli("ingest", tmp / "t.json", "--store", store).exit_code == 0
    return store


def test_train_cv_and_export_share_one_default_label_source() -> None:
    from agent_recovery_cli.prm.export_trl import ExportTrlConfig
    from prm.config import TrainConfig
    from prm.data.labels import DEFAULT_LABELS
    from prm.evaluation.cv import CVConfig

    assert DEFAULT_LABELS == "recovery"          # the one that needs no step labels
    assert TrainConfig().labels == CVConfig().labels == DEFAULT_LABELS
    assert ExportTrlConfig(store=Path("s"), out=Path("o")).labels == DEFAULT_LABELS


def test_cv_and_train_run_with_no_option_on_an_unlabelled_store(
    unlabelled_store: Path, tmp_path: Path,
) -> None:
    cv = prm("cv", "--store", unlabelled_store, "--n-boot", "20", "--folds", "3")
    assert cv.exit_code == 0, cv.output
    assert "on labels recovery" in cv.output
    train = prm("train", "--store", unlabelled_store, "--out", tmp_path / "m")
    assert train.exit_code == 0, train.output


def test_a_label_source_without_targets_names_those_that_have_some(
    unlabelled_store: Path, tmp_path: Path,
) -> None:
    for command in (["cv"], ["train", "--out", str(tmp_path / "m")]):
        result = prm(*command, "--store", unlabelled_store, "--labels", "data")
        assert result.exit_code == 1, result.output
        line = result.output.strip().splitlines()[-1]
        assert "no turn of" in line and "labels 'data'" in line
        assert "error, outcome, mc, recovery" in line and "advantage" not in line.split(
            "targets on this store")[-1]


def test_sources_with_targets_follow_the_store(unlabelled_store: Path) -> None:
    import duckdb

    from prm.data.labels import sources_with_targets

    con = duckdb.connect(str(unlabelled_store), read_only=True)
    try:
        assert sources_with_targets(con) == ["error", "outcome", "mc", "recovery"]
        con.execute("CREATE TEMP VIEW x AS SELECT 1")  # the connection stays usable
    finally:
        con.close()


@pytest.mark.parametrize("module, name, given, bad", [
    ("agent_recovery_cli.prm.evaluate", "EvalConfig", {"model": Path("m")}, {"setting": "nonsense"}),
    ("agent_recovery_cli.prm.score", "ScoreConfig", {"model": Path("m")}, {"setting": "nonsense"}),
    ("agent_recovery_cli.prm.export_trl", "ExportTrlConfig", {"out": Path("o")}, {"labels": "nonsense"}),
])
def test_prm_option_classes_refuse_a_value_the_command_line_refuses(
    module: str, name: str, given: dict, bad: dict,
) -> None:
    import importlib

    cls = getattr(importlib.import_module(module), name)
    cls(store=Path("s"), **given)                      # the defaults are allowed
    with pytest.raises(UsageProblem, match="is not one of"):
        cls(store=Path("s"), **given, **bad)


def test_train_with_only_a_store_writes_beside_it(unlabelled_store: Path, tmp_path: Path) -> None:
    import shutil

    from prm.config import default_out

    store = tmp_path / "runs.duckdb"
    shutil.copy(unlabelled_store, store)
    train = prm("train", "--store", store)
    assert train.exit_code == 0, train.output
    assert f"no --out: the model goes to {tmp_path / 'runs.prm'}" in train.output
    assert (tmp_path / "runs.prm").is_dir() and any((tmp_path / "runs.prm").iterdir())
    assert default_out("runs/") == Path("runs.prm") == default_out("runs.duckdb")


def test_a_labelled_store_read_with_another_source_says_so(
    ternary_store: Path, unlabelled_store: Path,
) -> None:
    from prm.data.labels import unused_labels_note
    from recovery.store import open_store

    for path, expected in ((ternary_store, True), (unlabelled_store, False)):
        store = open_store(path, read_only=True)
        try:
            note = unused_labels_note(store.con, "recovery")
            assert (note is not None) == expected
            assert unused_labels_note(store.con, "data") is None
        finally:
            store.close()
    cv = prm("cv", "--store", ternary_store, "--n-boot", "10", "--folds", "3")
    assert cv.exit_code == 0, cv.output
    assert "carry step labels that --labels recovery does not read; --labels data" in cv.output
