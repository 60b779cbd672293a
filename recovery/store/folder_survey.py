"""A folder store's tree checked against its manifest and journal: every entry is one it
wrote, none is a link, and the manifest is not older than the store's last commit; and the
clean-up of what the store's own writes left (the writer's lock held).

Opening a store refuses (one :class:`~recovery.errors.InputProblem` naming the path, before
anything is read, written or removed) a symbolic link anywhere in it, a file or folder it did
not write, a committed file that is missing, and a manifest older than its journal's commit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from recovery.display import printable
from recovery.errors import InputProblem
from recovery.store.folder_journal import (
    JOURNAL,
    Journal,
    read_journal,
    removable,
    settle_journal,
)
from recovery.store.manifest import (
    GEN,
    LOCK,
    MARKER,
    PARQUET,
    PENDING,
    SHA,
    TABLES,
    UNFINISHED,
    Manifest,
    empty_path,
    keys_of,
    link_refused,
    lstat,
    parse_manifest,
    read_marker,
)


@dataclass
class Survey:
    """What a walk of the store's tree found besides the committed files."""

    leftovers: list[Path] = field(default_factory=list)
    """Partition folders no committed file is in (removed only when ``removable`` names
    them)."""
    folders: list[Path] = field(default_factory=list)
    """Folders above partitions (removed by the clean-up when empty), deepest last."""
    pending: list[Path] = field(default_factory=list)
    """Manifests and journals left by a write killed before their rename."""
    journal: Journal | None = None
    """The store's journal, if it has one."""
    removable: list[str] = field(default_factory=list)
    """Partition folders (relative) the journal says the store's own writes left."""


def entries(folder: Path) -> list[os.DirEntry]:
    """The entries of ``folder``; none when it is gone (a leftover another writer removed)."""
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def is_dir(found: os.stat_result) -> bool:
    """Whether ``found`` (an ``lstat``) is a real folder."""
    return stat.S_ISDIR(found.st_mode)


def _refuser(root: Path) -> Callable[[Path | str, str], InputProblem]:
    def refuse(path: Path | str, why: str) -> InputProblem:
        return InputProblem(
            f"store {printable(root)} is damaged: {printable(path)} {why}; nothing was read "
            "or changed (move it out of the store, or ingest the source files into a new "
            "folder store)"
        )
    return refuse


def _kind(root: Path, entry: os.DirEntry) -> str:
    if entry.is_symlink():
        raise link_refused(root, entry.path)
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    if entry.is_file(follow_symlinks=False):
        return "file"
    raise _refuser(root)(entry.path, "is neither a file nor a folder")


def survey(root: Path, manifest: Manifest) -> Survey:
    """Walk the store's tree, links never followed.

    Raises:
        InputProblem: naming the path, for a symbolic link anywhere in the tree, a file or
            folder the store did not write (an unknown name, a non-Parquet file, a file in a
            committed partition that the manifest does not list), or a committed file that is
            missing.
    """
    wanted = manifest.paths() | {empty_path(table) for table in TABLES}
    committed_folders = {path.rpartition("/")[0] for path in wanted}
    seen: set[str] = set()
    out = Survey()
    refuse = _refuser(root)

    def anything(folder: Path) -> None:  # _tmp: writes in progress, whatever their files
        for entry in entries(folder):
            if _kind(root, entry) == "dir":
                anything(Path(entry.path))

    def leaf(folder: Path, rel: str) -> None:
        for entry in entries(folder):
            path = f"{rel}/{entry.name}"
            if _kind(root, entry) != "file" or not PARQUET.fullmatch(entry.name):
                raise refuse(entry.path, "is not a Parquet file of the store")
            if path in wanted:
                seen.add(path)
            elif rel in committed_folders:
                raise refuse(entry.path, f"is in a committed partition but not listed in "
                             f"{MARKER}, so it is not the store's")
        if rel not in committed_folders:
            out.leftovers.append(folder)

    def partitions(folder: Path, rel: str, keys: tuple[str, ...]) -> None:
        if not keys:
            leaf(folder, rel)
            return
        key = keys[0]
        for entry in entries(folder):
            value = entry.name[len(key) + 1:]
            if _kind(root, entry) != "dir" or not entry.name.startswith(key + "=") or (
                (key == "sha256" and value and not SHA.fullmatch(value))
                or (key == "gen" and not GEN.fullmatch(value))
            ):
                raise refuse(entry.path, "is not a partition of the store")
            partitions(Path(entry.path), f"{rel}/{entry.name}", keys[1:])
        if "/" in rel:  # not the table's own folder
            out.folders.append(folder)

    for entry in entries(root):
        name, path = entry.name, Path(entry.path)
        found = _kind(root, entry)
        if name in (MARKER, LOCK, JOURNAL, UNFINISHED) and found == "file":
            continue
        if PENDING.fullmatch(name) and found == "file":
            out.pending.append(path)
        elif name == "_tmp" and found == "dir":
            anything(path)
        elif name in TABLES and found == "dir":
            partitions(path, name, keys_of(name))
        else:
            raise refuse(path, "is not one of the store's files or folders")
    for missing in sorted(wanted - seen):
        raise refuse(root / missing, f"is listed in {MARKER} (or is one of the store's own "
                     "empty files) but missing")
    return out


def open_tree(root: Path) -> tuple[Manifest, Survey]:
    """The store's manifest, once its tree and journal have been checked against it (read
    again when a writer committed meanwhile)."""
    for _ in range(10):
        text = read_marker(root)
        manifest = parse_manifest(text, root / MARKER)
        try:
            found = survey(root, manifest)
            found.journal = read_journal(root)
            found.removable = removable(root, manifest, found.journal)
        except InputProblem:
            if read_marker(root) != text:
                continue  # a writer committed and cleaned up while the tree was walked
            raise
        return manifest, found
    raise InputProblem(f"store {printable(root)}: other writers kept committing while this "
                       "command read it; run it again")


def cleanup(root: Path, manifest: Manifest, found: Survey) -> None:
    """Remove what the store's own writes left (the writer's lock held): work under ``_tmp``,
    the partition folders the journal names, manifests and journals never renamed, the
    unfinished-store marker, and folders left empty. Nothing else."""
    tmp = root / "_tmp"
    there = lstat(tmp)
    if there is not None and is_dir(there):  # a real folder, never a link
        shutil.rmtree(tmp, ignore_errors=True)
    for rel in found.removable:
        there = lstat(root / rel)
        if there is not None and is_dir(there):
            shutil.rmtree(root / rel, ignore_errors=True)
    for folder in sorted(found.folders, key=lambda p: -len(p.parts)):
        remove_if_empty(folder)
    for pending in found.pending:
        pending.unlink(missing_ok=True)
    (root / UNFINISHED).unlink(missing_ok=True)
    settle_journal(root, manifest, found.journal)


def remove_if_empty(folder: Path) -> None:
    """Remove ``folder`` if it is an empty folder."""
    with contextlib.suppress(OSError):
        folder.rmdir()


def check_half_made(root: Path) -> None:
    """Refuse, naming it, anything in ``root`` that a store being made (or removed) does not
    hold: only the lock, the unfinished marker, manifests never renamed and the tables'
    empty files and their folders may be there.

    Raises:
        InputProblem: naming the first entry that may not be there (or a link).
    """
    files = {empty_path(table) for table in TABLES}
    dirs = {"/".join(path.split("/")[:n]) for path in files
            for n in range(1, path.count("/") + 1)}

    def walk(folder: Path, rel: str) -> None:
        for entry in entries(folder):
            path = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_symlink():
                raise link_refused(root, entry.path)
            if entry.is_dir(follow_symlinks=False) and path in dirs:
                walk(Path(entry.path), path)
            elif entry.is_file(follow_symlinks=False) and (path in files or (not rel and (
                    entry.name in (LOCK, UNFINISHED) or PENDING.fullmatch(entry.name)))):
                continue
            else:
                raise InputProblem(
                    f"{printable(root)} is a folder that is not empty and not a store: "
                    f"{printable(entry.path)} is not part of the store that was being made "
                    "there; move it out, or give an empty or new folder for a folder store"
                )

    walk(root, "")
