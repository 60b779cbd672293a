"""Piped, the data-quality tables stay within 100 columns: runs side by side while they fit,
long cells wrapped at words."""

from __future__ import annotations

import re

import pytest

from tests.cli_support import run_cli


def quality_section(output: str) -> list[str]:
    """The lines from the data-quality heading to the first run's heading."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "data quality" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("Shares are"))
    return lines[start:end]


@pytest.fixture(scope="module")
def piped(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``recovery analyze`` of three simulated runs with budgets and caps (long cells), as a
    pipe sees it (the test runner's output is not a terminal)."""
    tmp = tmp_path_factory.mktemp("narrow")
    for seed in (1, 2):
        assert run_cli("simulate", "--out", tmp / f"sim{seed}", "--budgets", "10,20",
                       "--tasks", "5", "--samples", "2", "--seed", seed).exit_code == 0
    store = tmp / "s.duckdb"
    assert run_cli("ingest", tmp / "sim1" / "base.jsonl", tmp / "sim1" / "rl.jsonl",
                   "--store", store).exit_code == 0
    assert run_cli("ingest", tmp / "sim2" / "base.jsonl", "--run", "mid",
                   "--store", store).exit_code == 0
    result = run_cli("analyze", "--store", store, "--n-boot", "0")
    assert result.exit_code == 0, result.output
    return result.stdout


def test_piped_data_quality_tables_are_at_most_100_columns(piped: str) -> None:
    section = quality_section(piped)
    assert max(len(line.rstrip()) for line in section) <= 100, "\n".join(section)


def test_every_run_and_every_row_is_still_there(piped: str) -> None:
    text = "\n".join(quality_section(piped))
    for run in ("base", "rl", "mid"):
        assert re.search(rf"\b{run}\b", text)
    for label in ("trajectories", "step cap", "ended: crash", "budgets"):
        assert label in text
    # the long step-cap cell is wrapped, not cut: its words are all there
    assert "written in the data" in " ".join(text.split())
