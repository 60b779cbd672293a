"""Answers compared by meaning across the samples of a task (siblings).

A free-form answer almost never equals a sibling's word for word, so the exact comparison of
:mod:`prm.data.siblings` rarely fires. Here a step's answer is pulled out of its text
(:func:`extract_answer`), normalised (:func:`normalise_answer`: case, punctuation, articles,
white space) and compared with each sibling's final answer by containment and token F1
(:func:`agrees`). Blind: a turn reads its own action and the siblings' final actions, never an
outcome. With one sample of a task every column is NaN (neutral: the model fills its mean).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

AGREE_F1 = 0.5
"""Two answers agree when one contains the other (normalised) or their token F1 reaches this."""

MAX_ANSWER_SIBLINGS = 16
"""Siblings a turn's answer is compared with (the first in trajectory-id order)."""

_TAG_RE = re.compile(r"<(answer|final_answer|final)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)
_LEAD_RE = re.compile(r"(?:final answer\s*(?:is)?\s*[:\-]|the answer is\s*:?)\s*(.+)",
                      re.IGNORECASE | re.DOTALL)
_CALL_RE = re.compile(r"^\s*[A-Za-z_][\w.]*\s*\((.*)\)\s*$", re.DOTALL)
_KEY_RE = re.compile(r"""["'][A-Za-z_]\w*["']\s*:|\b[A-Za-z_]\w*\s*=(?!=)""")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD_RE = re.compile(r"[0-9a-z]+")
_TAIL = 2000
_ARTICLES = frozenset({"a", "an", "the"})


def extract_answer(text: str | None) -> str:
    """A step's answer: the last ``<answer>...</answer>`` (or ``<final_answer>``), else what
    follows the last "final answer:" / "the answer is", else a tool call's argument values
    (``key=`` and ``"key":`` names dropped), else
    the last non-empty sentence (or line)."""
    text = (text or "").strip()
    tags = _TAG_RE.findall(text)
    if tags:
        return tags[-1][1].strip()
    leads = list(_LEAD_RE.finditer(text))
    if leads:
        return _first_sentence(leads[-1].group(1))
    call = _CALL_RE.match(text)
    if call:  # the values are the answer, not the argument names
        return _KEY_RE.sub(" ", call.group(1)).strip()
    # the last sentence lies in the tail: splitting a long message whole is the cost
    parts = [p.strip() for p in _SENTENCE_RE.split(text[-_TAIL:]) if p.strip()]
    return parts[-1] if parts else ""


def _first_sentence(text: str) -> str:
    parts = [p.strip() for p in _SENTENCE_RE.split(text.strip()) if p.strip()]
    return parts[0] if parts else ""


def normalise_answer(text: str | None) -> str:
    """Lower case letters and digits, one space apart; articles (a, an, the) dropped."""
    return " ".join(w for w in _WORD_RE.findall((text or "").lower()) if w not in _ARTICLES)


def token_f1(a: str, b: str) -> float:
    """Token F1 of two normalised answers (SQuAD's: the multiset overlap); 1 when both are
    empty, 0 when one is."""
    x, y = Counter(a.split()), Counter(b.split())
    if not x or not y:
        return float(not x and not y)
    common = sum((x & y).values())
    if not common:
        return 0.0
    precision, recall = common / sum(x.values()), common / sum(y.values())
    return 2 * precision * recall / (precision + recall)


def contains(a: str, b: str) -> bool:
    """One normalised answer holds the other as whole words (both non-empty)."""
    if not a or not b:
        return False
    return f" {b} " in f" {a} " or f" {a} " in f" {b} "


def agrees(a: str, b: str) -> bool:
    """Two normalised answers agree: containment, or token F1 at least :data:`AGREE_F1`."""
    return contains(a, b) or token_f1(a, b) >= AGREE_F1


def majority(answers: list[str],
             agree: Callable[[str, str], bool] = agrees) -> tuple[str, float]:
    """The answer most of ``answers`` agree with (``agree``, :func:`agrees` or a memo of it;
    ties: the first) and the share that do. ``("", nan)`` when there is none."""
    if not answers:
        return "", float("nan")
    counts = [sum(agree(a, b) for b in answers) for a in answers]
    best = max(range(len(answers)), key=lambda i: (counts[i], -i))
    return answers[best], counts[best] / len(answers)


def _group_rows(finals: list[str], owns: dict[int, list[str]]) -> dict[tuple[int, str],
                                                                       tuple[float, ...]]:
    """:data:`ANSWER_COLUMNS` for each (sample, own answer) of one task: ``finals`` are its
    samples' normalised final answers (trajectory-id order), ``owns[i]`` sample i's distinct
    answers. The siblings' majority is found once per set of sibling answers, not per turn."""
    out = {}
    majorities: dict[tuple[str, ...], tuple[str, float]] = {}
    pairs: dict[tuple[str, str], tuple[bool, float]] = {}

    def compare(a: str, b: str) -> tuple[bool, float]:  # answers recur: each pair once
        if (a, b) not in pairs:
            pairs[(a, b)] = (contains(a, b), token_f1(a, b))
        return pairs[(a, b)]

    def agree(a: str, b: str) -> bool:
        held, f1 = compare(a, b)
        return held or f1 >= AGREE_F1

    for i, answers in owns.items():
        sibs = [j for j in range(len(finals)) if j != i][:MAX_ANSWER_SIBLINGS]
        if not sibs:
            continue
        key = tuple(finals[j] for j in sibs)
        if key not in majorities:
            majorities[key] = majority(list(key), agree)
        top, share = majorities[key]
        for own in answers:
            scores = [compare(own, finals[j]) for j in sibs]
            out[(i, own)] = (sum(held for held, _ in scores) / len(sibs),
                             sum(f1 for _, f1 in scores) / len(sibs),
                             float(agree(own, top)), share)
    return out


ANSWER_COLUMNS = ("sib_answer_contain", "sib_answer_f1", "states_sib_majority",
                  "sib_majority_share")
"""The columns of :func:`answer_columns`."""


def _own_answers(actions: pd.Series) -> np.ndarray:
    """:func:`normalise_answer` of :func:`extract_answer` of each action (each distinct one
    once)."""
    import numpy as np

    codes, distinct = actions.fillna("").astype(str).factorize()
    done = np.array([normalise_answer(extract_answer(a)) for a in distinct], dtype=object)
    return done[codes] if len(codes) else np.array([], dtype=object)


def answer_columns(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """Per turn of a turn frame (any row order): ``sib_answer_contain`` (share of siblings
    whose final answer contains or is contained in this step's answer, :func:`contains`),
    ``sib_answer_f1`` (mean :func:`token_f1` with them), ``states_sib_majority`` (the step's answer agrees with the answer most siblings
    agree on) and ``sib_majority_share`` (the share of siblings agreeing with that majority).
    Siblings: the other trajectories of the same run and task (at most
    :data:`MAX_ANSWER_SIBLINGS`); their last actions, never their outcomes. NaN with none."""
    import numpy as np

    n = len(frame)
    out = {name: np.full(n, np.nan) for name in ANSWER_COLUMNS}
    if not n:
        return out
    samples = frame.groupby(["run", "task_id"])["traj_id"].nunique()
    if not len(samples) or samples.max() < 2:
        return out  # one sample per task: nothing to compare (and no answer to extract)
    order = np.lexsort((frame["t"].to_numpy(), frame["traj_id"].to_numpy(object)))
    own = _own_answers(frame["action"])[order]
    traj = frame["traj_id"].to_numpy(object)[order]
    last = np.flatnonzero(np.r_[traj[1:] != traj[:-1], True])  # each trajectory's last turn
    final_of = dict(zip(traj[last], own[last], strict=True))
    finals = frame.iloc[order[last]]
    first = np.r_[0, last[:-1] + 1]
    starts = dict(zip(traj[last], zip(first, last + 1, strict=True), strict=True))
    for trajs in finals.groupby(["run", "task_id"], sort=False)["traj_id"].agg(list):
        trajs = sorted(trajs)
        owns = {i: list(dict.fromkeys(own[slice(*starts[x])])) for i, x in enumerate(trajs)}
        values = _group_rows([final_of[x] for x in trajs], owns)
        for i, x in enumerate(trajs):
            for r in range(*starts[x]):
                for name, value in zip(ANSWER_COLUMNS, values.get((i, own[r]), (np.nan,) * 4),
                                       strict=True):
                    out[name][order[r]] = value
    return out

