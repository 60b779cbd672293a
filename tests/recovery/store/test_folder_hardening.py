"""A folder store given hostile contents or a hostile name: it reads exactly the files its
``_store.json`` committed, refuses links and files it did not write (naming them), never
deletes or reads anything outside its folder, and a failed ingest removes only a store that
nobody else has touched."""

from __future__ import annotations

import functools
import json
import os
import shutil
import threading
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from agent_recovery_cli.recovery import main
from recovery.errors import InputProblem
from recovery.store import open_store, views_sql
from recovery.store.ddl import SCHEMA_VERSION
from recovery.store.folder import MARKER, writer_lock
from tests.cli_support import run_cli

FAKE_SHA = "ab" * 32


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two small simulated runs (base, rl), one file each."""
    out = tmp_path_factory.mktemp("sim")
    result = CliRunner().invoke(
        main, ["simulate", "--out", str(out), "--tasks", "4", "--samples", "2", "--seed", "5"]
    )
    assert result.exit_code == 0, result.output
    return sorted(out.glob("*.jsonl"))


def totals(con) -> tuple[int, int, int]:
    """Ingested files, trajectories and turns of a store."""
    return con.execute(
        "SELECT (SELECT count(*) FROM ingests), (SELECT count(*) FROM trajectories), "
        "(SELECT count(*) FROM turns)"
    ).fetchone()


def expected_totals(files: list[Path]) -> tuple[int, int, int]:
    """The totals an in-memory store gives for ``files`` (the module's read-only inputs)."""
    return _memory_totals(tuple(files))


@functools.cache  # one ingest per set of inputs, not one per assertion
def _memory_totals(files: tuple[Path, ...]) -> tuple[int, int, int]:
    duck = open_store(None)
    for file in files:
        duck.ingest_file(file)
    return totals(duck.con)


def folder_store(root: Path, files: list[Path]) -> Path:
    store = open_store(f"{root}/")
    for file in files:
        assert store.ingest_file(file).status == "ingested"
    store.close()
    return root


def tree(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder`` (links not followed): a file's bytes, a link's target."""
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                out[rel] = path.read_bytes()
            else:
                out[rel] = "dir"
    return out


def one_line_error(result, *fragments: str) -> None:
    """Exit status 1 with one line of error naming each fragment, no traceback."""
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, result.output
    for fragment in fragments:
        assert fragment in lines[0], result.output


def committed_turns_file(root: Path) -> Path:
    (path,) = [p for p in root.glob("turns/run=base/sha256=*/gen=0/*.parquet")]
    return path


# --------------------------------------------------------------------------------------------
# 1. Links inside a store: refused before anything is done, never followed


def test_a_linked_partition_is_refused_and_nothing_outside_is_deleted(
    tmp_path: Path, sim: list[Path]
) -> None:
    root = folder_store(tmp_path / "runs", sim[:1])
    victim = tmp_path / "victim"
    (victim / "keep" / "deep").mkdir(parents=True)
    (victim / "keep" / "deep" / "precious.txt").write_text("mine")
    (victim / "other").mkdir()
    link = root / "turns" / "run=base" / f"sha256={FAKE_SHA}"
    link.symlink_to(victim, target_is_directory=True)
    before = tree(victim)
    for args in (["ingest", sim[1], "--store", root],
                 ["analyze", "--store", root, "--n-boot", "5", "--quiet"],
                 ["sql", "SELECT count(*) FROM turns", "--store", root]):
        one_line_error(run_cli(*args), str(link), "link")
    assert tree(victim) == before
    with pytest.raises(InputProblem, match="link"):
        open_store(root, read_only=True)
    assert tree(victim) == before
    assert link.is_symlink()


@pytest.mark.parametrize("where", ["file", "table", "tmp", "lock"])
def test_a_link_anywhere_in_the_store_is_refused(
    tmp_path: Path, sim: list[Path], where: str
) -> None:
    root = folder_store(tmp_path / "runs", sim[:1])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.parquet").write_bytes(committed_turns_file(root).read_bytes())
    if where == "file":  # a committed file replaced by a link to a file outside
        link = committed_turns_file(root)
        link.unlink()
        link.symlink_to(outside / "secret.parquet")
    elif where == "table":
        link = root / "error_spells"
        shutil.rmtree(link)
        link.symlink_to(outside, target_is_directory=True)
    elif where == "tmp":
        (root / "_tmp").mkdir(exist_ok=True)
        link = root / "_tmp" / "x"
        link.symlink_to(outside, target_is_directory=True)
    else:
        link = root / ".lock"
        link.unlink(missing_ok=True)
        link.symlink_to(outside / "lockfile")
    before = tree(outside)
    with pytest.raises(InputProblem, match="link") as err:
        open_store(root, read_only=True)
    assert str(link) in str(err.value)
    one_line_error(run_cli("ingest", sim[1], "--store", root), str(link))
    assert tree(outside) == before


# --------------------------------------------------------------------------------------------
# 4. Glob characters in the store's path


@pytest.mark.parametrize(("name", "sibling"), [
    ("st[1]", "st1"), ("a*b", "aXb"), ("q?x", "qZx"), ("c{d,e}", "cd"), ("sp ace [x]", "sp ace x"),
])
def test_glob_characters_in_the_store_name(
    tmp_path: Path, sim: list[Path], name: str, sibling: str
) -> None:
    # the sibling a glob of the name would match holds another store, with both files
    folder_store(tmp_path / sibling, sim)
    root = tmp_path / name
    store = open_store(f"{root}/")
    assert store.ingest_file(sim[0]).status == "ingested"
    assert totals(store.con) == expected_totals(sim[:1])
    assert store.con.execute("SELECT DISTINCT run FROM trajectories").fetchall() == [("base",)]
    store.close()
    assert totals(open_store(root, read_only=True).con) == expected_totals(sim[:1])
    plain = duckdb.connect()
    plain.execute(views_sql(root))
    assert totals(plain) == expected_totals(sim[:1])
    mark = run_cli("mark", "--store", root)
    assert mark.exit_code == 0, mark.output
    assert totals(open_store(root, read_only=True).con) == expected_totals(sim[:1])
    assert totals(open_store(tmp_path / sibling, read_only=True).con) == expected_totals(sim)


def test_recovery_sql_reads_a_store_with_glob_characters(tmp_path: Path, sim: list[Path]) -> None:
    folder_store(tmp_path / "st1", sim)
    root = folder_store(tmp_path / "st[1]", sim[:1])
    out = run_cli("sql", "SELECT count(*) AS n FROM trajectories", "--store", root,
                  "--format", "json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == [{"n": expected_totals(sim[:1])[1]}]


def test_a_backslash_with_glob_characters_is_refused_by_name(tmp_path: Path) -> None:
    root = tmp_path / "a\\b[1]"
    with pytest.raises(InputProblem, match="backslash"):
        open_store(f"{root}/")


# --------------------------------------------------------------------------------------------
# 6. A failed ingest removes the store it made only when nobody else has touched it


def _bad_file(tmp_path: Path) -> Path:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    return bad


def test_a_failed_ingest_leaves_a_store_another_writer_is_writing(
    tmp_path: Path, sim: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import recovery.store as store

    root = tmp_path / "runs"
    real = store.Store.ingest_files
    holding, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def other_writer() -> None:
        try:
            store = open_store(root)
            with writer_lock(root):
                holding.set()
                release.wait(10)
            assert store.ingest_file(sim[0]).status == "ingested"
            store.close()
        except BaseException as err:  # reported by the test
            errors.append(err)
            holding.set()

    thread = threading.Thread(target=other_writer)

    def failing_then_other(con, files, options, on_result=None):
        results = real(con, files, options, on_result=on_result)
        thread.start()
        assert holding.wait(10)
        return results

    monkeypatch.setattr(store.Store, "ingest_files", failing_then_other)
    result = run_cli("ingest", _bad_file(tmp_path), "--store", f"{root}/")
    assert result.exit_code == 1
    assert (root / MARKER).is_file()  # still there while the other one writes
    release.set()
    thread.join(10)
    assert not errors, errors
    assert totals(open_store(root, read_only=True).con) == expected_totals(sim[:1])


def test_a_failed_ingest_leaves_a_store_another_writer_committed_to(
    tmp_path: Path, sim: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import recovery.store as store

    root = tmp_path / "runs"
    real = store.Store.ingest_files

    def failing_then_other(con, files, options, on_result=None):
        results = real(con, files, options, on_result=on_result)
        other = open_store(root)
        assert other.ingest_file(sim[0]).status == "ingested"
        other.close()
        return results

    monkeypatch.setattr(store.Store, "ingest_files", failing_then_other)
    result = run_cli("ingest", _bad_file(tmp_path), "--store", f"{root}/")
    assert result.exit_code == 1
    assert "not created" not in result.output
    assert totals(open_store(root, read_only=True).con) == expected_totals(sim[:1])


def test_a_writer_that_opened_a_store_a_failed_ingest_removed_still_writes(
    tmp_path: Path, sim: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import recovery.store as store

    root = tmp_path / "runs"
    real = store.Store.ingest_files
    opened = []

    def failing(con, files, options, on_result=None):
        opened.append(open_store(root))  # another writer opens the store, writes later
        return real(con, files, options, on_result=on_result)

    monkeypatch.setattr(store.Store, "ingest_files", failing)
    result = run_cli("ingest", _bad_file(tmp_path), "--store", f"{root}/")
    assert result.exit_code == 1
    assert "not created" in result.output
    assert not root.exists()
    (other,) = opened
    assert other.ingest_file(sim[0]).status == "ingested"
    assert totals(other.con) == expected_totals(sim[:1])
    assert totals(open_store(root, read_only=True).con) == expected_totals(sim[:1])


# --------------------------------------------------------------------------------------------
# 7. Files the manifest did not commit are not read: refused, named


@pytest.mark.parametrize("plant", ["copy", "garbage", "root_file", "unknown_folder",
                                   "not_parquet"])
def test_a_planted_file_is_refused_not_counted(
    tmp_path: Path, sim: list[Path], plant: str
) -> None:
    root = folder_store(tmp_path / "runs", sim[:1])
    committed = committed_turns_file(root)
    if plant == "copy":
        planted = committed.with_name("data_1.parquet")
        shutil.copy(committed, planted)
    elif plant == "garbage":
        planted = committed.with_name("zz.parquet")
        planted.write_bytes(b"PAR1 garbage")
    elif plant == "root_file":
        planted = root / "notes.txt"
        planted.write_text("hello")
    elif plant == "unknown_folder":
        planted = root / "turns" / "extra"
        planted.mkdir()
    else:
        planted = committed.with_name("data_0.csv")
        planted.write_text("a\n")
    before = tree(root)
    with pytest.raises(InputProblem) as err:
        open_store(root, read_only=True)
    assert str(planted) in str(err.value)
    for args in (["ingest", sim[1], "--store", root],
                 ["analyze", "--store", root, "--n-boot", "5", "--quiet"],
                 ["sql", "SELECT count(*) FROM turns", "--store", root],
                 ["mark", "--store", root]):
        one_line_error(run_cli(*args), str(planted))
    assert tree(root) == before  # refused before anything was changed


def test_plain_duckdb_views_read_only_committed_files(tmp_path: Path, sim: list[Path]) -> None:
    root = folder_store(tmp_path / "runs", sim[:1])
    committed = committed_turns_file(root)
    planted = committed.with_name("data_1.parquet")
    shutil.copy(committed, planted)
    with pytest.raises(InputProblem, match="not listed"):
        views_sql(root)
    planted.unlink()
    text = views_sql(root)
    assert str(committed) in text and "*" not in text
    plain = duckdb.connect()
    plain.execute(text)
    assert totals(plain) == expected_totals(sim[:1])


# --------------------------------------------------------------------------------------------
# 9. A damaged manifest, a read-only store


@pytest.mark.parametrize("text", [
    "not json {", "[]", '{"store": "agent-recovery"}',
    '{"store": "agent-recovery", "layout": "parquet", "schema_version": "x", "files": {}, '
    '"step_scores": {}}',
    json.dumps({"store": "agent-recovery", "layout": "parquet",
                "schema_version": SCHEMA_VERSION, "files": {"x": 3}, "step_scores": {}}),
    json.dumps({"store": "agent-recovery", "layout": "parquet",
                "schema_version": SCHEMA_VERSION,
                "files": {FAKE_SHA: {"gen": 0, "parts": [
                    {"table": "turns", "path": "../../etc/passwd", "run": "x"}]}},
                "step_scores": {}}),
    "\xff\xfe",
])
def test_a_damaged_manifest_is_named(tmp_path: Path, sim: list[Path], text: str) -> None:
    root = folder_store(tmp_path / "runs", sim[:1])
    (root / MARKER).write_text(text, encoding="utf-8", errors="surrogateescape")
    with pytest.raises(InputProblem, match=MARKER):
        open_store(root, read_only=True)
    before = tree(root)
    for args in (["ingest", sim[1], "--store", root],
                 ["analyze", "--store", root, "--n-boot", "5", "--quiet"],
                 ["sql", "SELECT count(*) FROM turns", "--store", root]):
        one_line_error(run_cli(*args), str(root / MARKER))
    assert tree(root) == before


def test_a_newer_manifest_is_refused(tmp_path: Path, sim: list[Path]) -> None:
    root = folder_store(tmp_path / "runs", sim[:1])
    manifest = json.loads((root / MARKER).read_text())
    manifest["schema_version"] = SCHEMA_VERSION + 1
    (root / MARKER).write_text(json.dumps(manifest))
    with pytest.raises(InputProblem, match="newer"):
        open_store(root, read_only=True)
    one_line_error(run_cli("ingest", sim[1], "--store", root), str(root / MARKER), "newer")


def test_a_read_only_store_is_read_and_not_written(
    tmp_path: Path, sim: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = folder_store(tmp_path / "runs", sim[:1])
    (root / ".lock").unlink(missing_ok=True)
    real_open = os.open

    def read_only_open(path, flags, *args, **kwargs):
        if str(path).endswith(".lock") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_open)
    before = tree(root)
    one_line_error(run_cli("ingest", sim[1], "--store", root), str(root), "read-only")
    one_line_error(run_cli("mark", "--store", root), str(root), "read-only")
    ok = run_cli("sql", "SELECT count(*) AS n FROM trajectories", "--store", root,
                 "--format", "json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout) == [{"n": expected_totals(sim[:1])[1]}]
    report = run_cli("analyze", "--store", root, "--n-boot", "5", "--quiet")
    assert report.exit_code == 0, report.output
    assert tree(root) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only folders")
def test_a_store_without_write_permission(tmp_path: Path, sim: list[Path]) -> None:
    root = folder_store(tmp_path / "runs", sim[:1])
    (root / ".lock").unlink(missing_ok=True)
    modes = {}
    for dirpath, _, _ in os.walk(root):
        modes[dirpath] = os.stat(dirpath).st_mode
        os.chmod(dirpath, 0o555)
    try:
        one_line_error(run_cli("ingest", sim[1], "--store", root), "read-only")
        ok = run_cli("sql", "SELECT count(*) AS n FROM trajectories", "--store", root)
        assert ok.exit_code == 0, ok.output
    finally:
        for dirpath, mode in modes.items():
            os.chmod(dirpath, mode)


def test_prm_scores_and_mark_refuse_a_linked_store(tmp_path: Path, sim: list[Path]) -> None:



    root = folder_store(tmp_path / "runs", sim[:1])
    store = open_store(root)
    store.con.execute("CREATE TEMP TABLE s AS SELECT traj_id, t, 0.5 AS score FROM turns WHERE t = 1")
    victim = tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    link = root / "trajectories" / "run=base" / f"sha256={FAKE_SHA}"
    link.symlink_to(victim, target_is_directory=True)
    for write in (lambda: store.replace_step_scores("s", "m1"), lambda: store.mark()):
        with pytest.raises(InputProblem, match="symbolic link"):
            write()
    assert (victim / "keep").is_dir()
    link.unlink()
    store.replace_step_scores("s", "m1")
    assert store.con.execute("SELECT count(*) FROM step_scores").fetchone()[0] > 0
    assert open_store(root, read_only=True).con.execute(
        "SELECT count(*) FROM step_scores").fetchone() == store.con.execute(
        "SELECT count(*) FROM step_scores").fetchone()


def test_key_value_folders_above_the_store_are_not_read_as_partitions(
    tmp_path: Path, sim: list[Path]
) -> None:
    # DuckDB's Hive partitioning parses every key=value folder of a path, the store's own
    # folders above it included: the partition values come from the manifest instead
    root = folder_store(tmp_path / "run=evil" / "gen=7" / "traj_id=x", sim[:1])
    store = open_store(root, read_only=True)
    assert store.con.execute("SELECT DISTINCT run FROM trajectories").fetchall() == [("base",)]
    assert totals(store.con) == expected_totals(sim[:1])
    assert store.con.execute("SELECT count(*) FROM turns WHERE traj_id = 'x'").fetchone() == (0,)
