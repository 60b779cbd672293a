"""The per-trajectory feature families of the structured PRM: one function per family (a turn's
position, speaker, kind and marks, spells, repeats, observation, tool calls, lengths, hedging
words and, in hindsight, the episode's end), each reading a sorted turn frame
(:func:`prm.data.features.load_turn_frame`) and the setting, never a later turn in ``blind``."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

SHORT_OBSERVATION = 20
"""An observation of fewer characters (after stripping, not empty) counts as short."""

HEDGES = (
    "maybe", "perhaps", "possibly", "probably", "might", "could be", "seems", "appears",
    "likely", "unclear", "not sure", "uncertain", "i think", "i believe", "i guess",
    "approximately", "assume", "unable", "cannot", "can't", "couldn't", "sorry", "apologize",
    "unfortunately", "no information", "not found",
)
"""Hedging and giving-up words, matched as whole words or phrases in a turn's action,
case-insensitively. A short generic English list: words of doubt (``maybe``, ``seems``), of
approximation (``approximately``, ``assume``) and of failure (``unable``, ``sorry``,
``not found``); nothing specific to one benchmark's wording."""

# matched on lower-cased text: several times faster than an IGNORECASE alternation
_HEDGE_RE = re.compile(r"\b(?:" + "|".join(re.escape(h) for h in HEDGES) + r")\b")
_ERROR_RE = re.compile(r"^\s*error\b|\b(?:error|exception|traceback|failed|failure|invalid|"
                       r"not found|denied|timed? ?out)\b", re.IGNORECASE)
_CODE_RE = re.compile(r"^\s*(?:```|~~~)", re.MULTILINE)
_SPACE_RE = re.compile(r"\s+")

SPEAKER_BUCKETS = 32
"""Hashed one-hot buckets of the speaker's name (CRC-32 of the normalised name, so the same
name lands in the same bucket on every machine and in every run)."""

POSITION_EDGES = (1, 2, 3, 4, 5, 6, 9, 17, 33)
"""Lower edges of the position buckets (``pos_1``, ``pos_2``, ..., ``pos_6_8``, ...,
``pos_33_up``): one-hot, so a linear head can give each early position its own weight."""

TURNS_LEFT_EDGES = (0, 1, 2, 3, 4, 5, 6, 9, 17, 33)
"""Lower edges of the hindsight turns-left buckets (``left_0`` is the last turn)."""


def normalise(text: str | None) -> str:
    """Text compared for "the same": lower case, runs of white space as one space, stripped."""
    return _SPACE_RE.sub(" ", (text or "").lower()).strip()


def _flags(column: pd.Series) -> np.ndarray:
    """A column of flags (bool, nullable boolean, float 0/1 or object) as a bool array with
    missing values false. ``fillna(False)`` on a float or object column is a downcast a future
    pandas refuses, hence the nullable boolean in between."""
    return column.astype("boolean").fillna(False).to_numpy(bool)


def _cumcount_true(flags: np.ndarray, traj: np.ndarray) -> np.ndarray:
    """Per row, how many rows of the same trajectory up to and including it are true."""
    import pandas as pd

    return pd.Series(flags.astype(float)).groupby(traj).cumsum().to_numpy()


def _bucket_names(prefix: str, edges: Sequence[int]) -> list[str]:
    """``prefix_a`` for a one-wide bucket, ``prefix_a_b`` for ``[a, b]``, ``prefix_a_up``."""
    names = []
    for i, low in enumerate(edges):
        high = edges[i + 1] - 1 if i + 1 < len(edges) else None
        names.append(f"{prefix}_{low}" if high == low else
                     f"{prefix}_{low}_up" if high is None else f"{prefix}_{low}_{high}")
    return names


def _buckets(values: np.ndarray, prefix: str, edges: Sequence[int]) -> dict[str, np.ndarray]:
    """One-hot of the bucket of ``edges`` (lower edges, ascending) each value falls in."""
    import numpy as np

    index = np.searchsorted(np.asarray(edges, float), values, side="right") - 1
    return {name: (index == i).astype(float)
            for i, name in enumerate(_bucket_names(prefix, edges))}


def position_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """Where the turn is: ``position`` (t), ``log_t`` (``log(1 + t)``), ``first`` (t = 1) and
    one-hot buckets of t (:data:`POSITION_EDGES`: ``pos_1``, ``pos_2``, ..., ``pos_6_8``,
    ..., ``pos_33_up``). In hindsight also ``turns_left`` (``n_turns - t``), ``fraction``
    (``t / n_turns``) and one-hot buckets of the turns left (:data:`TURNS_LEFT_EDGES`:
    ``left_0`` is the last turn, ``left_1`` the one before, ...). A blind turn knows its
    position only: how many turns are left is the future."""
    import numpy as np

    t = frame["t"].to_numpy(float)
    out = {"position": t, "log_t": np.log1p(t), "first": (t == 1).astype(float),
           **_buckets(t, "pos", POSITION_EDGES)}
    if setting == "hindsight":
        n = frame["n_turns"].to_numpy(float)
        out["turns_left"] = n - t
        out["fraction"] = t / np.maximum(n, 1.0)
        out.update(_buckets(n - t, "left", TURNS_LEFT_EDGES))
    return out


def speaker_key(name: object) -> str:
    """A speaker's name compared: lower case, white space collapsed, stripped."""
    return normalise(None if name is None else str(name))


def speaker_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """Who wrote the turn (multi-agent logs; constant, so neutral, where nobody is named):
    ``speaker_0`` ... (a one-hot of the name hashed into :data:`SPEAKER_BUCKETS` buckets by
    CRC-32, :func:`speaker_key`), ``speaker_known`` (a name is given), ``speaker_changed``
    (another speaker than the turn before's), ``speaker_new`` (this speaker's first turn) and
    ``log_speaker_turns`` (``log(1 + `` this speaker's turns so far, this one included ``)``).
    Only the turn and earlier turns are read."""
    import zlib

    import numpy as np
    import pandas as pd

    n = len(frame)
    names = (frame["speaker"].map(speaker_key).to_numpy(object) if "speaker" in frame
             else np.full(n, "", object))
    known = names != ""
    bucket = np.array([zlib.crc32(x.encode()) % SPEAKER_BUCKETS for x in names], int)
    out = {f"speaker_{b}": ((bucket == b) & known).astype(float)
           for b in range(SPEAKER_BUCKETS)}
    traj = frame["traj_id"].to_numpy()
    same_traj = np.r_[False, traj[1:] == traj[:-1]]
    previous = np.r_[[None], names[:-1]]
    keys = pd.DataFrame({"traj": traj, "speaker": names})
    count = keys.groupby(["traj", "speaker"], sort=False).cumcount().to_numpy() + 1.0
    out["speaker_known"] = known.astype(float)
    out["speaker_changed"] = (known & same_traj & (names != previous)).astype(float)
    out["speaker_new"] = (known & (count == 1)).astype(float)
    out["log_speaker_turns"] = np.where(known, np.log1p(count), 0.0)
    return out


def _spell_membership(frame: pd.DataFrame, setting: str) -> np.ndarray:
    """:func:`recovery.marking.spells.in_spell` per turn; blind: as if the episode were still
    running at this turn (not a success, not over), so the outcome is never read."""
    import numpy as np

    from recovery.marking.spells import in_spell

    is_error = _flags(frame["is_error"])
    t = frame["t"].to_numpy(np.int64)
    if setting == "blind":
        return in_spell(is_error, t, np.zeros(len(t), bool), np.full(len(t), np.nan), t)
    success = _flags(frame["success"])
    won_at = frame["success_turn"].to_numpy(float)
    return in_spell(is_error, t, success, won_at, frame["n_turns"].to_numpy(np.int64))


def turn_kind_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """What kind of turn it is and how it is marked: ``tool_call`` (the action is a tool
    call), ``message`` (it is not: a reply or an answer), ``code_block`` (the action holds a
    fenced code block, a line starting with three backticks or tildes: how code-writing
    agents act, their code run by the next turn or by a tool), ``first_code_block`` (the
    trajectory's first turn with one; read from this and earlier turns), ``error_mark``
    (``turns.is_error``), ``error_kind_named`` (marking gave a kind), ``in_spell`` (the one
    spell rule), ``prev_in_spell`` (the turn before was in a spell) and ``errors_so_far``
    (spell turns up to this one)."""
    import numpy as np

    traj = frame["traj_id"].to_numpy()
    tool = frame["is_tool"].to_numpy(bool)
    code = frame["action"].fillna("").astype(str).str.contains(_CODE_RE).to_numpy(bool)
    spell = _spell_membership(frame, setting)
    prev = np.r_[False, spell[:-1]] & np.r_[False, traj[1:] == traj[:-1]]
    return {
        "tool_call": tool.astype(float),
        "message": (~tool).astype(float),
        "code_block": code.astype(float),
        "first_code_block": (code & (_cumcount_true(code, traj) == 1)).astype(float),
        "error_mark": _flags(frame["is_error"]).astype(float),
        "error_kind_named": frame["error_kind"].notna().to_numpy(float),
        "in_spell": spell.astype(float),
        "prev_in_spell": prev.astype(float),
        "errors_so_far": _cumcount_true(spell, traj),
    }


def spell_age_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """How long the agent has been in trouble: ``spell_age`` (consecutive spell turns ending
    at this one, 0 outside a spell) and ``turns_since_error`` (turns since the last spell turn
    before this one; NaN when there was none)."""
    import numpy as np

    traj = frame["traj_id"].to_numpy()
    spell = _spell_membership(frame, setting)
    t = frame["t"].to_numpy(float)
    age = np.zeros(len(t))
    since = np.full(len(t), np.nan)
    last_error = np.nan
    for i in range(len(t)):
        new = i == 0 or traj[i] != traj[i - 1]
        if new:
            last_error = np.nan
        since[i] = t[i] - last_error
        age[i] = (0.0 if new else age[i - 1]) + 1.0 if spell[i] else 0.0
        if spell[i]:
            last_error = t[i]
    return {"spell_age": age, "turns_since_error": since}


def _seen_before(values: np.ndarray, traj: np.ndarray) -> np.ndarray:
    """Per row: the same value occurred in an earlier row of the same trajectory."""
    import pandas as pd

    keys = pd.DataFrame({"traj": traj, "value": values})
    return keys.duplicated(keep="first").to_numpy()


FUZZY_REPEAT = 0.8
"""``action_repeat_fuzzy``: a word-set Jaccard similarity with an earlier action (a tool call's
arguments against earlier calls' arguments) at least this high."""


def _fuzzy_repeat(actions: pd.Series, traj: np.ndarray) -> np.ndarray:
    """Per turn: 1 when its words (a tool call's: its arguments') have a Jaccard similarity of
    at least :data:`FUZZY_REPEAT` with an earlier turn's of the same kind (calls with calls,
    messages with messages; the latest :data:`prm.data.evidence.MAX_EARLIER` calls or
    :data:`prm.data.evidence.MAX_EARLIER_MESSAGES` messages)."""
    import numpy as np

    from prm.data.evidence import (
        MAX_EARLIER,
        MAX_EARLIER_MESSAGES,
        arg_words,
        call_arguments,
        content_words,
        max_jaccard,
    )

    out = np.zeros(len(traj))
    earlier: dict[bool, list[set[str]]] = {True: [], False: []}
    for i, action in enumerate(actions.fillna("").astype(str)):
        if i == 0 or traj[i] != traj[i - 1]:
            earlier = {True: [], False: []}
        args = call_arguments(action)
        words = content_words(action) if args is None else arg_words(args)
        kind = earlier[args is not None]
        cap = MAX_EARLIER if args is not None else MAX_EARLIER_MESSAGES
        # an empty message repeats nothing; a call with no arguments repeats one like it
        known = bool(words) or args is not None
        out[i] = float(known and max_jaccard(words, kind[-cap:]) >= FUZZY_REPEAT)
        kind.append(words)
    return out


def repeat_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """Loops: ``action_repeat`` (the normalised action, :func:`normalise`, equals an earlier
    turn's), ``action_repeat_fuzzy`` (:func:`_fuzzy_repeat`: nearly the same words), ``action_same_as_prev`` (equals the previous turn's), ``observation_repeat``
    (the observation equals an earlier one, empty ones excepted), ``repeats_so_far``
    (repeated actions up to this turn)."""
    import numpy as np

    traj = frame["traj_id"].to_numpy()
    actions = np.array([normalise(a) for a in frame["action"]], dtype=object)
    observations = np.array([normalise(o) for o in frame["observation"]], dtype=object)
    same_traj = np.r_[False, traj[1:] == traj[:-1]]
    repeat = _seen_before(actions, traj)
    return {
        "action_repeat": repeat.astype(float),
        "action_repeat_fuzzy": _fuzzy_repeat(frame["action"], traj),
        "action_same_as_prev": (same_traj & (actions == np.r_[[None], actions[:-1]])
                                ).astype(float),
        "observation_repeat": (_seen_before(observations, traj) & (observations != "")
                               ).astype(float),
        "repeats_so_far": _cumcount_true(repeat, traj),
    }


def observation_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """What came back: ``observation_empty``, ``observation_short`` (not empty, but its parsed
    result, :func:`prm.data.evidence.parse_result`, is under :data:`SHORT_OBSERVATION`
    characters: a JSON wrapper such as ``{"result": ""}`` is read through), ``observation_error`` (starts with
    "error" or names an error, exception, traceback, failure, "not found", "denied" or a time
    out) and ``log_observation_chars``."""
    import numpy as np

    from prm.data.evidence import parse_result

    text = frame["observation"].fillna("").astype(str).str.strip()
    n = text.str.len().to_numpy(float)
    parsed = np.array([len(parse_result(o)) for o in text], float)
    return {
        "observation_empty": (n == 0).astype(float),
        "observation_short": ((n > 0) & (parsed < SHORT_OBSERVATION)).astype(float),
        "observation_error": text.str.contains(_ERROR_RE).to_numpy(float),
        "log_observation_chars": np.log1p(n),
    }


def tool_count_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """``tool_calls_so_far`` (tool-call turns up to and including this one) and its log."""
    import numpy as np

    count = _cumcount_true(frame["is_tool"].to_numpy(bool), frame["traj_id"].to_numpy())
    return {"tool_calls_so_far": count, "log_tool_calls_so_far": np.log1p(count)}


def length_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """``log_action_chars``, ``log_action_words`` and ``log_answer_chars`` (the action's
    length when the turn is a message rather than a tool call, else 0)."""
    import numpy as np

    text = frame["action"].fillna("").astype(str)
    chars = text.str.len().to_numpy(float)
    words = text.str.split().str.len().fillna(0).to_numpy(float)
    message = ~frame["is_tool"].to_numpy(bool)
    return {"log_action_chars": np.log1p(chars), "log_action_words": np.log1p(words),
            "log_answer_chars": np.where(message, np.log1p(chars), 0.0)}


def hedging_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """``hedges`` (how many :data:`HEDGES` the action contains) and ``has_hedge``."""
    import numpy as np

    counts = np.array([len(_HEDGE_RE.findall((a or "").lower())) for a in frame["action"]],
                      float)
    return {"hedges": counts, "has_hedge": (counts > 0).astype(float)}


def evidence_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """The step read against the task and the evidence before it:
    :func:`prm.data.evidence.evidence_features`."""
    from prm.data.evidence import evidence_features as columns

    return columns(frame, setting)


def episode_end_features(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """Hindsight only (a running turn cannot know it is the last): ``last`` (the turn ends the
    episode), ``final_answer`` (the last turn is a message), the outcome ``outcome_success`` (NaN
    when unknown), and the outcome-aware rule's terms ``failed_last`` (the last turn of a
    failure) and ``failed_turns_left`` (``turns_left`` in a failure, else 0)."""
    import numpy as np

    from prm.data.labels import outcome_floor_classes

    if setting != "hindsight":
        return {}
    t = frame["t"].to_numpy(float)
    n = frame["n_turns"].to_numpy(float)
    last = t == n
    success = frame["success"].astype("float64").to_numpy()
    failed = success == 0.0
    return {"last": last.astype(float),
            "final_answer": (last & ~frame["is_tool"].to_numpy(bool)).astype(float),
            "outcome_success": success,
            "failed_last": (outcome_floor_classes(frame) < 0).astype(float),
            "failed_turns_left": np.where(failed, n - t, 0.0)}


FAMILIES: tuple[Callable[[pd.DataFrame, str], dict[str, np.ndarray]], ...] = (
    position_features, speaker_features, turn_kind_features, spell_age_features, repeat_features,
    observation_features, tool_count_features, length_features, hedging_features,
    evidence_features, episode_end_features,
)
"""The per-trajectory families, in the order their columns appear."""
