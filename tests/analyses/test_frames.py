"""analyses.frames.is_in: pandas' isin, as a numpy mask, on every kind of column."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyses.frames import is_in


@pytest.mark.parametrize("dtype", ["string[pyarrow]", "str", object])
def test_is_in_matches_pandas_isin(dtype: object) -> None:
    rng = np.random.default_rng(0)
    ids = [f"t{i}" for i in rng.integers(0, 50, size=400)] + [None]
    column = pd.Series(ids, dtype=dtype)
    for wanted in ([], ["t1", "t7", "nope"], [None], list(column.iloc[::3]), column.iloc[::5]):
        mask = is_in(column, wanted)
        assert mask.dtype == bool and mask.shape == (len(column),)
        np.testing.assert_array_equal(mask, column.isin(wanted).to_numpy(dtype=bool))


def test_is_in_falls_back_for_other_columns() -> None:
    numbers = pd.Series([1, 2, 3, 2])
    np.testing.assert_array_equal(is_in(numbers, [2]), [False, True, False, True])
    np.testing.assert_array_equal(is_in(pd.Series(["a", "b"]), [1]), [False, False])
