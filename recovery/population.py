"""Which trajectories the numbers count: the one home of the rule, as a constant, as SQL and as a
pandas mask.

A trajectory is counted when its outcome is known and it did not end by a crash of the harness
(not the agent's failure) nor for an unknown reason. A censored episode (end reason ``budget``:
the turn limit ended it) is counted, as a failure at its cap. Every view of the store
(:mod:`recovery.store.ddl_sql`), every frame of the analyses (:mod:`analyses.frames`) and the
data-quality numbers (:mod:`recovery.quality`, :mod:`analyses.report.quality`) use these, so
the SQL and the Python count the same trajectories.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

LEFT_OUT_END_REASONS = ("crash", "unknown")
"""Trajectories that ended so are left out of every number and counted apart: a crash of the
harness is not the agent's failure, and an unknown end is no outcome."""

_ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def counted_sql(alias: str = "") -> str:
    """The SQL predicate of a counted trajectory over ``trajectories`` (``alias``: the table's
    alias in the query, e.g. ``"tr"``; empty = unqualified columns).

    Two terms joined by ``AND``, unparenthesised: the store's views hold this exact text and
    a store made before keeps passing the catalog check; wrap it before an ``OR``.

    Raises:
        ValueError: for an alias that is not a plain SQL identifier.
    """
    if alias and not _ALIAS.fullmatch(alias):
        raise ValueError(f"not an SQL table alias: {alias!r}")
    prefix = f"{alias}." if alias else ""
    reasons = ", ".join(f"'{r}'" for r in LEFT_OUT_END_REASONS)
    return f"{prefix}success IS NOT NULL AND {prefix}end_reason NOT IN ({reasons})"


def left_out_sql(alias: str = "") -> str:
    """The SQL predicate of a trajectory left out: ``NOT`` :func:`counted_sql`, NULL-safe.

    Raises:
        ValueError: as :func:`counted_sql`.
    """
    counted_sql(alias)  # checks the alias
    prefix = f"{alias}." if alias else ""
    reasons = ", ".join(f"'{r}'" for r in LEFT_OUT_END_REASONS)
    return f"({prefix}success IS NULL OR {prefix}end_reason IN ({reasons}))"


def counted_mask(frame: pd.DataFrame) -> np.ndarray:
    """Which rows of a trajectories frame are counted, as a boolean array.

    ``frame`` needs ``success``; without an ``end_reason`` column every row with a known
    outcome is counted (a frame built by hand states no end reason).
    """
    import numpy as np

    known = frame["success"].notna().to_numpy(dtype=bool)
    if "end_reason" not in frame:
        return known
    reason = frame["end_reason"].astype(object).to_numpy()
    return known & ~np.isin(reason, np.array(LEFT_OUT_END_REASONS, dtype=object))
