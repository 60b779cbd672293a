"""The LM bench's task splits cannot leak: every evaluation task is absent from the other splits."""

from __future__ import annotations

import numpy as np
import pytest

from bench.budgetmix_lm.splits import SPLITS, check_disjoint, split_rows, task_key

SIZES = {"warmup": 200, "train": 64, "prm": 32, "plan": 32, "bank": 16, "eval": 200}


@pytest.mark.parametrize("seed", [0, 1, 2, 7])
def test_no_evaluation_task_occurs_in_another_split(seed):
    splits = split_rows(seed, SIZES)
    assert set(splits) == set(SIZES) and all(len(splits[k]) == n for k, n in SIZES.items())
    held_out = {task_key(r) for r in splits["eval"]}
    held_ids = {r["task_id"] for r in splits["eval"]}
    for name in SPLITS:
        if name == "eval":
            continue
        assert not held_out & {task_key(r) for r in splits[name]}, name
        assert not held_ids & {r["task_id"] for r in splits[name]}, name
    # the streams are independent: the first rows of two splits are not the same draws
    firsts = {(r["task_length"], r["difficulty"]) for r in (s[0] for s in splits.values())}
    assert len(firsts) > 1
    assert all(3 <= r["task_length"] <= 6 for s in splits.values() for r in s)


def _old_task_rows(n, seed, prefix):
    """The bench's former ``task_rows``: warm-up and evaluation shared one stream."""
    rng = np.random.default_rng([seed, 1 if prefix == "train" else 2])
    return [{"task_id": f"{prefix}{i}", "task_length": int(rng.integers(2, 6)),
             "difficulty": round(float(rng.random()), 3), "seed": int(rng.integers(1 << 30))}
            for i in range(n)]


def test_the_check_refuses_the_former_leaky_rows():
    old = {"warmup": _old_task_rows(48, 0, "sft"), "eval": _old_task_rows(20, 0, "eval")}
    with pytest.raises(ValueError, match="evaluation task eval0 also occurs in split 'warmup'"):
        check_disjoint(old)
    shared_id = {"train": [dict(split_rows(0, {"train": 1})["train"][0], task_id="eval-0")],
                 "eval": split_rows(0, {"eval": 1})["eval"]}
    with pytest.raises(ValueError, match="also occurs"):
        check_disjoint(shared_id)


def test_unknown_split_names_are_refused():
    with pytest.raises(ValueError, match="unknown split"):
        split_rows(0, {"evaluation": 3})


def test_the_opening_text_does_not_name_the_task() -> None:
    """Held-out ids (``eval-100``) never reach the policy: a tiny tokenizer trained on warm-up
    ids derailed on them (every held-out task from 100 on ended with no turn)."""
    from analyses.budgetmix.reference.budget_task import BudgetUnitsEnv

    row = {"task_length": 4, "difficulty": 0.5, "seed": 3, "max_turns": 6}
    texts = {BudgetUnitsEnv().reset(**row, task_id=name) for name in ("eval-7", "eval-100", "warmup-1")}
    assert len(texts) == 1
    assert "eval" not in texts.pop()
