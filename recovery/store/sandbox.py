"""The sandbox of a DuckDB connection: what the SQL it runs may reach, in one place.

A store file is data from somewhere else; its catalog is checked (:mod:`recovery.store.catalog`)
and its connection is confined here:

- every store file is opened with extension loading off (:data:`EXTENSION_SETTINGS`: no
  autoload, no autoinstall, no community or unsigned extensions);
- a read-only open, and every ``recovery sql`` query, also gets :func:`lock_down`: no file
  but the store, its temp folder and the named folders can be read or written
  (``enable_external_access = false`` with ``allowed_directories``), and the configuration
  is locked so no statement can undo it;
- a write open keeps file access (ingest reads its input files through DuckDB) but locks the
  configuration; the strict catalog check is what keeps stored SQL out of it.

DuckDB turns external access off for good (it cannot be turned on again while the database
runs) and fixes ``allowed_directories`` before that, so the folders a connection may use are
decided when it is opened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

EXTENSION_SETTINGS: Mapping[str, bool] = {
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
}
"""DuckDB settings every store file is opened with: no extension is installed or loaded."""


@dataclass(frozen=True)
class Sandbox:
    """How a read-only store connection is confined (:func:`lock_down`).

    Attributes:
        folders: Folders (``/``-terminated, resolved) whose files may be read.
        temp_dir: Where DuckDB may spill: ``None`` = its own ``<store>.tmp/``; ``""`` = no
            spilling; a path = that (empty, private) folder.
        settings: More DuckDB settings (names this toolkit chooses, never a user's), set
            before the lock (e.g. ``arrow_lossless_conversion`` for ``recovery sql``).
    """

    folders: tuple[str, ...] = ()
    temp_dir: str | None = None
    settings: Mapping[str, object] = field(default_factory=dict)


def connect_config() -> dict[str, object]:
    """The ``config`` of ``duckdb.connect`` for a store file: extensions off."""
    return dict(EXTENSION_SETTINGS)


def folder_list(folders: Sequence[str | Path]) -> tuple[str, ...]:
    """Folders as DuckDB's ``allowed_directories`` takes them: resolved, ``/``-terminated."""
    return tuple(str(Path(f).resolve()).rstrip("/") + "/" for f in folders)


def lock_down(
    con: duckdb.DuckDBPyConnection, folders: Sequence[str] = (),
    temp_dir: str | Path | None = None, *, own_temp: bool = False,
) -> None:
    """Confine ``con``: no file but ``folders`` can be read, nothing else written, no
    extension loaded, no temp folder but ``temp_dir`` (``None``: no spilling, unless
    ``own_temp`` keeps DuckDB's own), and the settings locked so no statement can undo it.

    Args:
        con: The connection (its external access still on).
        folders: Folders (``/``-terminated) whose files may be read.
        temp_dir: An empty private folder DuckDB may spill to; ``None`` = no spilling.
        own_temp: Keep DuckDB's own temp folder (``<store>.tmp/``) and ignore ``temp_dir``.
    """
    # before external access is turned off: DuckDB allows its temp folder whatever the other
    # settings say
    if not own_temp:
        con.execute("SET temp_directory = ?", [str(temp_dir) if temp_dir is not None else ""])
    if folders:
        con.execute("SET allowed_directories = ?", [list(folders)])
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")


def confine(con: duckdb.DuckDBPyConnection, read_only: bool,
            sandbox: Sandbox | None = None) -> None:
    """The sandbox of a freshly opened store file: :func:`lock_down` for a read-only open;
    for a write open, the configuration locked (file access stays: ingest needs it)."""
    if read_only:
        sandbox = sandbox or Sandbox()
        for name, value in sandbox.settings.items():
            con.execute(f"SET {name} = ?", [value])
        lock_down(con, sandbox.folders, sandbox.temp_dir, own_temp=sandbox.temp_dir is None)
    else:
        con.execute("SET lock_configuration = true")
