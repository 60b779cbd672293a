"""Flag columns of the turn frame read the same whatever their dtype, without pandas'
downcasting warning (``fillna(False)`` on a float column is refused by a future pandas)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from prm.data.families import _flags


@pytest.mark.parametrize("column", [
    pd.Series([1.0, np.nan, 0.0]),
    pd.Series([True, None, False], dtype=object),
    pd.Series([True, pd.NA, False], dtype="boolean"),
    pd.Series([True, False, False]),
])
def test_flags_read_any_dtype_without_a_warning(column: pd.Series) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _flags(column)
    assert got.dtype == bool and got.tolist() == [True, False, False]
