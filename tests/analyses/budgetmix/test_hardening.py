"""Hostile inputs to BudgetMix schedules and ``assign``: refused exactly, with one clear line.

A schedule's budgets are positive integers (no bools, no floats) up to 2^31 - 1; its weights
are finite non-negative numbers with a positive sum (normalised without overflowing). A
dataset's JSON Lines are read with the project's strict parser (UTF-8, bounded depth).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from analyses.budgetmix.assign import AssignConfig, assign, assign_budgets, row_budget
from analyses.budgetmix.schedule import (
    MAX_BUDGET,
    BudgetSchedule,
    budget_range,
    mixture_schedule,
    parse_budget_range,
    uniform_schedule,
    validate_schedule,
)
from recovery.errors import InputProblem, UsageProblem
from tests.cli_support import run_cli


def _schedule_file(path, budgets, weights, **extra):
    data = {"format": "budgetmix-schedule", "version": 1, "strategy": "mixture",
            "budgets": budgets, "weights": weights, **extra}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _dataset(path, n=4):
    path.write_text("".join(json.dumps({"prompt": f"task {i}"}) + "\n" for i in range(n)),
                    encoding="utf-8")
    return path


def _assign(tmp_path, schedule, dataset=None, *extra):
    dataset = dataset if dataset is not None else _dataset(tmp_path / "train.jsonl")
    return run_cli("budgetmix", "assign", "--schedule", schedule, "--dataset", dataset,
                   "--out", tmp_path / "out.jsonl", *extra)


# ------------------------------------------------------------------------- schedule validation


def test_huge_weights_are_normalised_without_overflow():
    assert mixture_schedule([4, 8], [1e308, 1e308]).weights == [0.5, 0.5]
    assert mixture_schedule([4, 8], [1e308, 3e307]).weights == pytest.approx([1 / 1.3, 0.3 / 1.3])
    assert mixture_schedule([4, 8], [5e-324, 5e-324]).weights == [0.5, 0.5]
    assert validate_schedule([8, 4], [1e308, 1e308]) == ([4, 8], [0.5, 0.5])


@pytest.mark.parametrize(("budgets", "fragment"), [
    ([4.9, 8.2], "budget 4.9 is not an integer"),
    ([4.0, 8], "budget 4.0 is not an integer"),
    ([True, 8], "budget true is not an integer"),
    (["4", 8], 'budget "4" is not an integer'),
    ([None, 8], "budget null is not an integer"),
    ([4, 2**63], "budget 9223372036854775808 is larger than 2147483647"),
    ([4, MAX_BUDGET + 1], "budget 2147483648 is larger than 2147483647"),
    ([0, 4], "budget 0 is not positive"),
    ([np.int64(-3), 4], "budget -3 is not positive"),
])
def test_budgets_must_be_positive_integers_in_range(budgets, fragment):
    with pytest.raises(UsageProblem, match="budgets must be positive integers") as err:
        BudgetSchedule(budgets=budgets, weights=[1.0, 1.0])
    assert fragment in str(err.value)
    assert "np." not in str(err.value)


def test_the_largest_budget_is_accepted():
    schedule = uniform_schedule([1, MAX_BUDGET])
    assert schedule.budgets == [1, MAX_BUDGET]
    assert set(schedule.sample(0, 20).tolist()) <= {1, MAX_BUDGET}


@pytest.mark.parametrize(("weights", "fragment"), [
    ([float("nan"), 1.0], "weight nan is not finite"),
    ([np.float64("inf"), 1.0], "weight inf is not finite"),
    ([1.0, -1.0], "weight -1.0 is negative"),
    ([np.float64(-0.5), 1.0], "weight -0.5 is negative"),
    ([0.0, 0.0], "all weights are 0"),
    ([True, 1.0], "weight true is not a number"),
    (["1", 1.0], 'weight "1" is not a number'),
    ([10**400, 1.0], "weight a 401-digit integer is not finite"),
])
def test_weights_must_be_finite_non_negative_numbers(weights, fragment):
    with pytest.raises(UsageProblem, match="non-negative") as err:
        mixture_schedule([4, 8], weights)
    assert fragment in str(err.value)
    assert "np." not in str(err.value)


def test_the_other_rules_still_name_the_problem():
    with pytest.raises(UsageProblem, match="2 budgets but 1 weights"):
        validate_schedule([4, 8], [1.0])
    with pytest.raises(UsageProblem, match="repeated budget 4"):
        validate_schedule([4, 4], [1.0, 1.0])
    with pytest.raises(UsageProblem, match="at least one budget"):
        validate_schedule([], [])
    with pytest.raises(UsageProblem, match="budgets must be a list"):
        validate_schedule(4, [1.0])  # type: ignore[arg-type]


def test_a_schedule_changed_after_it_was_made_is_checked_before_it_is_written(tmp_path):
    schedule = mixture_schedule([4, 8], [1, 1])
    schedule.budgets = [4.5, 8]
    with pytest.raises(UsageProblem, match=r"budget 4\.5 is not an integer"):
        schedule.save(tmp_path / "s.json")
    assert not (tmp_path / "s.json").exists()


def test_ranges_are_bounded_before_they_are_made():
    with pytest.raises(UsageProblem, match="larger than 2147483647"):
        parse_budget_range("1:9223372036854775808")
    with pytest.raises(UsageProblem, match="10000 budgets at most"):
        budget_range(1, 2_000_000_000)  # refused at once, never built
    assert budget_range(1, MAX_BUDGET, MAX_BUDGET - 1) == [1, MAX_BUDGET]


# -------------------------------------------------------------------------- schedule files


@pytest.mark.parametrize(("budgets", "weights", "fragment"), [
    ([4.9, 8.2], [1, 1], "budget 4.9 is not an integer"),
    ([True, 8], [1, 1], "budget true is not an integer"),
    ([4, 2**63], [1, 1], "budget 9223372036854775808 is larger than 2147483647"),
    ([4, 8], [1, -1], "weight -1 is negative"),
    ([4, 8], ["1", "2"], 'weight "1" is not a number'),
])
def test_load_refuses_a_bad_schedule_naming_the_file(tmp_path, budgets, weights, fragment):
    path = _schedule_file(tmp_path / "s.json", budgets, weights)
    with pytest.raises(UsageProblem) as err:
        BudgetSchedule.load(path)
    assert str(err.value).startswith(f"{path}: ")
    assert fragment in str(err.value) and "np." not in str(err.value)


def test_load_reads_json_strictly(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000, encoding="utf-8")
    with pytest.raises(UsageProblem, match=r"deep\.json: not a BudgetMix schedule: .*nested"):
        BudgetSchedule.load(deep)
    huge = tmp_path / "huge.json"
    huge.write_text('{"format": "budgetmix-schedule", "version": 1, "budgets": [4],'
                    ' "weights": [1e400]}', encoding="utf-8")
    with pytest.raises(UsageProblem, match=r"huge\.json: not a BudgetMix schedule: .*1e400"):
        BudgetSchedule.load(huge)
    missing = _schedule_file(tmp_path / "m.json", [4], [1])
    data = json.loads(missing.read_text())
    del data["weights"]
    missing.write_text(json.dumps(data))
    with pytest.raises(UsageProblem, match=r"m\.json: the schedule has no 'weights'"):
        BudgetSchedule.load(missing)
    versioned = _schedule_file(tmp_path / "v.json", [4], [1], version=True)
    with pytest.raises(UsageProblem, match="unsupported schedule version true"):
        BudgetSchedule.load(versioned)
    evidence = _schedule_file(tmp_path / "e.json", [4], [1], evidence=5)
    with pytest.raises(UsageProblem, match="evidence must be a list of objects"):
        BudgetSchedule.load(evidence)


# ------------------------------------------------------------------------------------ assign


def test_assign_draws_from_huge_weights(tmp_path):
    schedule = _schedule_file(tmp_path / "s.json", [4, 8], [1e308, 1e308])
    result = _assign(tmp_path, schedule)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["max_turns"] for r in rows} <= {4, 8}


@pytest.mark.parametrize(("budgets", "weights", "fragment"), [
    ([4, 2**63], [1, 1], "budget 9223372036854775808 is larger than 2147483647"),
    ([4.9, 8.2], [1, 1], "budget 4.9 is not an integer"),
    ([True, 8], [1, 1], "budget true is not an integer"),
    ([4, 8], [1, float("nan")], "not a BudgetMix schedule"),
])
def test_assign_refuses_a_bad_schedule_in_one_line(tmp_path, budgets, weights, fragment):
    schedule = tmp_path / "s.json"
    schedule.write_text(json.dumps({"format": "budgetmix-schedule", "version": 1,
                                    "budgets": budgets, "weights": weights}), encoding="utf-8")
    result = _assign(tmp_path, schedule)
    assert result.exit_code == 1, result.output
    assert f"Error: {schedule}: " in result.output and fragment in result.output
    assert "np." not in result.output
    assert not (tmp_path / "out.jsonl").exists()
    with pytest.raises(InputProblem, match=fragment):
        assign(AssignConfig(schedule=schedule, dataset=_dataset(tmp_path / "d.jsonl"),
                            out=tmp_path / "o.jsonl"))


def test_assign_refuses_bad_utf8_naming_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n')
    schedule = mixture_schedule([4], [1])
    with pytest.raises(InputProblem, match=r"bad\.jsonl:2: not valid UTF-8"):
        assign_budgets(bad, schedule, tmp_path / "o.jsonl")
    result = _assign(tmp_path, schedule.save(tmp_path / "s.json"), bad)
    assert result.exit_code == 1 and f"{bad}:2: not valid UTF-8" in result.output


def test_assign_refuses_deep_json_naming_file_and_line(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"prompt": "a"}\n{"x": ' + "[" * 5000 + "]" * 5000 + "}\n",
                    encoding="utf-8")
    schedule = mixture_schedule([4], [1])
    with pytest.raises(InputProblem, match=r"deep\.jsonl:2: JSON nested 5001 levels deep"):
        assign_budgets(deep, schedule, tmp_path / "o.jsonl")
    result = _assign(tmp_path, schedule.save(tmp_path / "s.json"), deep)
    assert result.exit_code == 1 and f"{deep}:2: JSON nested" in result.output
    assert not (tmp_path / "out.jsonl").exists()


def test_assign_refuses_non_json_numbers_in_a_row(tmp_path):
    bad = tmp_path / "nan.jsonl"
    bad.write_text('{"prompt": "a", "score": NaN}\n', encoding="utf-8")
    with pytest.raises(InputProblem, match=r"nan\.jsonl:1: .*NaN"):
        assign_budgets(bad, mixture_schedule([4], [1]), tmp_path / "o.jsonl")


def test_assign_refuses_a_lone_surrogate_without_naming_other_commands(tmp_path):
    bad = tmp_path / "sur.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": "\\ud800"}\n', encoding="utf-8")
    with pytest.raises(InputProblem, match=r"sur\.jsonl:2: .*lone UTF-16 surrogate") as err:
        assign_budgets(bad, mixture_schedule([4], [1]), tmp_path / "o.jsonl")
    assert "--skip-bad" not in str(err.value)  # assign has no such option


def test_assign_reads_a_byte_order_mark(tmp_path):
    data = tmp_path / "bom.jsonl"
    data.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\n{"prompt": "b"}\n')
    result = assign_budgets(data, mixture_schedule([4], [1]), tmp_path / "o.jsonl")
    assert result.n_rows == 2


def test_assign_refuses_a_negative_seed(tmp_path):
    schedule = mixture_schedule([4], [1]).save(tmp_path / "s.json")
    result = _assign(tmp_path, schedule, None, "--seed", "-1")
    assert result.exit_code == 2 and "--seed must be 0 or more, got -1" in result.output


def test_row_budget_never_overflows_and_shows_plain_numbers():
    for bad, shown in ((10**400, "a 401-digit integer"), (np.int64(0), "0"), (np.float64(2.5), "2.5"),
                       (float("inf"), "inf"), (MAX_BUDGET + 1, "2147483648")):
        with pytest.raises(InputProblem, match="positive integer") as err:
            row_budget({"max_turns": bad})
        assert str(err.value).endswith(f"got {shown}")
    assert row_budget({"max_turns": np.float64(12.0)}) == 12


# -------------------------------------------------------------------------------------- plan


def test_plan_normalises_huge_weights_and_assign_reads_them(tmp_path):
    out = tmp_path / "s.json"
    result = run_cli("budgetmix", "plan", "--strategy", "mixture", "--budgets", "4,8",
                     "--weights", "1e308,1e308", "--out", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["weights"] == [0.5, 0.5]
    assert _assign(tmp_path, out).exit_code == 0


@pytest.mark.parametrize(("options", "fragment"), [
    (["--strategy", "mixture", "--budgets", "4,8", "--weights", "nan,1"],
     "weight nan is not finite"),
    (["--strategy", "mixture", "--budgets", "4,8", "--weights", "1,-2"],
     "weight -2.0 is negative"),
    (["--strategy", "uniform", "--budgets", "4,9223372036854775808"],
     "budget 9223372036854775808 is larger than 2147483647"),
    (["--strategy", "uniform", "--range", "1:3000000000:1000000"], "larger than 2147483647"),
])
def test_plan_refuses_bad_schedules_in_one_line(tmp_path, options, fragment):
    out = tmp_path / "s.json"
    result = run_cli("budgetmix", "plan", *options, "--out", out)
    assert result.exit_code == 2, result.output
    assert fragment in result.output and "np." not in result.output
    assert not out.exists()


def test_plan_adaptive_refuses_a_budget_out_of_range(tmp_path):
    from recovery.store import open_store
    from tests.analyses.budgetmix.helpers import budgeted_store

    store = tmp_path / "s.duckdb"
    con = open_store(store)
    try:
        budgeted_store(con, {4: 0.2, 8: 0.6}, n_tasks=2, n_samples=2)
    finally:
        con.close()
    result = run_cli("budgetmix", "plan", "--store", store, "--budgets", "4,9223372036854775808")
    assert result.exit_code == 2, result.output
    assert "budget 9223372036854775808 is larger than 2147483647" in result.output
    result = run_cli("budgetmix", "plan", "--store", store, "--reference", 2**63)
    assert result.exit_code == 2, result.output
    assert "--reference 9223372036854775808 is larger than 2147483647" in result.output


def test_adaptive_budgets_are_checked_not_rounded(tmp_path, con, memory_store):
    from analyses.budgetmix.evidence import EvidenceOptions, adaptive_schedule
    from tests.analyses.budgetmix.helpers import budgeted_store

    budgeted_store(memory_store, {4: 0.2, 8: 0.6}, n_tasks=2, n_samples=2)
    with pytest.raises(UsageProblem, match=r"budget 4\.9 is not an integer"):
        adaptive_schedule(con, [4.9, 8])  # type: ignore[list-item]
    with pytest.raises(UsageProblem, match="the reference budget 2147483648 is larger"):
        adaptive_schedule(con, [4, 8], EvidenceOptions(reference_budget=MAX_BUDGET + 1))
    assert adaptive_schedule(con, [4, 8]).budgets == [4, 8]


def test_plan_schedule_from_python_checks_budgets_before_the_store() -> None:
    from analyses.budgetmix import PlanConfig, plan_schedule

    for bad in ([2**63], [True], [4.9]):
        with pytest.raises(UsageProblem, match="--budgets"):
            plan_schedule(PlanConfig(strategy="adaptive", store="missing.duckdb", budgets=bad))
    with pytest.raises(UsageProblem, match="--reference"):
        plan_schedule(PlanConfig(strategy="adaptive", store="missing.duckdb", budgets=[4, 8],
                                 reference=0))
