"""Output paths checked before any work starts, and files written whole or not at all.

:func:`check_output_path` is called by every command that writes a file or a folder (``analyze
--json/--html``, ``graph --out``, ``budgetmix plan/rewards --out``, ``export parquet``,
``simulate --out``, ``prm export-trl --out``, ``sql --out``) before it reads a store or
computes anything: an existing folder where a file is expected, a path under a regular file or
a folder the user cannot write in is one :class:`recovery.errors.InputProblem` line (exit
status 1) naming the option and the path. It is an ``InputProblem``, not a ``UsageProblem``:
the option's value is well formed, it is the file system that refuses it (as with a store that
cannot be read). :func:`atomic_output` writes beside the target under a unique temporary name
and renames it over the target at the end, so a failed write never leaves half a file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

__all__ = ["atomic_output", "check_output_path"]


def _nearest_existing(path: Path) -> Path:
    """``path``'s closest ancestor that exists (``.`` for a relative path with none)."""
    ancestor = path.parent
    while not ancestor.exists() and not ancestor.is_symlink() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    return ancestor


def _check_creatable(path: Path, what: str) -> None:
    """``path`` does not exist: its nearest existing ancestor must be a folder we can write."""
    import os

    from recovery.display import printable
    from recovery.errors import InputProblem

    ancestor = _nearest_existing(path)
    if not ancestor.is_dir():
        raise InputProblem(
            f"{what} {printable(path)}: {printable(ancestor)} is a file, not a folder"
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputProblem(
            f"{what} {printable(path)}: cannot write in folder {printable(ancestor)} "
            "(permission denied)"
        )


def _check_file(path: Path, what: str) -> None:
    import os

    from recovery.display import printable
    from recovery.errors import InputProblem

    if path.is_dir():
        raise InputProblem(f"{what} {printable(path)} is a folder; give a file name")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise InputProblem(f"{what} {printable(path)}: cannot overwrite (permission denied)")
        # replacing it needs the folder too (the temporary file is made there)
        _check_creatable(path, what)
    else:
        _check_creatable(path, what)


def check_output_path(
    path: str | Path,
    what: str,
    kind: Literal["file", "folder"] = "file",
    children: Iterable[str] = (),
) -> Path:
    """Refuse, before any work, an output ``path`` that cannot be written; returns it.

    Args:
        path: The file (``kind="file"``) or folder (``kind="folder"``) to be written; missing
            folders above it are fine (the writers create them).
        what: The option that named it (``--out``), for the message.
        kind: Whether a file or a folder will be written there.
        children: For a folder, names of the files to be written in it (each must not be a
            folder, and must be writable if it exists).

    Raises:
        InputProblem: one line naming ``what`` and the path: a folder where a file is
            expected (or a file where a folder is), a path under a regular file, or a folder
            or file without write permission.
    """
    import os

    from recovery.display import printable
    from recovery.errors import InputProblem

    path = Path(path)
    if kind == "file":
        _check_file(path, what)
        return path
    if kind != "folder":
        raise ValueError(f"kind must be 'file' or 'folder', got {kind!r}")
    if path.exists() and not path.is_dir():
        raise InputProblem(f"{what} {printable(path)} is a file, not a folder")
    if not path.exists():
        _check_creatable(path, what)
        return path
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputProblem(
            f"{what} {printable(path)}: cannot write in this folder (permission denied)"
        )
    for name in children:
        _check_file(path / name, what)
    return path


@contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed over ``path``.

    The temporary name keeps ``path``'s suffix and is unique (:func:`tempfile.mkstemp`), so two writers never share one;
    on any exception it is removed and ``path`` is left as it was.
    """
    import os
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the suffix stays last: writers that pick a format by it (graph, COPY) see the real one
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix)
    os.close(handle)
    # mkstemp makes the file private (0600); the output gets the mode a plain open would give
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(temp, 0o666 & ~umask)
    try:
        yield Path(temp)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
