"""Opening a store: :func:`open_store`, the one way, for both kinds."""

from __future__ import annotations

from pathlib import Path

from recovery.store.base import Store
from recovery.store.duckdb_store import open_duckdb
from recovery.store.folder import is_folder_store, open_folder
from recovery.store.sandbox import Sandbox


def open_store(path: str | Path | None = None, *, read_only: bool = False,
               must_exist: bool = False, sandbox: Sandbox | None = None) -> Store:
    """Open a store, of either kind, and make sure its tables exist.

    A folder store is an existing directory, a path ending in ``/``, or an object-storage URL
    (:func:`recovery.store.folder.is_folder_store`); anything else is a DuckDB file.

    Args:
        path: The DuckDB file or the folder store; ``None`` or ``":memory:"`` for an
            in-memory store.
        read_only: Open read-only: the store must exist, nothing is created or written.
        must_exist: Refuse a store that does not exist yet, also when opening for writing (a
            command that reads an existing store, and may write scores into it).
        sandbox: For a read-only DuckDB file: the folders and temp folder its connection
            may use besides the store (:class:`recovery.store.sandbox.Sandbox`; default
            none but DuckDB's own temp folder).

    Returns:
        The store (close it, or use it as a context manager).

    Raises:
        InputProblem: one line naming the store, when it does not exist (``read_only`` or
            ``must_exist``) or cannot be used as a store: damaged or not a DuckDB file,
            locked by another process, not a store of this toolkit, of a schema version this
            toolkit does not read, or a folder that is not a store.
    """
    from recovery.display import printable
    from recovery.errors import InputProblem

    in_memory = path is None or str(path) == ":memory:"
    if (read_only or must_exist) and not in_memory and not _exists(path):
        raise InputProblem(
            f"store {printable(path)} does not exist (`recovery ingest FILES --store "
            f"{printable(path)}` makes one)"
        )
    if is_folder_store(path):
        return open_folder(path, read_only=read_only)
    if must_exist and not read_only:  # a file that is no store is refused before a write
        open_duckdb(path, read_only=True).close()
    return open_duckdb(path, read_only=read_only, sandbox=sandbox)


def _exists(path: str | Path) -> bool:
    text = str(path)
    if "://" in text:  # object storage: the open says whether it is there
        return True
    return Path(text).exists()
