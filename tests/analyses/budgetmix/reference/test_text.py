"""The reference task's episodes as text: the built-in rules find exactly the true errors."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.budgetmix.reference.env import ENDS, EVENTS, EnvParams
from analyses.budgetmix.reference.text import render_episode

torch = pytest.importorskip("torch")

from tests.analyses.budgetmix.reference.scripted import run as _run  # noqa: E402


def test_rendered_errors_are_marked_by_the_builtin_rules(con, memory_store):
    roll = _run([0.0, 0.0, 0.0, 0.0], EnvParams(), n=300, length=6, budget=10, seed=4)
    trajectories = [render_episode(roll, i, run="mixed", task_id=f"task{i // 3:03d}",
                                   sample=i % 3, seed=0) for i in range(len(roll))]
    memory_store.ingest_trajectories(trajectories)
    turns = con.execute(
        "SELECT is_error, json_extract_string(meta, '$.true_error') AS truth, "
        "json_extract_string(meta, '$.event') AS event, recovery_of FROM turns"
    ).df()
    assert len(turns) == int(roll.n_turns.sum())
    assert (turns["is_error"] == turns["truth"].notna()).all()
    assert turns["is_error"].sum() > 100
    spells = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE recovered), count(*) FILTER (WHERE fatal) "
        "FROM error_spells"
    ).fetchone()
    assert spells[0] == (turns["event"] == "error").sum()
    assert spells[1] == (turns["event"] == "recover").sum()
    # fatal = open at the end of a failed episode: a fatal turn, or the budget ran out in a spell
    rows = np.arange(len(roll))
    last_event = roll.events[rows, roll.n_turns - 1]
    open_at_end = np.isin(last_event, [EVENTS.index(e) for e in ("error", "repeat", "fatal")])
    assert spells[2] == int((open_at_end & ~roll.success).sum())
    assert spells[2] > int((roll.end == ENDS.index("fatal")).sum())
    outcome = con.execute("SELECT count(*) FILTER (WHERE success) FROM trajectories").fetchone()
    assert outcome[0] == int(roll.success.sum())
