"""`recovery analyze` through click's CliRunner: real tau-bench data and simulated runs."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner, Result

from agent_recovery_cli.recovery import main
from analyses.decompose import DecomposeOptions, decompose
from analyses.frames import trajectories_frame, turn_flags_frame
from analyses.passkt import GridOptions, pass_at_kt, pass_hat_kt
from recovery.simulate import PRESETS, SimConfig, write_runs
from recovery.store import open_store

COMPONENTS = ("delta", "model_delta", "single_step", "recovery", "residual")


def run(*args: object) -> Result:
    result = CliRunner().invoke(main, ["analyze", *(str(a) for a in args)])
    # User mistakes end in a message and an exit code, never in a traceback.
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    assert "Traceback" not in result.output
    return result


def _is_num(value: Any) -> bool:
    """A JSON number or null (NaN is written as null)."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                             and math.isfinite(value))


def check_schema(data: dict[str, Any]) -> None:
    """The shape `--json` promises (other keys may be added)."""
    assert data["mode"] in ("truncation", "budgeted")
    assert isinstance(data["runs"], dict) and data["runs"]
    for run_data in data["runs"].values():
        assert isinstance(run_data["n_tasks"], int) and isinstance(run_data["n_trajectories"], int)
        for key in ("pass_at_kt", "pass_hat_kt"):
            assert run_data[key], key
            for cell in run_data[key]:
                assert isinstance(cell["k"], int) and cell["k"] >= 1
                assert cell["t"] is None or isinstance(cell["t"], int)
                assert all(_is_num(cell[f]) for f in ("value", "lo", "hi"))
                assert isinstance(cell["n_tasks"], int)
                assert cell["value"] is None or 0.0 <= cell["value"] <= 1.0
        for row in run_data["descriptive"]:
            assert row["t"] is None or isinstance(row["t"], int)
            assert all(_is_num(row[f]) for f in ("e", "c", "r"))
        for row in run_data["model_fit"]:
            assert set(row) == {"t", "empirical", "model"}
            assert _is_num(row["empirical"]) and _is_num(row["model"])
        assert isinstance(run_data["errors"], dict) and isinstance(run_data["recovery"], dict)
    assert isinstance(data["comparisons"], list)
    for comp in data["comparisons"]:
        assert isinstance(comp["baseline"], str) and isinstance(comp["candidate"], str)
        for row in comp["by_t"]:
            assert row["t"] is None or isinstance(row["t"], int)
            assert all(_is_num(row[name]) for name in COMPONENTS)
            assert set(row["lo"]) == set(COMPONENTS) == set(row["hi"])
            assert all(_is_num(v) for v in [*row["lo"].values(), *row["hi"].values()])


def load_json(path: Path) -> dict[str, Any]:
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text)
    check_schema(data)
    return data


@pytest.fixture(scope="module")
def sim_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Small simulated `base` and `rl` runs (30 tasks x 4 samples, budget 20)."""
    out = tmp_path_factory.mktemp("sim")
    config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
                       n_tasks=30, n_samples=4, budgets=[20], seed=1)
    return write_runs(config, out)


# ------------------------------------------------------------------------------------------
# Real data


def test_tau_bench_pass_at_k_with_no_limit_and_drop(tau_airline: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = run(tau_airline, "--json", out)
    assert result.exit_code == 0, result.output
    data = load_json(out)
    (run_data,) = data["runs"].values()
    no_limit = {c["k"]: round(c["value"], 4) for c in run_data["pass_at_kt"] if c["t"] is None}
    assert no_limit == {1: 0.42, 2: 0.5667, 3: 0.66, 4: 0.72}
    assert run_data["n_tasks"] == 50 and run_data["n_trajectories"] == 200
    # The report says how much each K falls at smaller T.
    assert "drop vs no limit" in result.stdout
    smallest = min(t for t in data["ts"] if t is not None)
    for cell in run_data["pass_at_kt"]:
        if cell["t"] == smallest:
            assert cell["drop"] == pytest.approx(no_limit[cell["k"]] - cell["value"], abs=1e-4)
            assert cell["drop"] > 0
    assert run_data["errors"]["n_error_turns"] == 73
    assert run_data["errors"]["n_trajectories_with_error"] == 36
    assert data["comparisons"] == []
    assert "one run: no decomposition" in result.stdout


# ------------------------------------------------------------------------------------------
# Simulated runs: the demo's command on a small scale


def test_two_runs_with_store_json_and_html(sim_runs: list[Path], tmp_path: Path) -> None:
    store, out, page = tmp_path / "runs.duckdb", tmp_path / "r.json", tmp_path / "r.html"
    args = [*sim_runs, "--baseline", "base", "--store", store, "--n-boot", 30, "--strata", 2,
            "--seed", 4]
    result = run(*args, "--json", out, "--html", page)
    assert result.exit_code == 0, result.output
    data = load_json(out)
    assert set(data["runs"]) == {"base", "rl"}
    assert data["ks"] == [1, 2, 3, 4] and data["ts"][-1] is None
    assert "rl vs base" in result.stdout and "mode: truncation" in result.stdout

    opened = open_store(store, read_only=True)
    try:
        traj, flags = trajectories_frame(opened.con), turn_flags_frame(opened.con)
    finally:
        opened.close()
    ts = data["ts"]
    grid = pass_at_kt(traj, GridOptions(ks=data["ks"], ts=ts, n_boot=30, seed=4))
    hat = pass_hat_kt(traj, GridOptions(ks=data["ks"], ts=ts, n_boot=30, seed=4))
    for frame, key in ((grid, "pass_at_kt"), (hat, "pass_hat_kt")):
        for row in frame.itertuples():
            t = None if pd.isna(row.t) else int(row.t)
            cell = next(c for c in data["runs"][row.run][key] if c["k"] == row.k and c["t"] == t)
            assert cell["value"] == pytest.approx(row.value)
            assert cell["lo"] == pytest.approx(row.lo) and cell["hi"] == pytest.approx(row.hi)
    (comp,) = data["comparisons"]
    assert (comp["baseline"], comp["candidate"]) == ("base", "rl")
    expected = decompose(traj, flags, "base", "rl", ts,
                         DecomposeOptions(strata=2, n_boot=30, seed=4))
    for got, (_, want) in zip(comp["by_t"], expected.iterrows(), strict=True):
        for name in COMPONENTS:
            assert got[name] == pytest.approx(want[name])
            assert got["lo"][name] == pytest.approx(want[f"{name}_lo"])
        assert got["single_step"] + got["recovery"] == pytest.approx(got["model_delta"])

    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert len(re.findall(r'src="data:image/png;base64,', html)) == 10
    assert not re.search(r'(src|href)="(?!data:)', html)

    again = run(*args, "--json", tmp_path / "again.json", "--quiet")
    assert again.exit_code == 0, again.output
    assert "already ingested" in again.stderr
    assert again.stdout == ""
    assert load_json(tmp_path / "again.json") == data


def test_only_the_given_files_runs_are_analysed(sim_runs: list[Path], tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    assert run(*sim_runs, "--store", store, "--n-boot", 0, "--quiet").exit_code == 0
    base_only = tmp_path / "base.json"
    result = run(sim_runs[0], "--store", store, "--n-boot", 0, "--json", base_only, "--quiet")
    assert result.exit_code == 0, result.output
    assert set(load_json(base_only)["runs"]) == {"base"}
    everything = tmp_path / "all.json"
    result = run("--store", store, "--n-boot", 0, "--json", everything, "--quiet")
    assert result.exit_code == 0, result.output
    assert set(load_json(everything)["runs"]) == {"base", "rl"}


def test_k_t_and_mode_options(tmp_path: Path) -> None:
    config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
                       n_tasks=12, n_samples=2, budgets=[6, 12], seed=2)
    files = write_runs(config, tmp_path / "runs")
    out = tmp_path / "t.json"
    result = run(*files, "--k", "1,2", "--t", "4,none", "--n-boot", 0, "--json", out, "--quiet")
    assert result.exit_code == 0, result.output
    data = load_json(out)
    assert data["ks"] == [1, 2] and data["ts"] == [4, None] and data["mode"] == "truncation"
    assert any("several budgets" in note for note in data["notes"])

    out = tmp_path / "b.json"
    result = run(*files, "--mode", "budgeted", "--n-boot", 0, "--json", out, "--quiet")
    assert result.exit_code == 0, result.output
    data = load_json(out)
    assert data["mode"] == "budgeted" and data["ts"] == [6, 12] and data["reference_t"] == 12
    assert "budgeted" in data["mode_description"]


# ------------------------------------------------------------------------------------------
# Mistakes


def test_usage_errors(sim_runs: list[Path], tmp_path: Path) -> None:
    result = run()
    assert result.exit_code == 2 and "give input FILES" in result.output
    result = run("--store", tmp_path / "missing.duckdb")
    assert result.exit_code == 2 and "does not exist" in result.output
    result = run(*sim_runs, "--baseline", "nope", "--n-boot", 0)
    assert result.exit_code == 2 and "baseline run 'nope' not found" in result.output
    result = run(*sim_runs, "--t", "ten")
    assert result.exit_code == 2 and "'ten' is not a turn limit" in result.output
    result = run(*sim_runs, "--mode", "budgeted", "--t", "5,none")
    assert result.exit_code == 2 and "no limit" in result.output
    result = run(*sim_runs, "--memory-limit", "lots")
    assert result.exit_code == 2 and "--memory-limit: give a size" in result.output


def test_a_folder_store_past_its_memory_limit_says_to_raise_it(sim_runs: list[Path],
                                                               tmp_path: Path) -> None:
    store = f"{tmp_path / 'store'}/"
    assert run(*sim_runs, "--store", store, "--n-boot", 0, "--quiet").exit_code == 0
    result = run("--store", store, "--n-boot", 0, "--quiet", "--memory-limit", "1KB")
    assert result.exit_code == 2 and "more memory than --memory-limit 1KB" in result.output
    assert run("--store", store, "--n-boot", 0, "--quiet").exit_code == 0  # store unharmed


def test_bad_file_names_file_and_fails(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "a", "success": true, "turns": []}\n{not json\n')
    result = run(bad)
    assert result.exit_code == 1
    assert "bad.jsonl:2: malformed JSON" in result.output
    assert "nothing from this file was stored" in result.output


def test_analyze_a_folder_input_twice_with_a_store(tmp_path: Path) -> None:
    """A folder input already in the store (same digest) is found again by its digest."""
    from tests.conftest import REPO

    folder = REPO / "tests" / "fixtures" / "formats" / "balrog"
    store = tmp_path / "s.duckdb"
    outputs = []
    for _ in range(2):
        result = CliRunner().invoke(main, ["analyze", str(folder), "--store", str(store),
                                           "--n-boot", "0", "--json", str(tmp_path / "r.json")])
        assert result.exit_code == 0, result.output
        outputs.append(json.loads((tmp_path / "r.json").read_text()))
    assert "already ingested" in result.stderr
    assert outputs[0]["runs"] == outputs[1]["runs"]
