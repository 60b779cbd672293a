"""Opening the store a BudgetMix command reads: read-only, and only if it exists."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    import duckdb


def open_existing_store(path: str | Path | None) -> duckdb.DuckDBPyConnection:
    """Open an existing store read-only; never create one.

    Args:
        path: The DuckDB file.

    Returns:
        The read-only connection (the caller closes it).

    Raises:
        UsageProblem: when no path is given.
        InputProblem: when the file is missing or is not a store of this toolkit.
    """
    import duckdb

    from recovery.store import connect

    if path is None:
        raise UsageProblem("--store is required")
    try:
        return connect(path, read_only=True)
    except FileNotFoundError:
        raise InputProblem(f"store {path} does not exist") from None
    except duckdb.Error as err:  # not a DuckDB file, or locked by a writer
        raise InputProblem(f"store {path} cannot be opened: {err}") from None
