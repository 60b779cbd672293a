"""Per-row budgets: ``assign_budgets`` adds ``max_turns`` where verl, SkyRL and TRL read it."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyses.budgetmix.assign import (
    AssignConfig,
    AssignOptions,
    assign,
    assign_budgets,
    row_budget,
    with_budgets,
)
from analyses.budgetmix.schedule import mixture_schedule
from recovery.errors import InputProblem, UsageProblem


def _verl_rows(n: int) -> list[dict]:
    """Rows shaped like verl's preprocessed datasets (prompt messages, reward_model, extra_info)."""
    return [
        {
            "data_source": "airline",
            "prompt": [{"role": "user", "content": f"Task {i}: refund order W{i} ☕"}],
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"index": i, "split": "train"},
        }
        for i in range(n)
    ]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def test_row_budget_reads_every_trainer_form():
    assert row_budget({"max_turns": 7}) == 7  # TRL row, SkyRL env_extras
    assert row_budget({"extra_info": {"max_turns": 9}}) == 9  # verl row / agent-loop kwargs
    assert row_budget({"max_turns": 12.0}) == 12  # a float column that holds an integer
    assert row_budget({"max_turns": np.int64(3)}) == 3
    assert row_budget({}) is None and row_budget(None) is None
    assert row_budget({"extra_info": None}) is None
    for bad in (0, -2, 2.5, "8", True):
        with pytest.raises(InputProblem, match="positive integer"):
            row_budget({"max_turns": bad})


def test_with_budgets_places_the_budget_per_trainer():
    rows = _verl_rows(2)
    both = with_budgets(rows, [4, 8])
    assert [r["max_turns"] for r in both] == [4, 8]
    assert [r["extra_info"] for r in both] == [{"index": 0, "split": "train", "max_turns": 4},
                                              {"index": 1, "split": "train", "max_turns": 8}]
    assert "max_turns" not in rows[0] and "max_turns" not in rows[0]["extra_info"]  # not modified
    verl = with_budgets(rows, [4, 8], "verl")
    assert "max_turns" not in verl[0] and verl[0]["extra_info"]["max_turns"] == 4
    trl = with_budgets(rows, [4, 8], "trl")
    assert trl[1]["max_turns"] == 8 and "max_turns" not in trl[1]["extra_info"]
    with pytest.raises(InputProblem, match="row 1 already has max_turns"):
        with_budgets(both, [5, 5])
    assert with_budgets(both, [5, 6], overwrite=True)[1]["extra_info"]["max_turns"] == 6
    with pytest.raises(InputProblem, match="row 1: extra_info is str"):
        with_budgets([{"extra_info": "x"}], [3], "verl")


def test_parquet_keeps_every_column_and_follows_the_schedule(tmp_path):
    schedule = mixture_schedule([4, 8, 16], [0.5, 0.3, 0.2])
    dataset = tmp_path / "train.parquet"
    rows = _verl_rows(3000)
    rows[5]["extra_info"] = None  # a row without extra_info still gets one
    pq.write_table(pa.Table.from_pylist(rows), dataset)
    result = assign_budgets(dataset, schedule, tmp_path / "out.parquet", AssignOptions(seed=3))
    table = pq.read_table(result.path)
    original = pq.read_table(dataset)
    assert table.num_rows == 3000 == result.n_rows
    for name in original.column_names:
        if name != "extra_info":
            assert table.column(name).equals(original.column(name)), name
    top = np.asarray(table.column("max_turns").to_pylist())
    nested = [e["max_turns"] for e in table.column("extra_info").to_pylist()]
    assert top.tolist() == nested
    assert table.column("extra_info").to_pylist()[6] == {"index": 6, "split": "train",
                                                         "max_turns": int(top[6])}
    assert table.column("extra_info").to_pylist()[5] == {"index": None, "split": None,
                                                         "max_turns": int(top[5])}
    assert set(top) == {4, 8, 16}
    assert [(top == b).mean() for b in (4, 8, 16)] == pytest.approx([0.5, 0.3, 0.2], abs=0.03)
    assert result.counts == {b: int((top == b).sum()) for b in (4, 8, 16)}
    # seeded: the same seed gives the same budgets, another seed others
    again = assign_budgets(dataset, schedule, tmp_path / "again.parquet", AssignOptions(seed=3))
    assert pq.read_table(again.path).column("max_turns").equals(table.column("max_turns"))
    other = assign_budgets(dataset, schedule, tmp_path / "other.parquet", AssignOptions(seed=4))
    assert not pq.read_table(other.path).column("max_turns").equals(table.column("max_turns"))
    # an existing budget is refused, and replaced on request
    with pytest.raises(InputProblem, match="already has a max_turns column"):
        assign_budgets(result.path, schedule, tmp_path / "twice.parquet")
    replaced = assign_budgets(result.path, schedule, tmp_path / "twice.parquet",
                              AssignOptions(seed=9, overwrite=True))
    twice = pq.read_table(replaced.path)
    assert twice.column_names == table.column_names
    assert [e["max_turns"] for e in twice.column("extra_info").to_pylist()] == \
        twice.column("max_turns").to_pylist()


def test_trainer_forms_in_parquet(tmp_path):
    schedule = mixture_schedule([2, 3], [1, 1])
    dataset = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "p", "answer": 1}] * 20), dataset)
    verl = pq.read_table(assign_budgets(dataset, schedule, tmp_path / "v.parquet",
                                        AssignOptions(trainer="verl")).path)
    assert "max_turns" not in verl.column_names
    assert {e["max_turns"] for e in verl.column("extra_info").to_pylist()} <= {2, 3}
    skyrl = pq.read_table(assign_budgets(dataset, schedule, tmp_path / "s.parquet",
                                         AssignOptions(trainer="skyrl")).path)
    assert "extra_info" not in skyrl.column_names
    assert set(skyrl.column("max_turns").to_pylist()) <= {2, 3}


def test_jsonl_round_trip_and_conversion(tmp_path):
    schedule = mixture_schedule([5, 10], [1, 3])
    rows = _verl_rows(40)
    rows[0]["meta"] = {"tags": ["a", "ü"], "x": None}
    dataset = _write_jsonl(tmp_path / "train.jsonl", rows)
    out = assign_budgets(dataset, schedule, tmp_path / "out.jsonl", AssignOptions(seed=1)).path
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    for before, after in zip(rows, written, strict=True):
        assert after["max_turns"] == after["extra_info"]["max_turns"]
        assert {k: v for k, v in after.items() if k not in ("max_turns", "extra_info")} == \
            {k: v for k, v in before.items() if k != "extra_info"}
    # the same draws whichever format is written
    as_parquet = assign_budgets(dataset, schedule, tmp_path / "out.parquet",
                                AssignOptions(seed=1)).path
    assert pq.read_table(as_parquet).column("max_turns").to_pylist() == \
        [r["max_turns"] for r in written]
    # and a trainer's loader reads the budget back per row
    datasets = pytest.importorskip("datasets")
    loaded = datasets.Dataset.from_parquet(str(as_parquet))
    assert [row_budget(r) for r in loaded] == [r["max_turns"] for r in written]
    # JSON that Parquet cannot hold is refused by name, and nothing is left behind
    rows[1]["meta"] = {"tags": [1, {"x": None}]}
    mixed = _write_jsonl(tmp_path / "mixed.jsonl", rows)
    with pytest.raises(InputProblem, match=r"mixed\.jsonl: cannot be written as parquet"):
        assign_budgets(mixed, schedule, tmp_path / "mixed.parquet")
    assert not (tmp_path / "mixed.parquet").exists()


def test_bad_inputs_are_named(tmp_path):
    schedule = mixture_schedule([4], [1])
    with pytest.raises(InputProblem, match="does not exist"):
        assign_budgets(tmp_path / "missing.jsonl", schedule, tmp_path / "o.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": \n', encoding="utf-8")
    with pytest.raises(InputProblem, match=r"bad\.jsonl:2: not JSON"):
        assign_budgets(bad, schedule, tmp_path / "o.jsonl")
    bad.write_text('{"prompt": "a"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(InputProblem, match=r"bad\.jsonl:2: a row must be a JSON object"):
        assign_budgets(bad, schedule, tmp_path / "o.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(InputProblem, match="has no rows"):
        assign_budgets(empty, schedule, tmp_path / "o.jsonl")
    with pytest.raises(UsageProblem, match=r"\.parquet or \.jsonl"):
        assign_budgets(bad, schedule, tmp_path / "o.csv")
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("hello", encoding="utf-8")
    with pytest.raises(InputProblem, match="cannot be read as Parquet"):
        assign_budgets(not_parquet, schedule, tmp_path / "o.parquet")
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "o.jsonl").exists()
    with pytest.raises(InputProblem, match=r"nope\.json"):
        assign(AssignConfig(schedule=tmp_path / "nope.json", dataset=bad, out=tmp_path / "o.jsonl"))


def test_cli_assign(tmp_path):
    from agent_recovery_cli.recovery import main

    schedule = mixture_schedule([3, 6], [1, 1]).save(tmp_path / "schedule.json")
    dataset = _write_jsonl(tmp_path / "train.jsonl", _verl_rows(10))
    runner = CliRunner()
    out = tmp_path / "train-budgets.parquet"
    result = runner.invoke(main, ["budgetmix", "assign", "--schedule", str(schedule), "--dataset",
                                  str(dataset), "--out", str(out), "--seed", "2"])
    assert result.exit_code == 0, result.output
    assert "10 rows with max_turns for all (seed 2)" in result.output
    assert set(pq.read_table(out).column("max_turns").to_pylist()) <= {3, 6}
    result = runner.invoke(main, ["budgetmix", "assign", "--schedule", str(schedule), "--dataset",
                                  str(out), "--out", str(out)])
    assert result.exit_code == 1 and "pass --overwrite" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    result = runner.invoke(main, ["budgetmix", "assign", "--schedule", str(schedule), "--dataset",
                                  str(dataset), "--out", str(tmp_path / "o.txt")])
    assert result.exit_code == 2 and ".parquet or .jsonl" in result.output


def test_a_row_that_cannot_take_its_budget_is_a_problem_not_a_value_error(tmp_path):
    schedule = mixture_schedule([3, 6], [1, 1])
    dataset = _write_jsonl(tmp_path / "d.jsonl",
                           [{"prompt": "a"}, {"prompt": "b", "extra_info": "x"}])
    with pytest.raises(InputProblem, match=r"d\.jsonl: row 2: extra_info is str, not an object") \
            as err:
        assign_budgets(dataset, schedule, tmp_path / "o.jsonl")
    assert not isinstance(err.value, ValueError)
    with pytest.raises(UsageProblem, match="unknown trainer 'ray'"):
        with_budgets([{"prompt": "a"}], [3], "ray")
    with pytest.raises(ValueError, match="1 rows but 2 budgets"):  # a caller's bug stays one
        with_budgets([{"prompt": "a"}], [3, 4])


def test_cli_reports_a_row_that_cannot_take_its_budget_on_one_line(tmp_path):
    from agent_recovery_cli.recovery import main

    schedule = mixture_schedule([3, 6], [1, 1]).save(tmp_path / "s.json")
    dataset = _write_jsonl(tmp_path / "d.jsonl",
                           [{"prompt": "a"}, {"prompt": "b", "extra_info": 7}])
    result = CliRunner().invoke(main, ["budgetmix", "assign", "--schedule", str(schedule),
                                       "--dataset", str(dataset),
                                       "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    assert result.output.splitlines() == [
        f"Error: {dataset}: row 2: extra_info is int, not an object"]
    assert not (tmp_path / "o.jsonl").exists()
