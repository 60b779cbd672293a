"""Shaped rewards are finite: non-finite or overflowing --lambda/--gamma and step scores that
are not probabilities are refused on one line, and no rewards file is written."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from analyses.budgetmix.rewards import ShapedRewardOptions, export_shaped_rewards
from analyses.budgetmix.shaping import ShapingOptions, shape_rewards
from recovery.errors import InputProblem, UsageProblem
from tests.analyses.budgetmix.helpers import copy_to_file
from tests.analyses.budgetmix.helpers import scored_store as make_scored_store
from tests.cli_support import run_cli


@pytest.fixture
def scored_store(memory_store):
    return make_scored_store(memory_store)


def _error_lines(result) -> list[str]:
    """The lines that report the error (a usage error also prints the usage and a hint)."""
    return [line for line in result.output.splitlines() if line.startswith("Error")]


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (("--lambda", "nan"), "--lambda must be a finite number, got nan"),
        (("--gamma", "nan"), "--gamma must be a finite number, got nan"),
        (("--lambda", "inf"), "--lambda must be a finite number, got inf"),
        (("--gamma", "-inf"), "--gamma must be a finite number, got -inf"),
    ],
    ids=["lambda-nan", "gamma-nan", "lambda-inf", "gamma-minus-inf"],
)
def test_non_finite_lambda_or_gamma_is_refused(scored_store, tmp_path, options, fragment):
    store = copy_to_file(scored_store, tmp_path / "s.duckdb")
    out = tmp_path / "r.jsonl"
    result = run_cli("budgetmix", "rewards", "--store", store, "--model", "m", "--out", out,
                     *options)
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert not out.exists()


def test_overflowing_rewards_are_refused(scored_store, tmp_path):
    store = copy_to_file(scored_store, tmp_path / "s.duckdb")
    out = tmp_path / "r.jsonl"
    result = run_cli("budgetmix", "rewards", "--store", store, "--model", "m", "--out", out,
                     "--lambda", "1e308", "--gamma", "1e308")
    assert result.exit_code == 2, result.output
    (line,) = _error_lines(result)
    assert "overflow" in line and "--lambda" in line and "--gamma" in line
    assert not out.exists()


def test_large_finite_lambda_still_writes_finite_json(scored_store, tmp_path):
    out = tmp_path / "r.jsonl"
    export_shaped_rewards(scored_store, "m", out, ShapedRewardOptions(lam=1e300, gamma=1.0))
    rewards = [json.loads(line)["reward"] for line in out.read_text().splitlines()]
    assert rewards and all(isinstance(r, float) and math.isfinite(r) for r in rewards)


@pytest.mark.parametrize("bad", [1.5, -0.25, float("nan")], ids=["above-1", "below-0", "nan"])
def test_step_scores_that_are_not_probabilities_are_refused(scored_store, tmp_path, bad):
    victim, t = scored_store.execute(
        "SELECT traj_id, t FROM step_scores WHERE model = 'm' ORDER BY traj_id, t LIMIT 1"
    ).fetchone()
    scored_store.execute(
        "UPDATE step_scores SET score = ? WHERE model = 'm' AND traj_id = ? AND t = ?",
        [bad, victim, t])
    out = tmp_path / "r.jsonl"
    with pytest.raises(InputProblem) as info:
        export_shaped_rewards(scored_store, "m", out)
    message = str(info.value)
    assert "'m'" in message and victim in message and f"turn {t}" in message
    assert "[0, 1]" in message
    assert not out.exists()
    store = copy_to_file(scored_store, tmp_path / "s.duckdb")
    result = run_cli("budgetmix", "rewards", "--store", store, "--model", "m", "--out", out)
    assert result.exit_code == 1 and result.output.splitlines() == _error_lines(result), (
        result.output)
    assert len(_error_lines(result)) == 1
    assert victim in result.output and not out.exists()


def test_a_bad_score_in_a_run_not_exported_does_not_matter(scored_store, tmp_path):
    scored_store.execute("UPDATE trajectories SET run = 'other' WHERE traj_id = ("
                         "SELECT min(traj_id) FROM trajectories)")
    scored_store.execute(
        "UPDATE step_scores SET score = 7 WHERE traj_id = (SELECT min(traj_id) FROM "
        "trajectories)")
    result = export_shaped_rewards(scored_store, "m", tmp_path / "r.jsonl", ShapedRewardOptions(runs=["base"]))
    assert result.n_trajectories > 0


def test_shape_rewards_refuses_non_finite_weights():
    ones = np.ones(2)
    first, last = np.array([True, False]), np.array([False, True])
    with pytest.raises(UsageProblem, match="lambda must be a finite number"):
        shape_rewards(ones * 0.5, first, last, ones, ShapingOptions(lam=float("nan")))
    with pytest.raises(UsageProblem, match="gamma must be a finite number"):
        shape_rewards(ones * 0.5, first, last, ones, ShapingOptions(gamma=float("inf")))
