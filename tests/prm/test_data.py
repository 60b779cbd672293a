"""Step datasets, task splits and the TRL export (prm.data.examples)."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from prm.data.examples import (
    TaskSplit,
    export_trl,
    load_step_examples,
    split_tasks,
    step_text,
    trl_records,
)
from recovery.store import open_store
from tests.prm.conftest import make_trajectory


def test_split_is_by_task_reproducible_and_seeded():
    tasks = [f"task{i:03d}" for i in range(200)]
    first = split_tasks(tasks + tasks, seed=3)
    assert set(first) == set(tasks)
    assert first == split_tasks(list(reversed(tasks)), seed=3)
    assert first != split_tasks(tasks, seed=4)
    counts = Counter(first.values())
    assert counts == {"train": 160, "validation": 20, "test": 20}


def test_split_gives_every_split_a_task_when_there_are_three():
    assert sorted(split_tasks(["a", "b", "c"], seed=0).values()) == ["test", "train", "validation"]
    with pytest.raises(ValueError):
        split_tasks(["a"], fractions=(0.5, 0.1, 0.1))


def test_examples_hold_every_turn_in_order_and_samples_of_a_task_share_a_split(con, memory_store):
    memory_store.ingest_trajectories([
        make_trajectory(f"t{task}", sample, ["ok", "err", "ok"], prompt=f"task {task}")
        for task in range(12) for sample in range(3)
    ])
    examples = load_step_examples(con, "error")
    assert len(examples) == 36
    first = examples[0]
    assert first.prompt == f"task {first.task_id[1:]}"
    assert first.steps == [step_text("lookup(id=0)", "record 0 found"),
                           step_text("lookup(id=1)", "Error: record not found"),
                           step_text("lookup(id=2)", "record 2 found")]
    assert first.targets == [1.0, 0.0, 1.0]
    split = TaskSplit.make(examples, seed=1)
    by_task: dict[str, set[str]] = {}
    for example in examples:
        by_task.setdefault(example.task_id, set()).add(split.split_of(example.task_id))
    assert all(len(splits) == 1 for splits in by_task.values())
    parts = [split.select(examples, name) for name in ("train", "validation", "test")]
    assert sum(len(p) for p in parts) == 36 and all(parts)
    assert {e.task_id for e in parts[0]}.isdisjoint({e.task_id for e in parts[2]})


def test_task_split_round_trips_and_counts_new_tasks_as_test(tmp_path):
    split = TaskSplit(seed=2, fractions=(0.8, 0.1, 0.1), tasks={"a": "train", "b": "test"})
    split.save(tmp_path / "split.json")
    loaded = TaskSplit.load(tmp_path / "split.json")
    assert loaded.tasks == split.tasks and loaded.seed == 2
    assert loaded.split_of("a") == "train" and loaded.split_of("never-seen") == "test"


def test_trl_records_use_boolean_labels_and_leave_out_unknown_steps(con, memory_store):
    memory_store.ingest_trajectories([make_trajectory("t", 0, ["ok", "err"]),
                              make_trajectory("u", 0, ["ok", "label-"])])
    examples = load_step_examples(con, "data")
    records, left_out = trl_records(examples)
    assert left_out == 2 and records == []  # data labels are null on unlabelled turns
    records, left_out = trl_records(load_step_examples(con, "error"))
    assert left_out == 0
    assert [r["labels"] for r in records] == [[True, False], [True, False]]
    soft, _ = trl_records(load_step_examples(con, "error"), soft=True)
    assert soft[0]["labels"] == [1.0, 0.0]


def test_export_trl_loads_and_matches_the_store(sim_store, tmp_path):
    load_dataset = pytest.importorskip("datasets", reason="the bench extra").load_dataset

    store = open_store(sim_store, read_only=True)
    out = tmp_path / "trl.jsonl"
    written, left_out = export_trl(store.con, out, labels="recovery")
    assert left_out == 0
    dataset = load_dataset("json", data_files=str(out), split="train")
    assert len(dataset) == written == store.con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
    assert {"prompt", "completions", "labels"} <= set(dataset.column_names)
    rows = {row["traj_id"]: row for row in dataset}
    stored = store.con.execute(
        "SELECT traj_id, t, action, observation, is_error FROM turns ORDER BY traj_id, t"
    ).fetchall()
    prompts = dict(store.con.execute("SELECT traj_id, prompt FROM trajectories").fetchall())
    store.close()
    for traj_id, t, action, observation, is_error in stored:
        row = rows[traj_id]
        assert row["completions"][t - 1] == step_text(action, observation)
        if is_error:
            assert row["labels"][t - 1] is False
    for traj_id, row in rows.items():
        assert row["prompt"] == (prompts[traj_id] or "")
        assert len(row["labels"]) == len(row["completions"])
        assert all(isinstance(x, bool) for x in row["labels"])


@pytest.mark.filterwarnings("ignore:You are importing from 'trl.experimental'")
def test_trl_prm_trainer_tokenises_an_exported_row(sim_store, tmp_path):
    PRMTrainer = pytest.importorskip(
        "trl.experimental.prm", reason="trl==1.13.0 (the bench extra)"
    ).PRMTrainer

    from prm.data.tokenize import train_tokenizer

    store = open_store(sim_store, read_only=True)
    export_trl(store.con, tmp_path / "trl.jsonl")
    store.close()
    row = json.loads((tmp_path / "trl.jsonl").read_text().splitlines()[0])
    tokenizer = train_tokenizer([row["prompt"], *row["completions"]], vocab_size=300)
    tokenised = PRMTrainer.tokenize_row(row, tokenizer, "\n", None, None, False, False)
    labelled = [x for x in tokenised["labels"] if x != -100]
    assert labelled == [int(x) for x in row["labels"]]
    assert not any(math.isnan(x) for x in labelled)
