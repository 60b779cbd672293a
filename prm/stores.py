"""Opening the store a ``prm`` command reads: only one that exists, never a new empty one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from recovery.store import Store


def open_store(path: str | Path, *, writable: bool = False) -> Store:
    """Open an existing store; a missing path or a file that is no store is refused.

    Args:
        path: The store (a DuckDB file or a folder store).
        writable: Open for writing (``prm score`` writes ``step_scores``); a DuckDB file is
            checked read-only first, so a file that is not a store is never changed.

    Raises:
        InputProblem: the store does not exist (nothing is created) or is not a store.
    """
    from recovery.store import open_store as open_any

    return open_any(path, read_only=not writable, must_exist=True)
