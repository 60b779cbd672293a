"""Making, locking and removing a folder store: its layout (the manifest and each table's
empty file), the one writer's lock, and the removal of a store that holds nothing."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

from recovery.display import printable
from recovery.errors import InputProblem
from recovery.store.folder_survey import (
    check_half_made,
    cleanup,
    entries,
    is_dir,
    open_tree,
    remove_if_empty,
)
from recovery.store.folder_views import quoted_name, sql_string, table_columns
from recovery.store.manifest import (
    LOCK,
    MARKER,
    TABLES,
    UNFINISHED,
    Manifest,
    empty_path,
    fsync_dir,
    keys_of,
    link_refused,
    lstat,
    write_manifest,
)


def check_new_folder(root: Path) -> None:
    """Refuse to make a store in ``root`` unless it is missing, empty (but for a lock), or
    this toolkit's half-made store (:data:`UNFINISHED` there, and only its layout)."""
    found = lstat(root)
    if found is None:
        return
    if not is_dir(found):
        raise InputProblem(f"store {printable(root)}: something that is not a folder is there "
                           "(a folder store is a folder)")
    if lstat(root / UNFINISHED) is not None:
        check_half_made(root)
    elif any(e.name != LOCK for e in entries(root)):
        raise InputProblem(
            f"{printable(root)} is a folder that is not empty and not a store: give an empty "
            "or new folder for a folder store"
        )


def create_folder(root: str | Path) -> None:
    """Make ``root`` a folder store (idempotent): the manifest and each table's empty file,
    made under the writer's lock; a store whose making (or removal) was stopped midway is
    made whole."""
    root = Path(root)
    if lstat(root / MARKER) is not None:
        return
    check_new_folder(root)
    with locked(root):
        if lstat(root / MARKER) is None:
            make_layout(root)


def _mark_unfinished(root: Path) -> None:
    """Leave :data:`UNFINISHED` in ``root`` (durably) while its layout is made or removed."""
    fd = os.open(root / UNFINISHED, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    os.close(fd)
    fsync_dir(root)


def make_layout(root: Path) -> None:
    """Write a new store's empty files and manifest (the lock held, no manifest there),
    :data:`UNFINISHED` marking the folder until the manifest is in place."""
    import duckdb

    from recovery.store.ddl import TABLES_DDL

    check_new_folder(root)
    _mark_unfinished(root)
    tables = table_columns()
    with duckdb.connect() as con:
        con.execute(TABLES_DDL)
        for table in TABLES:
            keys = keys_of(table)
            target = root / empty_path(table)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)  # one a stopped making left: written again
            columns = ", ".join(quoted_name(name) for name, _ in tables[table] if name not in keys)
            con.execute(
                f"COPY (SELECT {columns} FROM {table} WHERE false) TO {sql_string(str(target))} "
                "(FORMAT parquet, COMPRESSION zstd)"
            )
    write_manifest(root, Manifest())
    (root / UNFINISHED).unlink()
    fsync_dir(root)


# --------------------------------------------------------------------------------------------
# The writer's lock, and what a killed write leaves behind


def _read_only(root: Path, err: OSError) -> InputProblem:
    return InputProblem(
        f"store {printable(root)} is read-only (its lock file {LOCK} cannot be opened for "
        f"writing: {err.strerror}); commands that only read it (analyze, sql) work, writing "
        "needs write access to the folder"
    )


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold the store's lock file (created when missing, never through a link)."""
    import fcntl

    lock = root / LOCK
    for _ in range(10):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # the folder is missing: made (again)
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise InputProblem(f"store {printable(root)} cannot be created: "
                                   f"{err.strerror}") from None
            continue
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise link_refused(root, lock) from None
            if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise _read_only(root, err) from None
            raise InputProblem(f"store {printable(root)}: {LOCK} cannot be opened: "
                               f"{err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held, now = os.fstat(fd), lstat(lock)
            if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                continue  # the store was removed (or made again) while this waited
            yield
            return
        finally:
            os.close(fd)
    raise InputProblem(f"store {printable(root)}: its lock file kept being replaced while "
                       "this command waited for it; run it again")


@contextlib.contextmanager
def writer_lock(root: str | Path) -> Iterator[Manifest]:
    """Hold the folder's write lock (one writer at a time; readers never wait), check the
    store's tree and journal, first remove what the store's own earlier writes left (the
    folders of a write stopped before its commit, replaced generations: those its journal
    names), and give the committed manifest.

    A store removed meanwhile (by a failed ingest that had made it) is made again.

    Raises:
        InputProblem: when the store is read-only, damaged, or holds a link (nothing is
            removed then).
    """
    root = Path(root)
    with locked(root):
        if lstat(root / MARKER) is None:
            make_layout(root)
        manifest, survey = open_tree(root)
        cleanup(root, manifest, survey)
        yield manifest


def remove_unused_folder(root: str | Path) -> bool:
    """Remove the folder store ``root`` if it holds nothing but what :func:`create_folder`
    made: no committed file, no scores, no write of another process in progress (checked and
    removed under the writer's lock, without waiting for it).

    Returns:
        Whether it was removed (otherwise it is left exactly as it was).
    """
    import fcntl

    root = Path(root).resolve()
    lock = root / LOCK
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # another writer holds it
        held, now = os.fstat(fd), lstat(lock)
        if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            return False
        try:
            manifest, survey = open_tree(root)
        except InputProblem:
            return False
        if (manifest.files or manifest.step_scores or survey.leftovers or survey.pending
                or survey.journal is not None or entries(root / "_tmp")):
            return False
        return _remove_layout(root)
    finally:
        os.close(fd)


def _remove_layout(root: Path) -> bool:
    """Remove the store ``root`` holding nothing but its layout (its lock held), marked
    :data:`UNFINISHED` from before its manifest goes until it is gone."""
    try:
        _mark_unfinished(root)
        (root / MARKER).unlink()
        fsync_dir(root)
        for table in TABLES:
            file = root / empty_path(table)
            file.unlink()
            for folder in file.relative_to(root).parents[:-1]:
                remove_if_empty(root / folder)
        remove_if_empty(root / "_tmp")
        (root / UNFINISHED).unlink()
        (root / LOCK).unlink()
        root.rmdir()
    except OSError:
        return not root.exists()
    return True

