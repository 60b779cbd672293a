"""Budget schedules: uniform, mixture, the weights formula, sampling, the JSON file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analyses.budgetmix.evidence import adaptive_schedule
from analyses.budgetmix.schedule import (
    BudgetSchedule,
    budget_range,
    evidence_weights,
    mixture_schedule,
    parse_budget_range,
    uniform_schedule,
)
from recovery.errors import UsageProblem
from tests.analyses.budgetmix.helpers import budgeted_store


def test_uniform_and_range():
    schedule = uniform_schedule(budget_range(4, 16, 4))
    assert schedule.budgets == [4, 8, 12, 16]
    assert schedule.weights == pytest.approx([0.25] * 4)
    assert schedule.strategy == "uniform"
    assert parse_budget_range("4:6") == [4, 5, 6]
    assert parse_budget_range("4:32:8") == [4, 12, 20, 28]
    for bad in ("4", "a:b", "8:4", "0:4", "4:8:0"):
        with pytest.raises(UsageProblem):
            parse_budget_range(bad)


def test_mixture_normalises_sorts_and_validates():
    schedule = mixture_schedule([16, 4], [3.0, 1.0])
    assert schedule.budgets == [4, 16]
    assert schedule.weights == pytest.approx([0.25, 0.75])
    assert sum(schedule.weights) == pytest.approx(1.0)
    assert schedule.mean_budget() == pytest.approx(4 * 0.25 + 16 * 0.75)
    with pytest.raises(UsageProblem, match="one weight per budget"):
        mixture_schedule([4, 8], [1.0])
    with pytest.raises(UsageProblem, match="non-negative"):
        mixture_schedule([4, 8], [1.0, -1.0])
    with pytest.raises(UsageProblem, match="non-negative"):
        mixture_schedule([4, 8], [0.0, 0.0])
    with pytest.raises(UsageProblem, match="repeated"):
        mixture_schedule([4, 4], [1.0, 1.0])
    with pytest.raises(UsageProblem, match="positive"):
        mixture_schedule([0, 4], [1.0, 1.0])


def test_sample_follows_weights():
    schedule = mixture_schedule([5, 10, 20], [0.6, 0.3, 0.1])
    draws = schedule.sample(np.random.default_rng(0), 20_000)
    assert set(np.unique(draws)) <= {5, 10, 20}
    freq = [(draws == b).mean() for b in (5, 10, 20)]
    assert freq == pytest.approx([0.6, 0.3, 0.1], abs=0.015)
    # seeded draws repeat
    assert np.array_equal(schedule.sample(3, 50), schedule.sample(3, 50))


def test_schedule_json_round_trip(tmp_path, con, memory_store):
    budgeted_store(memory_store, {4: 0.2, 8: 0.6, 16: 0.9})
    schedule = adaptive_schedule(con, [4, 8, 16])
    path = schedule.save(tmp_path / "s.json")
    data = json.loads(path.read_text())
    assert data["format"] == "budgetmix-schedule" and data["version"] == 1
    assert [e["budget"] for e in data["evidence"]] == [4, 8, 16]
    loaded = BudgetSchedule.load(path)
    assert loaded.budgets == schedule.budgets
    assert loaded.weights == pytest.approx(schedule.weights)
    assert loaded.evidence == schedule.evidence
    assert loaded.evidence_kind == "shortfall"
    (tmp_path / "bad.json").write_text('{"budgets": [1], "weights": [1]}')
    with pytest.raises(UsageProblem, match=r"bad\.json"):
        BudgetSchedule.load(tmp_path / "bad.json")


def test_evidence_weights_formula():
    w = evidence_weights([0.7, 0.3, 0.0], floor=0.2)
    expected = np.array([0.2 / 3 + 0.8 * 0.7, 0.2 / 3 + 0.8 * 0.3, 0.2 / 3])
    assert w == pytest.approx(expected)
    assert evidence_weights([0.0, 0.0], floor=0.2) == pytest.approx([0.5, 0.5])
    assert evidence_weights([1.0, 3.0], floor=1.0) == pytest.approx([0.5, 0.5])
    assert evidence_weights([1.0, 3.0], floor=0.0) == pytest.approx([0.25, 0.75])
    with pytest.raises(ValueError):
        evidence_weights([-1.0, 1.0])
