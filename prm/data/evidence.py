"""A step read against the task and the evidence gathered before it (blind: earlier turns only).

The task is the trajectory's prompt (its last ``user:`` part when it holds a conversation, as
tau-bench's system policy followed by the user's request does), else the first turn's
observation. The evidence before turn ``t`` is what came back to the agent before it: the
parsed results (:func:`parse_result`) of turns ``1 .. t-1`` and, in a multi-agent chat, the
earlier messages of other speakers (Who&When's web surfer reports to its orchestrator there,
with no observation at all).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

SHORT_RESULT = 20
"""A parsed result of fewer characters (not empty) counts as short."""

WRAPPER_KEYS = ("result", "output", "content", "observation", "response", "text", "data")
"""Keys of a JSON object that merely wrap a tool's result (the first present is unwrapped when
the object holds nothing else but ids and status fields)."""

CONTRADICTIONS = (
    "however", "but", "although", "not explicitly", "does not", "doesn't", "did not",
    "didn't", "is not", "isn't", "unclear", "cannot find", "can't find", "could not find",
    "couldn't find", "unable to find", "no evidence", "not mentioned", "not listed",
    "not available", "it seems", "it appears", "seems to", "appears to", "inconsistent",
    "contradict", "contrary", "discrepancy", "instead", "actually", "on the other hand",
)
"""Hedge and contradiction phrases, matched as whole words, case-insensitively."""

_STOPWORD_TEXT = (
    "a an the of to in on at for from by with and or but is are was were be been being it its "
    "this that these those i you he she we they me my your our their his her what which who "
    "whom how when where why do does did can could would should will shall may might must "
    "have has had not no yes so if then than as into about please there here any all some "
    "just also more most very")
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
"""Words left out of the content words (:func:`content_words`)."""

# matched on lower-cased text: several times faster than an IGNORECASE alternation
_CONTRA_RE = re.compile(r"\b(?:" + "|".join(re.escape(c) for c in CONTRADICTIONS) + r")\b")
_PREFIX_RE = re.compile(r"^\s*\[[\w.\- ]+\]\s*")
_WORD_RE = re.compile(r"[0-9a-z]+")
_CALL_RE = re.compile(r"^\s*[A-Za-z_][\w.]*\s*\((.*?)\)\s*$", re.MULTILINE | re.DOTALL)
_CALL_START_RE = re.compile(r"^\s*[A-Za-z_][\w.]*\s*\(", re.MULTILINE)
_STATUS_KEYS = frozenset({"id", "status", "type", "error", "name", "tool", "success", "ok"})


def parse_result(observation: str | None) -> str:
    """A tool result as text: a ``[tool_name]`` prefix dropped and a JSON wrapper such as
    ``{"result": ...}``, ``{"output": ...}`` or ``{"content": ...}`` unwrapped (nested ones
    too; a list of ``{"text": ...}`` parts joined). Text that is not JSON is returned
    stripped; JSON is only parsed, never run."""
    text = _PREFIX_RE.sub("", (observation or "").strip(), count=1).strip()
    if text[:1] not in ("{", "[", '"'):
        return text
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return text
    return _unwrap(value, depth=0)


def _unwrap(value: object, depth: int) -> str:
    if depth > 8:
        return json.dumps(value)
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        key = next((k for k in WRAPPER_KEYS if k in value), None)
        if key is not None and set(value) - {key} <= _STATUS_KEYS:
            return _unwrap(value[key], depth + 1)
        return json.dumps(value) if value else ""
    if isinstance(value, list):
        if all(isinstance(v, dict) and "text" in v for v in value) and value:
            return "\n".join(_unwrap(v["text"], depth + 1) for v in value).strip()
        return json.dumps(value) if value else ""
    return str(value)


def task_text(prompt: str | None, first_observation: str | None) -> str:
    """The task statement: the prompt (the first turn's parsed observation when the prompt is
    empty), cut to its last ``user:`` part when it holds one."""
    text = (prompt or "").strip() or parse_result(first_observation)
    at = text.rfind("\nuser:")
    if at >= 0:
        return text[at + len("\nuser:"):].strip()
    return text.removeprefix("user:").strip()


def content_words(text: str | None) -> set[str]:
    """Lower-case words of letters and digits, :data:`STOPWORDS` and single letters left out."""
    return {w for w in set(_WORD_RE.findall((text or "").lower())) if len(w) > 1} - STOPWORDS


def coverage(wanted: set[str], have: set[str]) -> float:
    """Share of ``wanted`` found in ``have`` (NaN when nothing is wanted)."""
    return len(wanted & have) / len(wanted) if wanted else float("nan")


def call_arguments(action: str | None) -> str | None:
    """The arguments of a tool call ``name(...)`` (all calls' when several), else None."""
    if not action or not _CALL_START_RE.search(action):
        return None  # the cheap test first: most messages hold no call
    calls = _CALL_RE.findall(action)
    return " ".join(calls) if calls else None


def calls_in(action: str | None) -> int:
    """How many tool calls ``name(`` start a line of the action."""
    return len(_CALL_START_RE.findall(action or ""))


def arg_words(args: str) -> set[str]:
    """The words of a call's arguments: every lower-case run of letters and digits (ids and
    numbers count, so no stop word or length is left out)."""
    return set(_WORD_RE.findall(args.lower()))


def jaccard(a: set[str], b: set[str]) -> float:
    """Token Jaccard similarity; 1 for two empty sets."""
    return len(a & b) / len(a | b) if a | b else 1.0


def max_jaccard(tokens: set[str], earlier: list[set[str]]) -> float:
    """The largest :func:`jaccard` of ``tokens`` with any of ``earlier`` (0 with none)."""
    return max((jaccard(tokens, e) for e in earlier), default=0.0)


def contradictions(text: str | None) -> int:
    """How many :data:`CONTRADICTIONS` phrases the text holds."""
    return len(_CONTRA_RE.findall((text or "").lower()))


def restates(step: set[str], task: set[str]) -> float:
    """1 when the step's content words (at least 3) are nearly all (90%) the task's: it only
    restates the task; 0 otherwise."""
    return float(len(step) >= 3 and coverage(step, task) >= 0.9)


MAX_EARLIER = 64
"""Earlier calls a turn's arguments are compared with: the latest ones."""

MAX_EARLIER_MESSAGES = 8
"""Earlier messages a message is compared with (``action_repeat_fuzzy``): the latest ones
(messages are long, so fewer)."""

EVIDENCE_COLUMNS = ("task_coverage", "answer_in_evidence", "log_answer_new_words",
                    "task_overlap", "restates_task", "args_repeat_fuzzy", "calls_in_turn",
                    "prev_result_empty", "prev_result_short", "empty_results_so_far",
                    "contradictions", "has_contradiction")
"""The columns of :func:`evidence_features`."""


def _known(words: set[str], results: set[str], said: dict[str, set[str]],
           speaker: str) -> set[str]:
    """Those of ``words`` the evidence holds: an earlier result, or an earlier message of
    another speaker than ``speaker``."""
    return {w for w in words if w in results or bool(said.get(w, set()) - {speaker})}


@dataclass(frozen=True)
class _Before:
    """What the turns before a step left: the task's content words, the words the evidence
    holds (``seen``), earlier calls' argument words, the count of empty or short results, and
    the previous result, parsed (None when there was none)."""

    task: set[str]
    seen: set[str]
    calls: list[set[str]]
    empties: int
    prev: str | None


def _turn_row(action: str, args: str | None, step: set[str], before: _Before) -> list[float]:
    """One turn's :data:`EVIDENCE_COLUMNS` from the state before it (``args``: its call's
    arguments, :func:`call_arguments`; ``step``: its content words)."""
    import math

    from prm.data.answers import extract_answer

    task, seen, calls, prev = before.task, before.seen, before.calls, before.prev
    claim = content_words(extract_answer(action))
    n_contra = contradictions(action)
    return [coverage(task, seen), coverage(claim, seen),
            math.log1p(len(claim - seen - task)), coverage(step, task), restates(step, task),
            0.0 if args is None else max_jaccard(arg_words(args), calls[-MAX_EARLIER:]),
            float(calls_in(action)), float(prev == ""),
            float(prev is not None and 0 < len(prev) < SHORT_RESULT), float(before.empties),
            float(n_contra), float(n_contra > 0)]


def _trajectory_rows(turns: dict[str, np.ndarray], task: str) -> list[list[float]]:
    """:data:`EVIDENCE_COLUMNS` of one trajectory's turns (``action``, ``observation``,
    ``is_tool``, ``speaker`` arrays, in order), each from earlier turns."""
    task_words = content_words(task)
    results: set[str] = set()
    said: dict[str, set[str]] = {}
    calls: list[set[str]] = []
    empties, prev = 0, None
    rows = []
    for action, observation, tool, speaker in zip(turns["action"], turns["observation"],
                                                  turns["is_tool"], turns["speaker"],
                                                  strict=True):
        step, args = content_words(action), call_arguments(action)
        seen = _known(task_words | step, results, said, speaker)
        rows.append(_turn_row(action, args, step, _Before(task_words, seen, calls, empties, prev)))
        result = parse_result(observation)
        results |= content_words(result)
        if speaker:  # in a chat of several agents, a speaker's message is evidence to others
            for word in step:
                said.setdefault(word, set()).add(speaker)
        if args is not None:
            calls.append(arg_words(args))
        if tool or observation.strip():
            prev = result
            empties += result == "" or len(result) < SHORT_RESULT
    return rows


def _text(frame: pd.DataFrame, name: str) -> np.ndarray:
    """A text column as a NumPy array of str (missing: empty; an absent column: all empty)."""
    import numpy as np

    if name not in frame:
        return np.full(len(frame), "", dtype=object)
    return frame[name].fillna("").astype(str).to_numpy(object)


def evidence_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """The step against the task and the evidence before it, per turn of a frame sorted by
    ``traj_id, t`` (blind: turns up to ``t``, its own observation excepted): ``task_coverage`` (share of the task's content words the evidence
    so far holds), ``answer_in_evidence`` (share of the step's answer's content words,
    :func:`prm.data.answers.extract_answer`, found in earlier results; NaN when it has none),
    ``log_answer_new_words`` (``log(1 +`` its content words in neither the evidence nor the
    task ``)``), ``task_overlap`` (share of the step's content words that are the task's),
    ``restates_task`` (:func:`restates`), ``args_repeat_fuzzy`` (a tool call's largest
    argument Jaccard with an earlier call's, :data:`MAX_EARLIER` latest; 0 otherwise),
    ``calls_in_turn``, ``prev_result_empty`` / ``prev_result_short`` (the previous result,
    parsed, :func:`parse_result`, is empty / under :data:`SHORT_RESULT` characters),
    ``empty_results_so_far`` (results before this step that were either) and
    ``contradictions`` / ``has_contradiction`` (:data:`CONTRADICTIONS` in the action)."""
    import numpy as np

    columns = {name: _text(frame, name) for name in ("action", "observation", "speaker",
                                                     "prompt")}
    columns["is_tool"] = frame["is_tool"].to_numpy(bool)
    traj = frame["traj_id"].to_numpy(object)
    starts = np.flatnonzero(np.r_[True, traj[1:] != traj[:-1]][:len(traj)])  # trajectories
    rows: list[list[float]] = []
    for lo, hi in zip(starts, np.r_[starts[1:], len(traj)][:len(starts)], strict=True):
        turns = {name: values[lo:hi] for name, values in columns.items()}
        task = task_text(turns["prompt"][0], turns["observation"][0])
        rows.extend(_trajectory_rows(turns, task))
    values = np.array(rows, float).reshape(len(frame), len(EVIDENCE_COLUMNS))
    return {name: values[:, i] for i, name in enumerate(EVIDENCE_COLUMNS)}
