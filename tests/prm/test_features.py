"""Every feature family of prm.data.features against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from prm.data import families
from prm.data import features as F


def frame_of(trajs: dict[str, list[tuple[str, str]]], *, task: str = "q1", run: str = "p",
             success: dict[str, bool | None] | None = None,
             errors: dict[tuple[str, int], str] | None = None) -> pd.DataFrame:
    """A turn frame: ``{traj_id: [(action, observation), ...]}``; errors by (traj, t)."""
    rows = []
    for traj, turns in trajs.items():
        for t, (action, observation) in enumerate(turns, start=1):
            kind = (errors or {}).get((traj, t))
            rows.append({
                "traj_id": traj, "run": run, "task_id": task, "t": t, "n_turns": len(turns),
                "success": (success or {}).get(traj), "success_turn": np.nan,
                "action": action, "observation": observation,
                "is_tool": bool(F._TOOL_RE.match(action)), "is_error": kind is not None,
                "error_kind": kind,
            })
    return pd.DataFrame(rows)


ONE = {"a": [("search(q='x')", "result one"), ("search(q='x')", "result one"),
             ("lookup(id=2)", ""), ("The answer is Paris", "")]}


def col(frame: pd.DataFrame, family, name: str, setting: str = "blind") -> list[float]:
    return [float(x) for x in family(frame, setting)[name]]


def test_position_blind_knows_no_turns_left():
    frame = frame_of(ONE)
    blind = families.position_features(frame, "blind")
    assert list(blind)[:3] == ["position", "log_t", "first"]
    assert not any(name.startswith(("left_", "turns_left", "fraction")) for name in blind)
    assert list(blind["position"]) == [1, 2, 3, 4]
    assert list(blind["first"]) == [1, 0, 0, 0]
    assert list(blind["pos_2"]) == [0, 1, 0, 0] and list(blind["pos_4"]) == [0, 0, 0, 1]
    hind = families.position_features(frame, "hindsight")
    assert list(hind["turns_left"]) == [3, 2, 1, 0]
    assert list(hind["fraction"]) == [0.25, 0.5, 0.75, 1.0]
    assert list(hind["left_0"]) == [0, 0, 0, 1] and list(hind["left_3"]) == [1, 0, 0, 0]


def test_position_buckets_cover_every_position_once():
    t = np.array([1, 5, 6, 8, 9, 16, 17, 32, 33, 200], float)
    buckets = families._buckets(t, "pos", families.POSITION_EDGES)
    assert list(buckets)[5:] == ["pos_6_8", "pos_9_16", "pos_17_32", "pos_33_up"]
    assert (sum(buckets.values()) == 1).all()
    assert list(buckets["pos_6_8"]) == [0, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    assert list(buckets["pos_33_up"]) == [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]


def test_speaker_features_hash_the_name_and_count_its_turns():
    frame = frame_of({"a": [("x", ""), ("y", ""), ("z", ""), ("w", "")]})
    frame["speaker"] = ["Planner", "Coder (thought)", "planner ", ""]
    out = families.speaker_features(frame, "blind")
    import zlib
    bucket = zlib.crc32(b"planner") % families.SPEAKER_BUCKETS
    assert list(out[f"speaker_{bucket}"])[:1] == [1] and out[f"speaker_{bucket}"][2] == 1
    assert sum(out[f"speaker_{b}"][3] for b in range(families.SPEAKER_BUCKETS)) == 0  # unnamed
    assert list(out["speaker_known"]) == [1, 1, 1, 0]
    assert list(out["speaker_changed"]) == [0, 1, 1, 0]
    assert list(out["speaker_new"]) == [1, 1, 0, 0]
    assert out["log_speaker_turns"][2] == pytest.approx(math.log1p(2))
    # A frame without speakers (single-agent formats): constant, so neutral.
    plain = families.speaker_features(frame_of(ONE), "blind")
    assert all((v == 0).all() for v in plain.values())


def test_turn_texts_are_the_turn_and_the_one_before():
    frame = frame_of({"a": [("s(1)", "o1"), ("s(2)", "o2")], "b": [("t(1)", "p1")]})
    texts = F.turn_texts(frame)
    assert list(texts.columns) == list(F.TEXT_COLUMNS)
    assert list(texts["prev_action"]) == ["", "s(1)", ""]
    assert list(texts["prev_observation"]) == ["", "o1", ""]


def test_turn_kind_and_spells():
    frame = frame_of(ONE, errors={("a", 2): "tool_error", ("a", 3): None}, success={"a": True})
    out = families.turn_kind_features(frame, "blind")
    assert list(out["tool_call"]) == [1, 1, 1, 0]
    assert list(out["message"]) == [0, 0, 0, 1]
    assert list(out["error_mark"]) == [0, 1, 0, 0]
    assert list(out["in_spell"]) == [0, 1, 0, 0]
    assert list(out["prev_in_spell"]) == [0, 0, 1, 0]
    assert list(out["errors_so_far"]) == [0, 1, 1, 1]


def test_code_block_and_the_first_one():
    fence = "```"
    frame = frame_of({"a": [("plan it", ""), (f"run this\n{fence}python\nprint(1)\n{fence}", ""),
                            ("exitcode: 0", ""), (f"{fence}\nx = 2\n{fence}", ""),
                            ("inline ``` is not a fence", "")],
                      "b": [("~~~\ny\n~~~", "")]})
    out = families.turn_kind_features(frame, "blind")
    assert list(out["code_block"]) == [0, 1, 0, 1, 0, 1]
    assert list(out["first_code_block"]) == [0, 1, 0, 0, 0, 1]


def test_a_mark_on_the_success_turn_is_in_no_spell_in_hindsight_only():
    frame = frame_of({"a": [("x()", "ok"), ("y()", "ok")]}, errors={("a", 2): "odd"},
                     success={"a": True})
    # Hindsight follows the one rule: the success turn of a success starts no spell.
    assert col(frame, families.turn_kind_features, "in_spell", "hindsight") == [0, 0]
    # Blind cannot know the episode succeeded there: the mark counts.
    assert col(frame, families.turn_kind_features, "in_spell", "blind") == [0, 1]


def test_spell_age_and_turns_since_error():
    trajs = {"a": [(f"f({i})", "x") for i in range(5)]}
    frame = frame_of(trajs, errors={("a", 2): "e", ("a", 3): "e"})
    out = families.spell_age_features(frame, "blind")
    assert list(out["spell_age"]) == [0, 1, 2, 0, 0]
    since = list(out["turns_since_error"])
    assert math.isnan(since[0]) and math.isnan(since[1])
    assert since[2:] == [1, 1, 2]


def test_repeats_are_normalised_and_only_look_back():
    trajs = {"a": [("Search(q='X')", "same"), ("search(q='x')  ", "SAME"), ("other()", ""),
                   ("search(q='x')", "")]}
    out = families.repeat_features(frame_of(trajs), "blind")
    assert list(out["action_repeat"]) == [0, 1, 0, 1]
    assert list(out["action_same_as_prev"]) == [0, 1, 0, 0]
    assert list(out["observation_repeat"]) == [0, 1, 0, 0]  # empty observations never count
    assert list(out["repeats_so_far"]) == [0, 1, 1, 2]


def test_observation_features():
    trajs = {"a": [("f()", ""), ("f()", "ok"), ("f()", "Error: not enough seats"),
                   ("f()", "a long and perfectly normal result text")]}
    out = families.observation_features(frame_of(trajs), "blind")
    assert list(out["observation_empty"]) == [1, 0, 0, 0]
    assert list(out["observation_short"]) == [0, 1, 0, 0]
    assert list(out["observation_error"]) == [0, 0, 1, 0]
    assert out["log_observation_chars"][1] == pytest.approx(math.log1p(2))


def test_tool_calls_lengths_and_hedges():
    frame = frame_of(ONE)
    assert col(frame, families.tool_count_features, "tool_calls_so_far") == [1, 2, 3, 3]
    lengths = families.length_features(frame, "blind")
    assert lengths["log_answer_chars"][3] == pytest.approx(math.log1p(len("The answer is Paris")))
    assert list(lengths["log_answer_chars"][:3]) == [0, 0, 0]
    assert lengths["log_action_words"][3] == pytest.approx(math.log1p(4))
    hedged = frame_of({"a": [("Maybe it is X, I think; sorry", ""), ("maybelline()", "")]})
    assert col(hedged, families.hedging_features, "hedges") == [3, 0]  # whole words only
    assert col(hedged, families.hedging_features, "has_hedge") == [1, 0]


def test_episode_end_is_hindsight_only():
    frame = frame_of(ONE, success={"a": False})
    assert families.episode_end_features(frame, "blind") == {}
    out = families.episode_end_features(frame, "hindsight")
    assert list(out["last"]) == [0, 0, 0, 1]
    assert list(out["final_answer"]) == [0, 0, 0, 1]
    assert list(out["failed_last"]) == [0, 0, 0, 1]
    assert list(out["failed_turns_left"]) == [3, 2, 1, 0]
    assert list(out["outcome_success"]) == [0, 0, 0, 0]


SIBS = {
    "a": [("search(q='x')", "r"), ("Paris.", "")],
    "b": [("search(q='x')", "r"), ("paris", "")],
    "c": [("search(q='y')", "r"), ("Lyon", "")],
}


def test_sibling_features_by_hand():
    frame = frame_of(SIBS, success={"a": True, "b": False, "c": True})
    out = F.sibling_features(frame, "hindsight")
    a1, a2, c2 = 0, 1, 5  # rows: a1 a2 b1 b2 c1 c2
    # a's second action "Paris." agrees with b's final ("paris") but not c's ("lyon").
    assert out["sib_agree_final"][a2] == 0.5
    assert out["sib_agree_final"][a1] == 0.0
    # a's first action equals b's first action, not c's: typical among siblings at t = 1.
    assert out["sib_same_turn"][a1] == 0.5
    assert out["sib_same_turn"][c2] == 0.0
    # Jaccard of {paris} with {paris} and {lyon}: (1 + 0) / 2.
    assert out["sib_similarity_final"][a2] == 0.5
    # Own final answer agreement and the siblings' success rate (hindsight).
    assert out["own_final_agree"][a1] == out["own_final_agree"][a2] == 0.5
    assert out["own_final_agree"][c2] == 0.0
    assert out["sib_success_rate"][a1] == 0.5  # b failed, c succeeded
    assert out["sib_success_rate"][5] == 0.5  # c's siblings: a succeeded, b failed
    assert out["log_siblings"][a1] == pytest.approx(math.log1p(2))
    blind = F.sibling_features(frame, "blind")
    assert "sib_success_rate" not in blind and "own_final_agree" not in blind


def test_sibling_lengths_by_hand():
    # Three samples of one task, 1, 2 and 4 turns long.
    frame = frame_of({"a": [("x", "")], "b": [("x", ""), ("y", "")],
                      "c": [("x", ""), ("y", ""), ("z", ""), ("w", "")]})
    for setting in ("blind", "hindsight"):
        out = F.sibling_features(frame, setting)
        a1, b2, c4 = 0, 2, 6  # rows: a1 b1 b2 c1 c2 c3 c4
        # a's siblings ran 2 and 4 turns; c's ran 1 and 2.
        assert out["sib_log_turns"][a1] == pytest.approx((math.log(3) + math.log(5)) / 2)
        assert out["sib_log_turns"][c4] == pytest.approx((math.log(2) + math.log(3)) / 2)
        # c's fourth turn is past both its siblings' lengths; a's first is short of theirs.
        assert out["log_t_over_siblings"][c4] == pytest.approx(
            math.log(5) - (math.log(2) + math.log(3)) / 2)
        assert out["log_t_over_siblings"][a1] < 0 < out["log_t_over_siblings"][c4]
        # Own length is never read: b's value at t = 2 uses only a's and c's lengths.
        assert out["sib_log_turns"][b2] == pytest.approx((math.log(2) + math.log(5)) / 2)


def test_siblings_are_samples_of_the_same_run_and_task():
    one = frame_of({"a": SIBS["a"]}, task="q1")
    other = frame_of({"b": SIBS["b"]}, task="q2")
    out = F.step_features(pd.concat([one, other], ignore_index=True), "blind")
    assert out.table["sib_agree_final"].isna().all()  # K = 1 in each task: neutral
    assert any("one sample per task" in note for note in out.notes)


def test_step_features_table_has_every_family_and_no_duplicate_column():
    out = F.step_features(frame_of(SIBS), "hindsight")
    assert len(out.names) == len(set(out.names))
    assert list(out.table.columns) == ["traj_id", "t", *out.names, *F.TEXT_COLUMNS]
    assert {"position", "in_spell", "spell_age", "action_repeat", "observation_empty",
            "tool_calls_so_far", "log_action_chars", "hedges", "last",
            "sib_agree_final"} <= set(out.names)
    assert not out.notes


def test_load_turn_frame_reads_marks_from_a_store(con, memory_store):

    from tests.prm.conftest import make_trajectory

    memory_store.ingest_trajectories([make_trajectory("t1", 0, ["ok", "err", "ok"])])
    frame = F.load_turn_frame(con)
    assert list(frame.columns) == list(F.FRAME_COLUMNS + F.OPTIONAL_COLUMNS)
    assert list(frame["is_error"]) == [False, True, False]
    assert frame["is_tool"].all()
    assert list(frame["n_turns"]) == [3, 3, 3]
