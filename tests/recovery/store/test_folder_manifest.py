"""A folder store's manifest is the commit and only its writer deletes: an older
``_store.json`` put back is refused (nothing deleted), the manifest is parsed strictly, a FIFO
never hangs a command, and a store stopped while being made or removed is finished by the
next write."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_recovery_cli.recovery import main
from recovery.errors import InputProblem
from recovery.store import open_store
from recovery.store.folder import JOURNAL, MARKER
from recovery.store.manifest import UNFINISHED
from tests.cli_support import run_cli
from tests.conftest import REPO

FAKE_SHA = "ab" * 32
CLI = "import sys; from agent_recovery_cli.recovery import main; sys.exit(main())"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two small simulated runs (base, rl), one file each."""
    out = tmp_path_factory.mktemp("sim")
    result = CliRunner().invoke(
        main, ["simulate", "--out", str(out), "--tasks", "4", "--samples", "2", "--seed", "5"]
    )
    assert result.exit_code == 0, result.output
    return sorted(out.glob("*.jsonl"))


def counts(root: Path | str) -> tuple[int, int]:
    """Ingested files and turns of a store, read afresh."""
    store = open_store(root, read_only=True)
    try:
        return store.con.execute("SELECT (SELECT count(*) FROM ingests), "
                             "(SELECT count(*) FROM turns)").fetchone()
    finally:
        store.close()


def parquet(root: Path) -> dict[str, bytes]:
    """Every Parquet file of the store with its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.parquet"))}


def one_error(result, *fragments: str) -> str:
    """Exit status 1, one line of error naming each fragment, no traceback."""
    output = result.output if hasattr(result, "output") else result.stdout + result.stderr
    code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert code == 1, output
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, output
    for fragment in fragments:
        assert fragment in lines[0], output
    return lines[0]


def cli(*args: object, timeout: float = 60) -> subprocess.CompletedProcess:
    """``recovery ARGS`` in a child process (a hang fails the test instead of blocking it)."""
    return subprocess.run([sys.executable, "-c", CLI, *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def store_of(root: Path, files: list[Path]) -> Path:
    for file in files:
        assert run_cli("ingest", file, "--store", f"{root}/").exit_code == 0
    return root


# --------------------------------------------------------------------------------------------
# An older manifest put back: refused, nothing deleted


def test_an_older_manifest_put_back_is_refused_and_nothing_is_deleted(
    tmp_path: Path, sim: list[Path]
) -> None:
    root = store_of(tmp_path / "runs", sim[:1])
    backup = (root / MARKER).read_text()
    store_of(root, sim[1:])
    newest, files = (root / MARKER).read_text(), parquet(root)
    (root / MARKER).write_text(backup)  # a backup restored
    with pytest.raises(InputProblem, match="older"):
        open_store(root, read_only=True)
    for args in (["ingest", sim[1], "--store", root],
                 ["analyze", "--store", root, "--n-boot", "5", "--quiet"],
                 ["sql", "SELECT count(*) FROM turns", "--store", root]):
        one_error(run_cli(*args), MARKER, "older", "Put back the newest")
    assert parquet(root) == files
    # the first way out the message gives: the newest manifest put back
    (root / MARKER).write_text(newest)
    assert counts(root)[0] == 2


def test_moving_the_journal_out_uses_the_older_manifest_and_keeps_the_newer_files(
    tmp_path: Path, sim: list[Path]
) -> None:
    root = store_of(tmp_path / "runs", sim[:1])
    backup = (root / MARKER).read_text()
    store_of(root, sim[1:])
    files = parquet(root)
    (root / MARKER).write_text(backup)
    (root / JOURNAL).rename(tmp_path / JOURNAL)  # the second way out the message gives
    assert counts(root)[0] == 1
    # the newer file's folders are not the older manifest's: an ingest of it does not
    # replace or delete them, it says what to do
    one_error(run_cli("ingest", sim[1], "--store", root), "already there", "move the folder")
    assert run_cli("ingest", sim[0], "--store", root).exit_code == 0  # skipped: seen
    assert parquet(root) == files


def test_an_unlisted_folder_no_journal_names_is_kept(tmp_path: Path, sim: list[Path]) -> None:
    root = store_of(tmp_path / "runs", sim[:1])
    before = counts(root)
    leftover = root / "turns" / "run=base" / f"sha256={FAKE_SHA}" / "gen=0"
    leftover.mkdir(parents=True)
    shutil.copy(next(root.glob("turns/run=base/sha256=*/gen=0/*.parquet")),
                leftover / "data_0.parquet")
    assert counts(root) == before  # not read
    store_of(root, sim[1:])
    assert (leftover / "data_0.parquet").is_file()  # not removed by the next write


def test_a_mark_s_replaced_generation_goes_at_the_next_write(
    tmp_path: Path, sim: list[Path]
) -> None:
    root = store_of(tmp_path / "runs", sim[:1])
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nname = "ok"\nkind = "none"\nfield = "observation"\n'
                     'startswith = "Error"\n')
    (sha,) = json.loads((root / MARKER).read_text())["files"]
    assert run_cli("mark", "--store", root, "--rules", rules).exit_code == 0
    assert list(root.glob(f"turns/*/sha256={sha}/gen=0"))  # kept for readers still open
    assert list(root.glob(f"turns/*/sha256={sha}/gen=1"))
    journal = json.loads((root / JOURNAL).read_text())
    assert journal["committed"] and journal["drops"]
    assert json.loads((root / MARKER).read_text())["generation"] == journal["generation"] == 2
    store_of(root, sim[1:])
    assert not list(root.glob(f"*/*/sha256={sha}/gen=0")) + list(
        root.glob(f"ingests/sha256={sha}/gen=0"))
    assert counts(root)[0] == 2


# --------------------------------------------------------------------------------------------
# The manifest parsed strictly


def manifest_with(root: Path, edit: Callable[[str], str]) -> None:
    (root / MARKER).write_text(edit((root / MARKER).read_text()))


def test_a_repeated_files_key_is_refused_and_nothing_is_deleted(
    tmp_path: Path, sim: list[Path]
) -> None:
    root = store_of(tmp_path / "runs", sim[:1])
    files = parquet(root)
    manifest_with(root, lambda text: text.rstrip().removesuffix("}") + ', "files": {}}\n')
    one_error(run_cli("ingest", sim[1], "--store", root), str(root / MARKER), "twice")
    one_error(run_cli("analyze", "--store", root, "--n-boot", "5", "--quiet"),
              str(root / MARKER))
    assert parquet(root) == files


def test_a_part_listed_twice_is_refused(tmp_path: Path, sim: list[Path]) -> None:
    root = store_of(tmp_path / "runs", sim[:1])
    data = json.loads((root / MARKER).read_text())
    (entry,) = data["files"].values()
    entry["parts"].append(next(p for p in entry["parts"] if p["table"] == "turns"))
    (root / MARKER).write_text(json.dumps(data))
    with pytest.raises(InputProblem, match="listed twice"):
        open_store(root, read_only=True)
    one_error(run_cli("sql", "SELECT count(*) FROM turns", "--store", root), "listed twice")


def test_a_deeply_nested_manifest_is_one_line(tmp_path: Path, sim: list[Path]) -> None:
    root = store_of(tmp_path / "runs", sim[:1])
    files = parquet(root)
    (root / MARKER).write_text('{"store": ' + "[" * 100_000 + "]" * 100_000 + "}")
    for args in (["ingest", sim[1], "--store", root],
                 ["sql", "SELECT count(*) FROM turns", "--store", root]):
        one_error(run_cli(*args), str(root / MARKER), "nested")
    assert parquet(root) == files


def test_a_manifest_without_a_generation_still_reads_and_writes(
    tmp_path: Path, sim: list[Path]
) -> None:
    root = store_of(tmp_path / "runs", sim[:1])
    data = json.loads((root / MARKER).read_text())
    del data["generation"]  # as an earlier version wrote it
    (root / MARKER).write_text(json.dumps(data))
    (root / JOURNAL).unlink()
    assert counts(root)[0] == 1
    store_of(root, sim[1:])
    assert counts(root)[0] == 2
    assert json.loads((root / MARKER).read_text())["generation"] == 1


# --------------------------------------------------------------------------------------------
# A FIFO never hangs a command


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_the_manifest_is_refused_at_once(tmp_path: Path, sim: list[Path]) -> None:
    root = store_of(tmp_path / "runs", sim[:1])
    (root / MARKER).unlink()
    os.mkfifo(root / MARKER)
    for args in (["sql", "SELECT count(*) FROM turns", "--store", root],
                 ["ingest", sim[1], "--store", root]):
        one_error(cli(*args, timeout=20), str(root / MARKER), "not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("slash", ["", "/"])
def test_a_fifo_as_the_store_is_refused_at_once(
    tmp_path: Path, sim: list[Path], slash: str
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args in (["sql", "SELECT 1 AS x", "--store", f"{fifo}{slash}"],
                 ["ingest", sim[0], "--store", f"{fifo}{slash}"]):
        one_error(cli(*args, timeout=20), str(fifo))


# --------------------------------------------------------------------------------------------
# A store stopped while being made or removed: the next write finishes it

_KILLED = """
import os, sys
from pathlib import Path
from recovery.store import open_store

root, step = sys.argv[1], sys.argv[2]
if step == "make":  # killed just before the manifest's rename
    real = os.replace
    def replace(src, dst):
        if Path(dst).name == "_store.json":
            os._exit(17)
        real(src, dst)
    os.replace = replace
    open_store(root + "/")
else:  # killed just after the manifest's unlink
    store = open_store(root + "/")
    real = Path.unlink
    def unlink(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if self.name == "_store.json":
            os._exit(17)
    Path.unlink = unlink
    store.remove_if_unused()
"""


@pytest.mark.parametrize("step", ["make", "remove"])
def test_a_store_stopped_while_made_or_removed_is_finished_by_the_next_write(
    tmp_path: Path, sim: list[Path], step: str
) -> None:
    root = tmp_path / "runs"
    killed = subprocess.run([sys.executable, "-c", _KILLED, str(root), step], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == 17, killed.stderr
    assert not (root / MARKER).exists() and (root / "turns").is_dir()
    # a read says what happened and which command finishes it; that command works
    line = one_error(run_cli("sql", "SELECT count(*) AS n FROM turns", "--store", root),
                     "finishes making it")
    assert f"recovery ingest FILES --store {root}/" in line
    assert run_cli("ingest", sim[0], "--store", f"{root}/").exit_code == 0
    assert counts(root)[0] == 1
    assert not (root / UNFINISHED).exists()


def test_a_folder_with_a_stray_file_and_the_unfinished_marker_is_not_taken(
    tmp_path: Path, sim: list[Path]
) -> None:
    root = tmp_path / "runs"
    root.mkdir()
    (root / UNFINISHED).touch()
    (root / "mine.txt").write_text("keep")
    one_error(run_cli("ingest", sim[0], "--store", f"{root}/"), str(root / "mine.txt"))
    assert (root / "mine.txt").read_text() == "keep"
