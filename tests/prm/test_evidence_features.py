"""The step read against the task and the evidence (prm.data.evidence) and the fixed
observation_short / fuzzy action repeat (prm.data.families), against hand-computed cases, for
tool calls and chat messages."""

from __future__ import annotations

import math

import pytest

from prm.data import evidence as E
from prm.data import families
from tests.prm.test_features import frame_of


@pytest.mark.parametrize("raw, parsed", [
    ('{"result": ""}', ""),
    ('[get_user] {"output": "ok"}', "ok"),
    ('{"content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]}',
     "hi\nthere"),
    ('{"result": {"output": "3 seats"}, "status": "success"}', "3 seats"),
    ('{"name": "Ann", "age": 3}', '{"name": "Ann", "age": 3}'),
    ("{not json", "{not json"),
    ("  plain text  ", "plain text"),
    ("null", "null"),
])
def test_parse_result_unwraps_json_wrappers(raw, parsed):
    assert E.parse_result(raw) == parsed


def test_task_text_is_the_user_part_of_the_prompt():
    assert E.task_text("system: policy\n\nuser: Book a flight to Paris", None) == \
        "Book a flight to Paris"
    assert E.task_text("Who wrote Hamlet?", "ignored") == "Who wrote Hamlet?"
    assert E.task_text("", '{"content": "user asks: find X"}') == "user asks: find X"


def test_small_helpers():
    assert E.content_words("The capital of France, a city!") == {"capital", "france", "city"}
    assert E.coverage({"a1", "b2"}, {"b2"}) == 0.5 and math.isnan(E.coverage(set(), {"x"}))
    assert E.call_arguments("a(1)\nb(x=2)") == "1 x=2" and E.call_arguments("hello") is None
    assert E.calls_in("a(1)\nb(2)\nthen text") == 2
    assert E.arg_words('q="capital of France"') == {"q", "capital", "of", "france"}
    assert E.max_jaccard({"a", "b"}, [{"a"}, {"a", "b", "c"}]) == pytest.approx(2 / 3)
    assert E.max_jaccard({"a"}, []) == 0.0
    assert E.contradictions("However, it does not say; it seems unclear. Button.") == 4
    assert E.restates({"find", "capital", "france"}, {"find", "capital", "france", "x"}) == 1
    assert E.restates({"find", "capital"}, {"find", "capital"}) == 0  # too few words
    assert E.restates({"find", "capital", "paris"}, {"find", "capital", "france"}) == 0


TOOLS = {"a": [('search(q="capital of France")', '{"result": "Paris is the capital of France"}'),
               ('search(q="capital France")', '{"result": ""}'),
               ("The answer is Paris, however it is unclear.", "")]}


def test_evidence_features_tool_calls_by_hand():
    frame = frame_of(TOOLS)
    frame["prompt"] = "system: be kind\nuser: Find the capital of France"
    out = E.evidence_features(frame, "blind")
    # task words {find, capital, france}; evidence before turns 1, 2, 3
    assert list(out["task_coverage"]) == pytest.approx([0, 2 / 3, 2 / 3])
    # claims: {capital, france}, {capital, france}, {paris, however, unclear}
    assert list(out["answer_in_evidence"]) == pytest.approx([0, 1, 1 / 3])
    assert list(out["log_answer_new_words"]) == pytest.approx([0, 0, math.log1p(2)])
    assert list(out["task_overlap"]) == pytest.approx([2 / 3, 2 / 3, 0])
    assert list(out["restates_task"]) == [0, 0, 0]
    # {q, capital, france} against {q, capital, of, france}: 3 / 4
    assert list(out["args_repeat_fuzzy"]) == pytest.approx([0, 0.75, 0])
    assert list(out["calls_in_turn"]) == [1, 1, 0]
    assert list(out["prev_result_empty"]) == [0, 0, 1]  # read through {"result": ""}
    assert list(out["prev_result_short"]) == [0, 0, 0]
    assert list(out["empty_results_so_far"]) == [0, 0, 1]
    assert list(out["contradictions"]) == [0, 0, 2]
    assert list(out["has_contradiction"]) == [0, 0, 1]


CHAT = {"a": [("Please search who wrote Hamlet.", ""),
              ("Hamlet was written by William Shakespeare.", ""),
              ("FINAL ANSWER: William Shakespeare", ""),
              ("FINAL ANSWER: Christopher Marlowe", "")]}


def test_evidence_features_chat_of_agents_by_hand():
    frame = frame_of(CHAT)
    frame["prompt"] = "Who wrote Hamlet?"
    frame["speaker"] = ["Orchestrator", "WebSurfer", "Orchestrator", "Orchestrator"]
    out = E.evidence_features(frame, "blind")
    # the surfer's report is evidence to the orchestrator; its own words are not
    assert list(out["answer_in_evidence"][2:]) == [1, 0]
    assert list(out["log_answer_new_words"][2:]) == pytest.approx([0, math.log1p(2)])
    # task {wrote, hamlet}: the surfer saw both from the orchestrator, who saw hamlet only
    assert list(out["task_coverage"]) == pytest.approx([0, 1, 0.5, 0.5])
    assert list(out["prev_result_empty"]) == [0, 0, 0, 0]  # no tool, no result
    assert list(out["calls_in_turn"]) == [0, 0, 0, 0]


def test_without_a_prompt_the_task_is_the_first_observation():
    frame = frame_of({"a": [("Looking up Hamlet's author.", "user: who wrote Hamlet?")]})
    out = E.evidence_features(frame, "blind")
    # step {looking, up, hamlet, author} against the task {wrote, hamlet} ("user:" dropped)
    assert out["task_overlap"][0] == 0.25
    assert out["task_coverage"][0] == 0.0  # nothing came back before the first turn


def test_observation_short_reads_the_parsed_result():
    trajs = {"a": [("f()", '{"result": "", "status": "success"}'),
                   ("f()", '[lookup] {"output": "none found"}'),
                   ("f()", '{"result": "a long and perfectly normal result text"}'),
                   ("Sure.", "user: ok")]}
    out = families.observation_features(frame_of(trajs), "blind")
    # the raw texts are all 20 characters or longer but the first: only the wrappers were
    assert list(out["observation_short"]) == [1, 1, 0, 1]


def test_fuzzy_action_repeat_compares_arguments_and_messages():
    trajs = {"a": [('search(query="cheap flights from new york to paris on may 20")', "r"),
                   ('search(query="flights from new york to paris on may 20")', "r"),
                   ('search(query="hotels in rome")', "r"),
                   ("I will now look for the cheapest flight to Paris for you.", ""),
                   ("I will now look for the cheapest flight to Paris for you!", ""),
                   ("", ""), ("", ""), ("ping()", ""), ("ping()", "")]}
    out = families.repeat_features(frame_of(trajs), "blind")
    # 10 of 11 argument words shared: 0.91; the message differs by its punctuation only
    assert list(out["action_repeat_fuzzy"]) == [0, 1, 0, 0, 1, 0, 0, 0, 1]
    assert list(out["action_repeat"]) == [0, 0, 0, 0, 0, 0, 1, 0, 1]  # exact: kept as is


def test_the_evidence_family_is_wired_into_the_blind_features():
    from prm.data.features import step_features

    frame = frame_of(TOOLS)
    names = step_features(frame, "blind").names
    assert set(E.EVIDENCE_COLUMNS) <= set(names)
    assert {"action_repeat_fuzzy", "action_repeat"} <= set(names)


def test_an_empty_frame_has_empty_columns():
    from prm.data.answers import ANSWER_COLUMNS, answer_columns

    empty = frame_of(TOOLS).iloc[:0]
    assert all(len(v) == 0 for v in E.evidence_features(empty, "blind").values())
    assert set(answer_columns(empty, "blind")) == set(ANSWER_COLUMNS)
