"""Answers compared by meaning across siblings (prm.data.answers), against hand-computed cases,
for chat messages and tool calls."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prm.data import answers as A
from prm.data import features as F
from tests.prm.test_features import frame_of


@pytest.mark.parametrize("text, answer", [
    ("Let me think. <answer>Paris</answer>", "Paris"),
    ("<answer>x</answer> then <final_answer>Lyon</final_answer>", "Lyon"),
    ("Checked twice. FINAL ANSWER: 42. Anything else?", "42."),
    ("So the answer is The Eiffel Tower", "The Eiffel Tower"),
    ('book_flight({"flight": "HAT001"})', "HAT001"),
    ("answer(city='Paris', n=2)", "Paris 2"),
    ("I looked it up. It is Lyon.", "It is Lyon."),
    ("", ""),
])
def test_extract_answer(text, answer):
    """Compared normalised: a tool call's argument names and punctuation are dropped."""
    assert A.normalise_answer(A.extract_answer(text)) == A.normalise_answer(answer)
    if "(" not in text:
        assert A.extract_answer(text) == answer


def test_normalise_f1_and_containment():
    assert A.normalise_answer("The Eiffel-Tower!") == "eiffel tower"
    assert A.normalise_answer("An apple, a pear") == "apple pear"
    # common 2 of 3 and 2 of 2: P = 2/3, R = 1, F1 = 0.8
    assert A.token_f1("eiffel tower paris", "eiffel tower") == pytest.approx(0.8)
    assert A.token_f1("", "") == 1.0 and A.token_f1("x", "") == 0.0
    assert A.contains("paris france", "paris") and not A.contains("parisian", "paris")
    assert not A.contains("", "paris")
    assert A.agrees("new york city", "new york") and not A.agrees("lyon", "paris")


def test_majority_and_its_share():
    # "paris" agrees with itself and "paris france" (2), "paris france" likewise (2), "lyon" 1
    assert A.majority(["paris", "paris france", "lyon"]) == ("paris", pytest.approx(2 / 3))
    top, share = A.majority([])
    assert top == "" and math.isnan(share)


CHAT = {
    "a": [("Let me check.", "user: what is the capital of France?"),
          ("The answer is Paris.", "")],
    "b": [("Searching.", ""), ("<answer>paris, France</answer>", "")],
    "c": [("Hmm.", ""), ("Lyon", "")],
}
CALLS = {
    "a": [("search(q='x')", "r"), ("answer(city='Paris')", "")],
    "b": [("search(q='y')", "r"), ("answer(city='paris france')", "")],
    "c": [("search(q='z')", "r"), ("answer(city='Lyon')", "")],
}


@pytest.mark.parametrize("trajs", [CHAT, CALLS], ids=["chat", "tool-call"])
def test_answer_columns_by_hand(trajs):
    frame = frame_of(trajs, success={"a": True, "b": False, "c": True})
    out = A.answer_columns(frame, "blind")
    a2, b2 = 1, 3  # rows a1 a2 b1 b2 c1 c2
    # a's "paris" against b's "paris france" (contained; F1 2/3) and c's "lyon" (neither)
    assert out["sib_answer_contain"][a2] == 0.5
    assert out["sib_answer_f1"][a2] == pytest.approx((2 / 3 + 0) / 2)
    # a's siblings b and c disagree: the majority is the first, "paris france", held by half
    assert out["states_sib_majority"][a2] == 1.0
    assert out["sib_majority_share"][a2] == 0.5
    # b's siblings: "paris" (a) and "lyon" (c); b's "paris france" states the first
    assert out["sib_answer_contain"][b2] == 0.5 and out["states_sib_majority"][b2] == 1.0
    # the exact comparison of whole messages saw no agreement between a's and b's answers
    if trajs is CHAT:
        assert F.sibling_features(frame, "blind")["sib_agree_final"][a2] == 0.0


def test_one_sample_is_neutral_and_outcomes_are_never_read():
    lone = A.answer_columns(frame_of({"a": CHAT["a"]}), "blind")
    assert all(np.isnan(v).all() for v in lone.values())
    runs = [A.answer_columns(frame_of(CHAT, success=s), "blind")
            for s in ({"a": True, "b": False, "c": True}, {"a": False, "b": True, "c": None})]
    for name in A.ANSWER_COLUMNS:
        np.testing.assert_array_equal(runs[0][name], runs[1][name])


def test_row_order_does_not_matter():
    frame = frame_of(CALLS)
    shuffled = frame.sample(frac=1.0, random_state=3)
    ordered, mixed = A.answer_columns(frame, "blind"), A.answer_columns(shuffled, "blind")
    for name in A.ANSWER_COLUMNS:
        np.testing.assert_array_equal(mixed[name], ordered[name][shuffled.index.to_numpy()])


def test_step_features_carry_the_answer_columns():
    names = F.step_features(frame_of(CHAT), "blind").names
    assert set(A.ANSWER_COLUMNS) <= set(names)
    assert set(A.ANSWER_COLUMNS).isdisjoint(F.step_features(frame_of(CHAT), "blind",
                                                            siblings=False).names)
