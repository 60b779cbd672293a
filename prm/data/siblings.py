"""The sibling (self-consistency) features, computed with array operations over all groups.

What each feature means is in :func:`prm.data.features.sibling_features`. Counts replace the
loops over sibling pairs: the share of siblings whose final answer equals a turn's action is
(trajectories of the task whose final answer is that action, less the turn's own) / (K - 1),
and likewise for the answers at the same turn, the lengths and the outcomes. The word-set
Jaccard similarity has no such shortcut (it needs every pair of a turn and a sibling's final
answer), so it reads at most :data:`MAX_SIMILARITY_SIBLINGS` siblings: above that many, the
trajectories of the task with the smallest ids (a digest, so a fixed pseudo-random sample).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

MAX_SIMILARITY_SIBLINGS = 64
"""Siblings whose final answers ``sib_similarity_final`` compares a turn with (at most)."""

_CHUNK_ROWS = 50_000
"""Turns per sparse product of the similarity (bounds its memory: rows x siblings)."""


@dataclass
class _Units:
    """The trajectories (units) of a frame within their ``(run, task_id)`` group.

    Attributes:
        row_unit: Unit of each row (-1: the row's group key is missing).
        group: Group of each unit.
        size: Units of each group (K).
        first: Each unit's first row in ``(t, frame order)``; ``last``: its last row.
        n_rows: Rows of each unit.
        rank: Each unit's place among its group's units in trajectory-id order.
        order: The rows sorted by unit, then ``t`` (stable).
        start: Each group's first unit (a group's units are consecutive).
    """

    row_unit: np.ndarray
    group: np.ndarray
    size: np.ndarray
    start: np.ndarray
    first: np.ndarray
    last: np.ndarray
    n_rows: np.ndarray
    rank: np.ndarray
    order: np.ndarray

_WORD_RE = re.compile(r"[0-9a-z]+")


def normalise_answer(text: str | None) -> str:
    """An answer compared for agreement: its lower-case letters and digits, one space apart
    (punctuation, quotes and markup dropped)."""
    return " ".join(_WORD_RE.findall((text or "").lower()))


def _units(frame: pd.DataFrame, turn: np.ndarray) -> _Units:
    import numpy as np
    import pandas as pd

    group = frame.groupby(["run", "task_id"], sort=False).ngroup().to_numpy()
    traj = pd.factorize(frame["traj_id"], sort=True)[0].astype(np.int64)
    n_traj = int(traj.max()) + 1 if len(traj) else 1
    key = np.where((group >= 0) & (traj >= 0), group * n_traj + traj, -1)
    # units numbered in (group, trajectory id) order, so a group's units are consecutive
    uniq, row_unit = np.unique(key, return_inverse=True)
    if len(uniq) and uniq[0] == -1:
        uniq, row_unit = uniq[1:], row_unit - 1
    unit_group = uniq // n_traj
    _, first_of_group, size = np.unique(unit_group, return_index=True, return_counts=True)
    group_index = np.repeat(np.arange(len(size)), size)
    rank = np.arange(len(uniq)) - first_of_group[group_index]
    kept = row_unit >= 0
    order = np.flatnonzero(kept)[np.lexsort((turn[kept], row_unit[kept]))]
    sorted_units = row_unit[order]
    starts = np.flatnonzero(np.diff(sorted_units, prepend=-2) != 0)
    ends = np.r_[starts[1:], len(order)][:len(starts)] - 1
    return _Units(row_unit=row_unit, group=group_index, size=size, start=first_of_group,
                  first=order[starts],
                  last=order[ends], n_rows=ends - starts + 1, rank=rank, order=order)


def _counts(table: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """How often each of ``queries`` occurs in ``table`` (int64 keys)."""
    import numpy as np

    values, counts = np.unique(table, return_counts=True)
    at = np.clip(np.searchsorted(values, queries), 0, max(len(values) - 1, 0))
    if not len(values):
        return np.zeros(len(queries), dtype=np.int64)
    return np.where(values[at] == queries, counts[at], 0)


def _pair_key(*columns: np.ndarray) -> np.ndarray:
    """One int64 key per row of integer columns, equal where every column is (exact: dense
    ranks combined column by column, never a hash)."""
    import numpy as np

    key = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        values, codes = np.unique(np.asarray(column), return_inverse=True)
        key = np.unique(key * len(values) + codes.reshape(-1), return_inverse=True)[1]
    return key.reshape(-1).astype(np.int64)


def _same_turn(u: _Units, answer: np.ndarray, turn: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``sib_same_turn`` of ``rows``: among the siblings with a turn ``t``, the share whose
    action there equals this one (a trajectory's turn ``t`` given twice counts its last)."""
    import numpy as np

    order = u.order
    unit_t = _pair_key(u.row_unit[order], turn[order])
    last = np.r_[unit_t[1:] != unit_t[:-1], True]          # the row that counts for (unit, t)
    counted = order[last]
    answer_of = np.full(len(answer), -1, dtype=np.int64)   # answer counted at each row's (u, t)
    answer_of[order] = np.repeat(answer[counted], np.diff(np.r_[-1, np.flatnonzero(last)]))
    grp = u.group[u.row_unit[counted]]
    both = _pair_key(np.r_[grp, u.group[u.row_unit[rows]]], np.r_[turn[counted], turn[rows]])
    full = _pair_key(np.r_[grp, u.group[u.row_unit[rows]]], np.r_[turn[counted], turn[rows]],
                     np.r_[answer[counted], answer[rows]])
    k = len(counted)
    having = _counts(both[:k], both[k:]) - 1
    equal = _counts(full[:k], full[k:]) - (answer_of[rows] == answer[rows])
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(having > 0, equal / np.maximum(having, 1), np.nan)


def _word_tokens(texts: np.ndarray, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct words of ``texts[which]``: (position in ``which`` of each word, word)."""
    import numpy as np
    import pandas as pd

    sets = [sorted(set(str(texts[i]).split())) for i in which]
    lengths = np.fromiter((len(w) for w in sets), dtype=np.int64, count=len(sets))
    words = pd.factorize(pd.Series([w for ws in sets for w in ws], dtype=object))[0]
    return np.repeat(np.arange(len(which)), lengths), words.astype(np.int64)


def _similarity(u: _Units, answer: np.ndarray, texts: np.ndarray, rows: np.ndarray,
                cap: int = MAX_SIMILARITY_SIBLINGS) -> np.ndarray:
    """``sib_similarity_final`` of ``rows``: the mean word-set Jaccard similarity of each turn's
    answer with its siblings' final answers (at most ``cap`` siblings, see the module)."""
    import numpy as np
    import scipy.sparse as sp

    unit = u.row_unit[rows]
    group = u.group[unit]
    chosen = np.flatnonzero((u.rank <= cap) & (u.size[u.group] >= 2))  # the siblings read
    distinct = np.unique(answer)                     # word sets of each distinct answer once
    position, word = _word_tokens(texts, distinct)
    n_words = np.bincount(position, minlength=len(distinct))
    at = np.searchsorted(distinct, answer)           # row -> its answer's place in `distinct`
    own_words, final_words = n_words[at[rows]], n_words[at[u.last[chosen]]]
    # tokens are (group, word) pairs, so that only the pairs of one task share any
    row_of = _expand(position, at[rows], len(distinct))
    col_of = _expand(position, at[u.last[chosen]], len(distinct))
    keys = _pair_key(np.r_[group[row_of[0]], u.group[chosen][col_of[0]]],
                     np.r_[word[row_of[1]], word[col_of[1]]])
    cols = int(keys.max()) + 1 if len(keys) else 0
    x = sp.csr_matrix((np.ones(len(row_of[0])), (row_of[0], keys[:len(row_of[0])])),
                      shape=(len(rows), cols))
    y_t = sp.csr_matrix((np.ones(len(col_of[0])), (col_of[0], keys[len(row_of[0]):])),
                        shape=(len(chosen), cols)).T.tocsr()
    total = np.zeros(len(rows))
    beyond = u.rank[unit] > cap                     # not among those read: skip the last one
    for lo in range(0, len(rows), _CHUNK_ROWS):
        inter = (x[lo:lo + _CHUNK_ROWS] @ y_t).tocoo()
        r, c = inter.row + lo, inter.col
        used = (chosen[c] != unit[r]) & ~(beyond[r] & (u.rank[chosen[c]] == cap))
        r, c, both = r[used], c[used], inter.data[used]
        total += np.bincount(r, weights=both / (own_words[r] + final_words[c] - both),
                             minlength=len(rows))
    # two empty word sets are alike (1): count the empty finals among a turn's siblings read
    empty = np.bincount(u.group[chosen], weights=(final_words == 0).astype(float), minlength=len(u.size))
    final_empty = n_words[at[u.last]] == 0
    cap_unit = np.minimum(u.start[group] + cap, len(u.group) - 1)
    empty_read = (empty[group] - np.where(beyond, final_empty[cap_unit], final_empty[unit]))
    total += np.where(own_words == 0, empty_read, 0.0)
    return total / np.minimum(u.size[group] - 1, cap)


def _expand(position: np.ndarray, which: np.ndarray,
            n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """For items that each take the tokens of ``position == which[i]``: (item, token index),
    one pair per token (``position`` is sorted, its values below ``n_items``)."""
    import numpy as np

    starts = np.searchsorted(position, np.arange(n_items + 1))
    begin, count = starts[which], starts[which + 1] - starts[which]
    item = np.repeat(np.arange(len(which)), count)
    offsets = np.arange(len(item)) - np.repeat(np.cumsum(count) - count, count)
    return item, np.repeat(begin, count) + offsets


def sibling_columns(frame: pd.DataFrame, setting: str) -> dict[str, np.ndarray]:
    """The columns of :func:`prm.data.features.sibling_features` (see there), in its order."""
    import numpy as np

    n = len(frame)
    names = ["sib_agree_final", "sib_similarity_final", "sib_same_turn", "sib_log_turns",
             "log_t_over_siblings"]
    if setting == "hindsight":
        names += ["own_final_agree", "sib_success_rate"]
    out = {name: np.full(n, np.nan) for name in names}
    out["log_siblings"] = np.zeros(n)
    if not n:
        return out
    turn = frame["t"].to_numpy(np.int64)
    u = _units(frame, turn)
    rows = np.flatnonzero(u.row_unit >= 0)
    rows = rows[u.size[u.group[u.row_unit[rows]]] >= 2]
    if not len(rows):
        return out
    answer, texts = _answers(frame["action"])
    unit = u.row_unit[rows]
    group = u.group[unit]
    others = (u.size[group] - 1).astype(float)
    final = answer[u.last]
    n_units = len(u.group)
    keys = _pair_key(np.r_[u.group, group, group], np.r_[final, answer[rows], final[unit]])
    with_final = _counts(keys[:n_units], keys[n_units:n_units + len(rows)])
    out["sib_agree_final"][rows] = (with_final - (final[unit] == answer[rows])) / others
    out["sib_similarity_final"][rows] = _similarity(u, answer, texts, rows)
    out["sib_same_turn"][rows] = _same_turn(u, answer, turn, rows)
    log_len = np.log1p(u.n_rows)
    sib_log = (np.bincount(u.group, weights=log_len)[group] - log_len[unit]) / others
    out["sib_log_turns"][rows] = sib_log
    out["log_t_over_siblings"][rows] = np.log1p(turn[rows]) - sib_log
    out["log_siblings"][rows] = np.log1p(others)
    if setting == "hindsight":
        own = _counts(keys[:n_units], keys[n_units + len(rows):]) - 1
        out["own_final_agree"][rows] = own / others
        out["sib_success_rate"][rows] = _success_rate(u, frame, unit, group)
    return out


def _success_rate(u: _Units, frame: pd.DataFrame, unit: np.ndarray,
                  group: np.ndarray) -> np.ndarray:
    """The siblings' success rate (known outcomes only; NaN when none is known)."""
    import numpy as np

    outcome = frame["success"].astype("float64").to_numpy()[u.first]
    known = ~np.isnan(outcome)
    wins = np.bincount(u.group, weights=np.where(known, outcome, 0.0))
    told = np.bincount(u.group, weights=known.astype(float))
    num = wins[group] - np.where(known[unit], outcome[unit], 0.0)
    den = told[group] - known[unit]
    return np.where(den > 0, num / np.maximum(den, 1.0), np.nan)


def _answers(actions: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Each action's answer (:func:`normalise_answer`) as a code, and the
    distinct answers; each distinct action is normalised once."""
    import numpy as np
    import pandas as pd


    codes, distinct = pd.factorize(actions, use_na_sentinel=False)
    normalised = pd.Series([normalise_answer(None if pd.isna(a) else a) for a in distinct],
                           dtype=object)
    remap, texts = pd.factorize(normalised)
    return remap[codes].astype(np.int64), np.asarray(texts, dtype=object)
