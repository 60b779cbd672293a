"""The Ray engine without a cluster: nothing of Ray is loaded unless ``--engine ray`` is asked
for, a missing Ray says how to install it, what the engine refuses, and the driver's rules for
the files of one call (a task's work run in this process). The engine on a two-node cluster:
tests/integration/test_ray.py (``make test-ray``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recovery.store import IngestOptions, open_store
from recovery.store.ray_ingest import ingest_staged
from tests.cli_support import run_cli
from tests.conftest import REPO
from tests.recovery.store.test_folder import rows, snapshot


@pytest.fixture(scope="module")
def sim_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two simulated runs, one canonical file each."""
    out = tmp_path_factory.mktemp("sim")
    result = run_cli("simulate", "--out", out, "--tasks", "12", "--samples", "3", "--seed", "5")
    assert result.exit_code == 0, result.output
    return sorted(out.glob("*.jsonl"))


def test_nothing_of_ray_is_loaded_by_a_local_ingest_and_analyze(tmp_path: Path,
                                                                 sim_files: list[Path]) -> None:
    code = f"""
import sys
from click.testing import CliRunner
from agent_recovery_cli.recovery import main
import analyses.report.analyze, analyses.task_stats_ray, recovery.store.ray_ingest
files = {[str(p) for p in sim_files]!r}
store = {str(tmp_path / "s")!r} + "/"
runner = CliRunner()
assert runner.invoke(main, ["ingest", *files, "--store", store]).exit_code == 0
result = runner.invoke(main, ["analyze", "--store", store, "--n-boot", "0", "--quiet",
                              "--json", {str(tmp_path / "r.json")!r}])
assert result.exit_code == 0, result.output
print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert json.loads((tmp_path / "r.json").read_text())["runs"]


@pytest.mark.parametrize("command", ["ingest", "analyze"])
def test_engine_ray_without_ray_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sim_files: list[Path],
        command: str) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if not installed
    result = run_cli(command, *sim_files, "--store", f"{tmp_path / 's'}/", "--engine", "ray")
    assert result.exit_code == 2
    assert "pip install 'agent-recovery[ray]'" in result.output
    assert not (tmp_path / "s").exists()  # refused before the store was made


@pytest.mark.parametrize(("command", "extra", "says"), [
    ("ingest", ["--store", "s.duckdb"], "needs a folder store"),
    ("ingest", [], "needs a folder store"),
    ("ingest", ["--store", "s3://bucket/runs"], "object storage is not supported"),
    ("ingest", ["--store", "s/", "--workers", "0"], "--workers: give 1 or more"),
    ("ingest", ["--store", "s/", "--workers", "2", "--engine", "local"], "--workers is for"),
    ("analyze", ["--store", "s.duckdb"], "needs a folder store"),
    ("analyze", ["--store", "s/", "--workers", "2", "--engine", "local"], "--workers is for"),
    ("analyze", ["--store", "s/", "--by", "env"], "does not take --by"),
    ("analyze", ["--store", "s/", "--where", "budget = 10"], "does not take --where"),
])
def test_engine_ray_refuses_what_it_cannot_do(tmp_path: Path, sim_files: list[Path],
                                              monkeypatch: pytest.MonkeyPatch, command: str,
                                              extra: list[str], says: str) -> None:
    monkeypatch.chdir(tmp_path)
    engine = [] if "--engine" in extra else ["--engine", "ray"]
    result = run_cli(command, *sim_files, *extra, *engine)
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert not any(tmp_path.iterdir())


def in_process(task, calls):
    """A runner of :func:`ingest_staged` that runs each task here, one after the other."""
    return [task(*call) for call in calls], None


def failing_second(task, calls):
    """A runner whose second task dies (as a worker would) after the first finished."""
    return [task(*calls[0]), None], (1, RuntimeError("worker died"))


def clash_file(tmp_path: Path, rl: Path) -> Path:
    """A file holding rl's first record under base's run label (base's trajectory id)."""
    record = json.loads(rl.read_text().splitlines()[0])
    record["run"] = "base"
    clash = tmp_path / "clash.jsonl"
    clash.write_text(json.dumps(record) + "\n")
    return clash


def test_one_call_settles_its_files_as_the_local_engine_does(tmp_path: Path,
                                                              sim_files: list[Path]) -> None:
    """The same bytes twice: the second skipped; a file repeating a trajectory of an earlier
    one: failed with the local engine's message; then a file already in the store: skipped."""
    base, rl = sim_files
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(base.read_bytes())
    inputs = [base, copy, clash_file(tmp_path, rl), rl]
    local = open_store(f"{tmp_path / 'local'}/")
    expected = local.ingest_files(inputs)
    store = open_store(f"{tmp_path / 'ray'}/")
    results = ingest_staged(store, inputs, IngestOptions(), in_process)
    assert [(r.status, r.error) for r in results] == [(r.status, r.error) for r in expected]
    assert [r.status for r in results] == ["ingested", "skipped", "failed", "ingested"]
    assert "already in the store" in (results[2].error or "")
    assert snapshot(store.con) == snapshot(local.con)
    manifest = json.loads((tmp_path / "ray" / "_store.json").read_text())
    assert manifest["generation"] == 1  # one commit for the call
    assert not list((tmp_path / "ray" / "_tmp").iterdir())
    again = ingest_staged(store, [rl, base], IngestOptions(), in_process)
    assert [r.status for r in again] == ["skipped", "skipped"]
    assert snapshot(open_store(f"{tmp_path / 'ray'}/").con) == snapshot(local.con)


def test_a_trajectory_already_in_the_store_fails_the_file_as_locally(
        tmp_path: Path, sim_files: list[Path]) -> None:
    base, rl = sim_files
    clash = clash_file(tmp_path, rl)
    stores = [open_store(f"{tmp_path / name}/") for name in ("local", "ray")]
    for store in stores:
        store.ingest_file(base)
    (expected,) = stores[0].ingest_files([clash, rl])[:1]
    results = ingest_staged(stores[1], [clash, rl], IngestOptions(), in_process)
    assert (results[0].status, results[0].error) == ("failed", expected.error)
    assert "already in the store" in (expected.error or "")
    assert rows(stores[1].con, "ingests") == rows(stores[0].con, "ingests")


def test_a_failed_task_leaves_nothing_committed(tmp_path: Path, sim_files: list[Path]) -> None:
    from recovery.store.ray_cluster import RayTaskFailed

    store = open_store(f"{tmp_path / 's'}/")
    store.ingest_file(sim_files[0])
    before = (tmp_path / "s" / "_store.json").read_text()
    files_before = sorted(p for p in (tmp_path / "s").rglob("*") if "_tmp" not in p.parts)
    copy = tmp_path / "other.jsonl"
    copy.write_text(sim_files[1].read_text())
    with pytest.raises(RayTaskFailed, match="nothing was committed"):
        ingest_staged(store, [sim_files[1], copy], IngestOptions(), failing_second)
    assert (tmp_path / "s" / "_store.json").read_text() == before
    assert sorted(p for p in (tmp_path / "s").rglob("*") if "_tmp" not in p.parts) == files_before
    assert not list((tmp_path / "s" / "_tmp").iterdir())  # the first task's partitions: gone
    assert [r.status for r in store.ingest_files([sim_files[1]])] == ["ingested"]


def test_records_skipped_with_skip_bad_are_reported_as_locally(tmp_path: Path,
                                                               sim_files: list[Path]) -> None:
    lines = sim_files[0].read_text().splitlines()
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("\n".join([lines[0], '{"run": 1}', lines[1], "not json"]) + "\n")
    options = IngestOptions(skip_bad=True)
    (expected,) = open_store(f"{tmp_path / 'local'}/").ingest_files([mixed], options)
    (result,) = ingest_staged(open_store(f"{tmp_path / 'ray'}/"), [mixed], options, in_process)
    assert [str(e) for e in result.skipped] == [str(e) for e in expected.skipped]
    assert len(result.skipped) == 2 and result.summary() == expected.summary()


def test_a_run_label_too_long_for_a_folder_fails_as_locally(tmp_path: Path,
                                                            sim_files: list[Path]) -> None:
    options = IngestOptions(run="r" * 300)
    (expected,) = open_store(f"{tmp_path / 'local'}/").ingest_files([sim_files[0]], options)
    store = open_store(f"{tmp_path / 'ray'}/")
    (result,) = ingest_staged(store, [sim_files[0]], options, in_process)
    assert (result.status, result.error) == ("failed", expected.error)
    assert "run label is too long" in (expected.error or "")
