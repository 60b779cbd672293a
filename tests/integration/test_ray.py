"""The Ray engine on a two-node Ray cluster started on this machine (``make test-ray``).

A head and one more node (``ray.cluster_utils.Cluster``), 1 CPU and a 100 MiB object store
each. ``recovery ingest --engine ray`` must store exactly what the local engine stores and say
the same about every file; ``recovery analyze --engine ray`` must write the same ``--json``
(timings aside); the statistics computed on the cluster must equal ``task_statistics`` on
the whole store. Skipped when Ray is not installed; left out of ``make test`` (marker ``ray``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.cli_support import run_cli
from tests.recovery.store.test_folder import snapshot

ray = pytest.importorskip(
    "ray", reason="Ray is not installed: make test-ray installs the ray extra "
                  "(pip install 'agent-recovery[ray]')")

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster():
    """A two-node Ray cluster on this machine, joined by this process for the module."""
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": 100 * 1024**2})
    nodes.add_node(num_cpus=1, object_store_memory=100 * 1024**2)
    ray.init(address=nodes.address, logging_level="WARNING", log_to_driver=False)
    nodes.wait_for_nodes()
    try:
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of inputs: two simulated runs at budgets 10 and 20, split into six files
    (each run's tasks by remainder), a copy of one, a file repeating a trajectory of another
    under its run label, and a file with a bad record."""
    out = tmp_path_factory.mktemp("inputs")
    sim = out / "sim"
    result = run_cli("simulate", "--out", sim, "--tasks", "24", "--samples", "3",
                     "--budgets", "10,20", "--seed", "7")
    assert result.exit_code == 0, result.output
    for run_file in sorted(sim.glob("*.jsonl")):
        lines = run_file.read_text().splitlines()
        for part in range(3):
            (out / f"{run_file.stem}-{part}.jsonl").write_text(
                "".join(line + "\n" for line in lines if json.loads(line)["task_id"].endswith(
                    tuple("0123456789"[part::3]))))
    shutil.rmtree(sim)
    shutil.copy(out / "base-0.jsonl", out / "base-0-copy.jsonl")
    record = json.loads((out / "rl-1.jsonl").read_text().splitlines()[0])
    record["run"] = "base"  # base-1.jsonl holds base's trajectory of this task and sample
    (out / "clash.jsonl").write_text(json.dumps(record) + "\n")
    (out / "bad.jsonl").write_text('{"run": "x", "task_id": 1, "turns": [\n')
    return out


def _names(inputs: Path) -> list[str]:
    """The inputs, relative to their folder (read from the driver's working folder)."""
    return ["base-0.jsonl", "rl-0.jsonl", "base-0-copy.jsonl", "base-1.jsonl", "clash.jsonl",
            "rl-1.jsonl", "bad.jsonl", "base-2.jsonl", "rl-2.jsonl"]


def _messages(stderr: str) -> list[str]:
    """The lines of ``stderr`` without the local engine's progress bar."""
    lines = (line.strip() for line in re.split(r"[\r\n]", stderr))
    return [line for line in lines if line and not line.startswith("ingest:")]


def test_the_cluster_has_two_nodes_of_one_cpu(cluster) -> None:
    alive = [node for node in ray.nodes() if node["Alive"]]
    assert len(alive) == 2
    assert ray.cluster_resources()["CPU"] == 2


def test_ingest_on_ray_stores_and_says_what_the_local_engine_does(
        cluster, inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import recovery.store.ray_ingest as ray_ingest
    from recovery.store import open_store

    real, seen = ray_ingest.stage_file, tmp_path / "nodes"
    seen.mkdir()

    def stage_and_note_the_node(*args):  # pickled by value: runs on the workers
        import ray as ray_on_worker

        staged = real(*args)
        (seen / ray_on_worker.get_runtime_context().get_node_id()).touch()
        return staged

    monkeypatch.setattr(ray_ingest, "stage_file", stage_and_note_the_node)
    monkeypatch.chdir(inputs)
    on_ray = run_cli("ingest", *_names(inputs), "--store", f"{tmp_path / 'ray'}/",
                     "--engine", "ray")
    local = run_cli("ingest", *_names(inputs), "--store", f"{tmp_path / 'local'}/")
    assert (on_ray.exit_code, local.exit_code) == (1, 1)  # bad.jsonl and clash.jsonl failed
    assert on_ray.stdout.replace("ray/", "S/") == local.stdout.replace("local/", "S/")
    assert _messages(on_ray.stderr) == _messages(local.stderr)
    assert "already ingested (same sha256), skipped" in on_ray.stdout
    assert "2 of 9 files failed" in on_ray.stderr
    assert snapshot(open_store(tmp_path / "ray", read_only=True).con) == snapshot(
        open_store(tmp_path / "local", read_only=True).con)
    assert len(list(seen.iterdir())) == 2  # tasks ran on both nodes
    assert not list((tmp_path / "ray" / "_tmp").iterdir())


def test_a_dead_worker_commits_nothing(cluster, inputs: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import recovery.store.ray_ingest as ray_ingest

    store = f"{tmp_path / 's'}/"
    assert run_cli("ingest", inputs / "base-0.jsonl", "--store", store).exit_code == 0
    before = {p: p.read_bytes() for p in (tmp_path / "s").rglob("*")
              if p.is_file() and "_tmp" not in p.parts}
    real = ray_ingest.stage_file

    def dies_on_rl_2(*args):  # pickled by value: runs on the workers
        if args[2].endswith("rl-2.jsonl"):
            os._exit(1)
        return real(*args)

    monkeypatch.setattr(ray_ingest, "stage_file", dies_on_rl_2)
    files = [inputs / name for name in ("rl-0.jsonl", "base-1.jsonl", "rl-2.jsonl")]
    result = run_cli("ingest", *files, "--store", store, "--engine", "ray")
    assert result.exit_code == 1
    (line,) = [x for x in result.output.splitlines() if x.startswith("Error")]
    assert "rl-2.jsonl failed" in line and "nothing was committed" in line
    after = {p: p.read_bytes() for p in (tmp_path / "s").rglob("*")
             if p.is_file() and "_tmp" not in p.parts}
    assert after == before
    assert not list((tmp_path / "s" / "_tmp").iterdir())


def _store(inputs: Path, root: Path, engine: str) -> Path:
    """A folder store of the good inputs, ingested with ``engine``."""
    files = [inputs / n for n in _names(inputs) if n not in ("bad.jsonl", "clash.jsonl")]
    result = run_cli("ingest", *files, "--store", f"{root}/", "--engine", engine)
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture(scope="module")
def ray_store(cluster, inputs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder store of the good inputs, ingested with the Ray engine."""
    return _store(inputs, tmp_path_factory.mktemp("stores") / "ray", "ray")


@pytest.mark.parametrize("mode", ["truncation", "budgeted"])
@pytest.mark.parametrize("with_caps", [False, True])
def test_statistics_on_the_cluster_equal_task_statistics(ray_store: Path, mode: str,
                                                         with_caps: bool) -> None:
    from analyses.task_stats import step_caps, task_statistics
    from analyses.task_stats_ray import ray_statistics_source
    from recovery.store import open_store

    store = open_store(ray_store, read_only=True)
    caps = step_caps(store.con) if with_caps else None
    assert caps is None or len(caps)
    source = ray_statistics_source(ray_store)
    for runs in (None, ["rl"]):
        on_ray = source(runs, mode, caps)
        assert len(on_ray.cell_n) and on_ray.equals(
            task_statistics(store.con, runs, mode, caps=caps))


def test_ingest_and_analyze_on_ray_write_the_local_json(ray_store: Path, inputs: Path,
                                                        tmp_path: Path) -> None:
    import inspect

    from analyses.report.build import build_report

    if "statistics" not in inspect.signature(build_report).parameters:
        pytest.skip("build_report does not take statistics= yet")
    stores = {"local": _store(inputs, tmp_path / "local", "local"), "ray": ray_store}
    reports = []
    for engine, store in stores.items():
        out = tmp_path / f"{engine}.json"
        result = run_cli("analyze", "--store", store, "--engine", engine, "--json", out,
                         "--n-boot", "30", "--quiet")
        assert result.exit_code == 0, result.output
        report = json.loads(out.read_text())
        report.pop("timings", None)
        report.pop("cpu_timings", None)
        reports.append(report)
    assert reports[0]["runs"] and reports[0] == reports[1]


def test_the_command_joins_the_cluster_ray_address_names(cluster, inputs: Path,
                                                         tmp_path: Path) -> None:
    """A fresh ``recovery ingest --engine ray`` process joins the running cluster through
    ``RAY_ADDRESS`` (it starts none of its own) and leaves it running."""
    import subprocess
    import sys

    recovery = Path(sys.executable).with_name("recovery")
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    jobs = len(ray._private.state.jobs())  # the cluster's drivers so far (Ray's own table)
    done = subprocess.run([str(recovery), "ingest", str(inputs / "rl-0.jsonl"), "--store",
                           f"{tmp_path / 's'}/", "--engine", "ray"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "rl-0.jsonl: " in done.stdout and "trajectories" in done.stdout
    assert len(ray._private.state.jobs()) == jobs + 1  # the command was a driver of it
    assert len([node for node in ray.nodes() if node["Alive"]]) == 2
