"""Opening the store a ``prm`` command reads: only one that exists, never a new empty one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from recovery.errors import InputProblem

if TYPE_CHECKING:
    import duckdb


def open_store(path: str | Path, *, writable: bool = False) -> duckdb.DuckDBPyConnection:
    """Connect to an existing store; a missing path or a file that is no store is refused.

    Args:
        path: The store (a DuckDB file).
        writable: Open for writing (``prm score`` writes ``step_scores``); the store is checked
            read-only first, so a file that is not a store is never changed.

    Raises:
        InputProblem: the store does not exist (nothing is created) or is not a store.
    """
    import duckdb

    from recovery.store import connect

    path = Path(path)
    if not path.exists():
        raise InputProblem(
            f"store {path} does not exist (prm reads an existing store; "
            f"`recovery ingest FILES --store {path}` makes one)"
        )
    try:
        con = connect(path, read_only=True)
    except FileNotFoundError as err:
        raise InputProblem(str(err)) from None
    except InputProblem:
        raise
    except (duckdb.Error, OSError) as err:  # e.g. IOException: a file that is not a database
        raise InputProblem(f"{path} cannot be opened as a store ({err})") from None
    if not writable:
        return con
    con.close()
    return connect(path)
