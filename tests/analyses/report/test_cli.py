"""`recovery analyze` through click's CliRunner: what the terminal, the JSON and the HTML say."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agent_recovery_cli.recovery import main
from recovery.simulate import PRESETS, SimConfig, write_runs


def run(*args: object) -> Result:
    result = CliRunner().invoke(main, ["analyze", *(str(a) for a in args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    return result


@pytest.fixture(scope="module")
def budgets(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """`recovery simulate --budgets 6,12,24` on a small scale: 15 tasks x 2 samples."""
    config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
                       n_tasks=15, n_samples=2, budgets=[6, 12, 24], seed=3)
    return write_runs(config, tmp_path_factory.mktemp("budgets"))


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two runs of 20 tasks x 4 samples at one budget."""
    config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
                       n_tasks=20, n_samples=4, budgets=[20], seed=4)
    return write_runs(config, tmp_path_factory.mktemp("four"))


def test_several_budgets_choose_budgeted_mode_on_the_command_line(budgets, tmp_path):
    out = tmp_path / "r.json"
    result = run(*budgets, "--n-boot", 0, "--json", out)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "mode: budgeted" in text
    assert ("chosen: runs base, rl hold trajectories made at several budgets (6, 12, 24)"
            in text)
    assert "2 samples per task and budget" in text
    data = json.loads(out.read_text())
    assert data["mode"] == "budgeted" and data["ts"] == [6, 12, 24]
    assert data["mode_reason"].startswith("chosen: ")

    result = run(*budgets, "--n-boot", 0, "--mode", "truncation", "--json", out)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "--mode budgeted" in text and "mode='budgeted'" not in text
    assert json.loads(out.read_text())["mode"] == "truncation"


def test_k_without_one_draws_every_plot_and_leaks_no_warning(four, tmp_path):
    page, out = tmp_path / "r.html", tmp_path / "r.json"
    result = run(*four, "--k", "8", "--n-boot", 10, "--html", page, "--json", out)
    assert result.exit_code == 0, result.output
    assert "Warning" not in result.output and "warn(" not in result.output
    data = json.loads(out.read_text())
    assert data["ks"] == [1, 8]
    assert any("K = 1 is added" in n for n in data["notes"])
    assert any("have fewer than K=8 samples" in w for w in data["data_warnings"])
    html = page.read_text()
    # 9 figures and the change of S(T) at every T
    assert len(re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', html)) == 10


def test_json_and_terminal_carry_the_new_sections(four, tmp_path):
    out = tmp_path / "r.json"
    result = run(*four, "--baseline", "base", "--n-boot", 20, "--json", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["headline"][0].startswith("rl vs base: ")
    assert set(data["data_quality"]) == {"base", "rl"}
    assert data["data_quality"]["base"]["empty_action_share"] == 0.0
    assert {"recovery_share", "recovery_share_note", "single_step_share"} <= set(
        data["comparisons"][0]["by_t"][0])
    assert data["comparisons"][0]["pass_at_difference"]
    assert {"e", "c", "r", "strata", "model"} <= set(data["definitions"])
    stdout = result.stdout
    assert stdout.index("headline") < stdout.index("rl vs base: ") < stdout.index("data quality")
    assert stdout.index("data quality") < stdout.index(" rl vs base \u2500")
    assert "Pass@(K,T) difference: rl - base" in stdout
    # Progress never reaches standard output.
    assert "bootstrap resamples ..." not in stdout and "/20 bootstrap" not in stdout
    assert "\u2026" not in stdout
