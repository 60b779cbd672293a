"""The structured PRM's text scores: each text field of a turn hashed into word unigrams and
bigrams (:func:`text_counts`), weighted by their Naive Bayes log-count ratio of error turns
against the others (:func:`nb_ratios`), averaged per field (:func:`text_scores`) and over the
trajectory so far (:func:`running_means`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prm.linear.folder_checks import TEXT_BITS, TEXT_WIDTH
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

NB_ALPHA = 1.0
"""Additive smoothing of the Naive Bayes word counts."""


def text_counts(table: pd.DataFrame) -> Any:
    """The text block's raw counts: each of :data:`prm.data.features.TEXT_COLUMNS` hashed
    (scikit-learn's ``HashingVectorizer``: lower case, word unigrams and bigrams, ``2 **``
    :data:`TEXT_BITS` columns, no sign flipping), ``log(1 + count)``, side by side. Needs no
    fitting, so it can be computed once for every fold.

    Raises:
        UsageProblem: the table has no text columns.
    """
    import numpy as np
    import scipy.sparse as sp
    from sklearn.feature_extraction.text import HashingVectorizer

    from prm.data.features import TEXT_COLUMNS

    missing = [c for c in TEXT_COLUMNS if c not in table]
    if missing:
        raise UsageProblem(f"this structured model reads the turns' text: the table has no "
                           f"{missing[0]!r} column (prm.linear.structured_rows.feature_rows "
                           "gives it)")
    vectorizer = HashingVectorizer(n_features=2 ** TEXT_BITS, ngram_range=(1, 2),
                                   alternate_sign=False, norm=None, dtype=np.float64)
    if not len(table):  # the vectorizer cannot transform no text at all
        return sp.csr_matrix((0, TEXT_WIDTH))
    blocks = []
    for column in TEXT_COLUMNS:
        counts = vectorizer.transform(table[column].fillna("").astype(str).tolist()).tocsr()
        counts.data = np.log1p(counts.data)
        blocks.append(counts)
    return sp.hstack(blocks, format="csr")



def nb_ratios(counts: Any, error: np.ndarray) -> np.ndarray:
    """Naive Bayes log-count ratios of the hashed text columns: ``log(p / |p|) - log(q /
    |q|)`` with ``p`` the error turns' counts and ``q`` the others' (each weighted by how
    much of the turn is an error, :data:`NB_ALPHA` added), per text field (each field's own
    normalisation). A column no training turn has gets 0."""
    import numpy as np

    width = 2 ** TEXT_BITS
    p = np.asarray(counts.T @ error).ravel()
    q = np.asarray(counts.T @ (1.0 - error)).ravel()
    seen = np.asarray((counts != 0).sum(axis=0)).ravel() > 0
    out = np.zeros(counts.shape[1])
    for k in range(counts.shape[1] // width):
        part = slice(k * width, (k + 1) * width)
        pk, qk = p[part] + NB_ALPHA, q[part] + NB_ALPHA
        out[part] = np.log(pk / pk.sum()) - np.log(qk / qk.sum())
    return np.where(seen, out, 0.0)


def running_means(scores: np.ndarray, table: pd.DataFrame) -> np.ndarray:
    """Per turn, the mean of ``scores`` over its trajectory's turns up to and including it
    (by ``t``): how error-like the trajectory's text has been so far. Reads no later turn."""
    import numpy as np
    import pandas as pd

    traj, t = table["traj_id"].to_numpy(), table["t"].to_numpy()
    order = np.lexsort((t, traj))
    ordered = pd.DataFrame(scores[order])
    sums = ordered.groupby(traj[order], sort=False).cumsum().to_numpy()
    counts = ordered.groupby(traj[order], sort=False).cumcount().to_numpy() + 1.0
    out = np.empty_like(scores)
    out[order] = sums / counts[:, None]
    return out


def text_scores(counts: Any, ratios: np.ndarray) -> np.ndarray:
    """Per turn and text field: the mean ratio of its words (counts as weights; 0 for an empty
    field), one column per field."""
    import numpy as np

    width = 2 ** TEXT_BITS
    fields = counts.shape[1] // width
    out = np.zeros((counts.shape[0], fields))
    for k in range(fields):
        part = counts[:, k * width:(k + 1) * width]
        total = np.asarray(part.sum(axis=1)).ravel()
        out[:, k] = np.asarray(part @ ratios[k * width:(k + 1) * width]).ravel() / np.maximum(
            total, 1e-12)
    return out
