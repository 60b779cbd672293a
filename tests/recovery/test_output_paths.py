"""Every output path is checked before any work: a folder where a file is expected, a path
under a regular file, a folder that cannot be written is one line (exit 1), never a traceback,
and nothing is written."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from recovery.errors import InputProblem
from recovery.outputs import atomic_output, check_output_path
from tests.cli_support import FORMAT_FIXTURES, canonical_store, run_cli

CANONICAL = FORMAT_FIXTURES / "canonical.jsonl"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return canonical_store(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def traj_id(store) -> str:
    with duckdb.connect(str(store), read_only=True) as con:
        return con.execute("SELECT min(traj_id) FROM trajectories").fetchone()[0]


def _bad_files(tmp_path: Path, suffix: str) -> dict[str, tuple[Path, str]]:
    """Output files that cannot be written, with a fragment of the message each gets."""
    folder = tmp_path / f"folder{suffix}"
    folder.mkdir()
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    return {
        "folder": (folder, "is a folder; give a file name"),
        "under-a-file": (plain / f"out{suffix}", "is a file, not a folder"),
        "deep-under-a-file": (plain / "a" / "b" / f"out{suffix}", "is a file, not a folder"),
    }


def _refused(result, path: Path, fragment: str) -> None:
    """Exit 1, one line naming the path, no traceback (run_cli checks that)."""
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1, result.output
    assert str(path) in lines[0] and fragment in lines[0], lines[0]


def _entries(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


FILE_COMMANDS = {
    "analyze-json": (".json", lambda out, store, traj: (
        "analyze", CANONICAL, "--quiet", "--json", out)),
    "analyze-html": (".html", lambda out, store, traj: (
        "analyze", CANONICAL, "--quiet", "--html", out)),
    "graph": (".json", lambda out, store, traj: ("graph", traj, "--store", store, "--out", out)),
    "budgetmix-plan": (".json", lambda out, store, traj: (
        "budgetmix", "plan", "--store", store, "--out", out)),
    "budgetmix-rewards": (".jsonl", lambda out, store, traj: (
        "budgetmix", "rewards", "--store", store, "--model", "m", "--out", out)),
    "sql": (".csv", lambda out, store, traj: (
        "sql", "SELECT 1 AS one", "--store", store, "--out", out)),
}


@pytest.mark.parametrize("case", ["folder", "under-a-file", "deep-under-a-file"])
@pytest.mark.parametrize("command", sorted(FILE_COMMANDS))
def test_file_outputs_are_checked_first(store, traj_id, tmp_path, command, case):
    suffix, build = FILE_COMMANDS[command]
    out, fragment = _bad_files(tmp_path, suffix)[case]
    before = _entries(tmp_path)
    _refused(run_cli(*build(out, store, traj_id)), out, fragment)
    assert _entries(tmp_path) == before


def test_export_trl_out_is_checked_first(store, tmp_path):
    from agent_recovery_cli.prm import main

    for out, fragment in _bad_files(tmp_path, ".jsonl").values():
        before = _entries(tmp_path)
        result = CliRunner().invoke(main, ["export-trl", "--store", str(store), "--out",
                                           str(out)])
        assert result.exception is None or isinstance(result.exception, SystemExit)
        _refused(result, out, fragment)
        assert _entries(tmp_path) == before


FOLDER_COMMANDS = {
    "export": (("turns.parquet",), lambda out, store: ("export", "parquet", out, "--store",
                                                       store)),
    "simulate": (("base.jsonl",), lambda out, store: ("simulate", "--out", out, "--tasks", "2",
                                                      "--samples", "1", "--policies", "base")),
}


@pytest.mark.parametrize("command", sorted(FOLDER_COMMANDS))
def test_folder_outputs_are_checked_first(store, tmp_path, command):
    (child,), build = FOLDER_COMMANDS[command]
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    clash = tmp_path / "clash"
    (clash / child).mkdir(parents=True)  # a folder where one of its files goes
    cases = [(plain, "is a file, not a folder"), (plain / "sub", "is a file, not a folder"),
             (clash, "is a folder; give a file name")]
    for out, fragment in cases:
        before = _entries(tmp_path)
        _refused(run_cli(*build(out, store)), out if out != clash else clash / child, fragment)
        assert _entries(tmp_path) == before


def test_the_check_refuses_a_folder_without_write_permission(tmp_path, monkeypatch):
    # the tests may run as root, for whom every folder is writable: os.access answers as for
    # a user without write permission on this folder
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: (
        False if Path(p) == locked else real_access(p, mode, **kw)))
    with pytest.raises(InputProblem, match=r"cannot write in folder .*locked.*permission denied"):
        check_output_path(locked / "new" / "out.json", "--out")
    with pytest.raises(InputProblem, match="cannot write in this folder"):
        check_output_path(locked, "--out", kind="folder")
    (tmp_path / "ro.json").write_text("{}")
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p).name != "ro.json")
    with pytest.raises(InputProblem, match="cannot overwrite"):
        check_output_path(tmp_path / "ro.json", "--json")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused_by_the_command(store, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        out = locked / "report.json"
        _refused(run_cli("analyze", CANONICAL, "--quiet", "--json", out), out,
                 "permission denied")
    finally:
        locked.chmod(0o700)


def test_writable_paths_pass_and_missing_folders_are_fine(tmp_path):
    assert check_output_path(tmp_path / "a" / "b" / "out.json", "--out") == (
        tmp_path / "a" / "b" / "out.json")
    (tmp_path / "old.json").write_text("{}")
    check_output_path(tmp_path / "old.json", "--out")
    check_output_path(tmp_path / "new", "--out", kind="folder", children=["x.jsonl"])
    check_output_path(tmp_path, "--out", kind="folder", children=["old.json"])
    assert not (tmp_path / "a").exists() and not (tmp_path / "new").exists()


def test_atomic_output_replaces_whole_or_leaves_the_old_file(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(target) as temp:
        assert temp.parent == tmp_path and temp.suffix == ".json" and temp != target
        temp.write_text("half")
        raise RuntimeError("the writer failed")
    assert target.read_text() == "old" and _entries(tmp_path) == {"out.json"}
    with atomic_output(target) as temp:
        temp.write_text("new")
    assert target.read_text() == "new" and _entries(tmp_path) == {"out.json"}
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
