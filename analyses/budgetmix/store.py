"""Opening the store a BudgetMix command reads: read-only, and only if it exists."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from recovery.errors import UsageProblem

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
    from recovery.store import open_store

    if path is None:
        raise UsageProblem("--store is required")
    return open_store(path, read_only=True).con
