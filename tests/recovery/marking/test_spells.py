"""The spells query on frames (no store): odd inputs follow the documented rules."""

from __future__ import annotations

import pandas as pd

from recovery.marking.spells import SPELL_COLUMNS, spells_of_frames


def test_spells_of_frames_ignores_what_the_definition_ignores() -> None:
    traj = pd.DataFrame({"traj_id": ["a", "b", "c"], "n_turns": [5, 3, 2],
                         "success": [False, None, True], "run": ["r", "r", "s"]})
    flags = pd.DataFrame([
        ("a", 1, True, None), ("a", 2, True, "timeout"),  # spell 1-2, first kind NULL
        ("a", 2, True, "tool_error"),                     # the same turn again: counts once
        ("a", 4, True, "parse_error"), ("a", 5, True, "x"),  # open at the end: fatal
        ("a", 6, True, "x"),                              # past n_turns: ignored
        ("b", 3, True, "x"),                              # open, outcome unknown: not fatal
        ("b", 2, False, None),
        ("z", 1, True, "x"),                              # unknown trajectory: ignored
        ("c", 0, True, "x"),                              # t < 1: ignored
    ], columns=["traj_id", "t", "is_error", "error_kind"])
    spells = spells_of_frames(traj, flags)
    assert list(spells.columns) == ["run", *SPELL_COLUMNS]
    rows = [tuple(None if pd.isna(v) else v for v in row)
            for row in spells.itertuples(index=False)]
    assert rows == [
        ("r", "a", 1, 2, None, True, 3.0, 2.0, False),
        ("r", "a", 4, 5, "parse_error", False, None, None, True),
        ("r", "b", 3, 3, "x", False, None, None, False),
    ]


def test_spells_of_frames_without_errors_or_kinds() -> None:
    traj = pd.DataFrame({"traj_id": ["a"], "n_turns": [3], "success": [True]})
    clean = pd.DataFrame({"traj_id": ["a"], "t": [1], "is_error": [False]})
    assert spells_of_frames(traj, clean).empty
    one = pd.DataFrame({"traj_id": ["a"], "t": [2], "is_error": [True]})
    spells = spells_of_frames(traj, one)
    assert spells[["start_t", "end_t", "recovered"]].values.tolist() == [[2, 2, True]]
    assert spells["kind"].tolist() == [None]
