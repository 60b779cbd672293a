"""A folder store's journal, ``_journal.json``: what its writes made and replaced, so that
only what the store's own writes left is ever removed.

A write records, before it renames anything into the store, the journal of its commit: the
commit's generation, the partition folders it is about to create, and the folders that are
no longer listed once it commits (those it replaces, and those earlier commits replaced and
no write has removed yet). It then renames its folders in, commits the manifest (generation
one more), and marks the journal committed. The journal stays: it is also the record of the
store's last commit. The next writer, under the store's lock, compares it with the manifest:

- journal generation = manifest generation: committed; the folders it replaced go;
- journal generation = manifest generation + 1, not committed: the write was stopped before
  its commit; the folders it created go;
- journal newer than that: the manifest is older than the store's last commit (an older
  ``_store.json`` put back), and the store is refused, nothing removed.

Nothing else is removed because a manifest does not list it: a folder no journal names (an
older manifest's, a write of an earlier version's) is neither read nor removed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from recovery.display import printable
from recovery.errors import InputProblem
from recovery.store.manifest import (
    GEN,
    MARKER,
    SHA,
    TABLES,
    Manifest,
    fsync_dir,
    keys_of,
    lstat,
    read_own_file,
    write_manifest,
    write_own_file,
)

JOURNAL = "_journal.json"
"""The journal of the store's last write (see the module docstring)."""

_VALUE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.~%-")
"""The characters of a percent-encoded partition value."""


@dataclass(frozen=True)
class Journal:
    """One write's record: its commit's generation, whether the commit was made, the
    partition folders it creates, and those that are unlisted once it commits."""

    generation: int
    committed: bool
    creates: tuple[str, ...] = ()
    drops: tuple[str, ...] = ()

    def to_text(self) -> str:
        """The journal as ``_journal.json`` holds it."""
        import json

        return json.dumps({"store": "agent-recovery", "journal": 1,
                           "generation": self.generation, "committed": self.committed,
                           "creates": list(self.creates), "drops": list(self.drops)},
                          indent=1) + "\n"


def is_partition_folder(rel: str) -> bool:
    """Whether ``rel`` is a partition folder a write may create or replace (never one of the
    empty files' folders)."""
    table, _, rest = rel.partition("/")
    if table not in TABLES:
        return False
    keys = keys_of(table)
    values = rest.split("/")
    if len(values) != len(keys):
        return False
    for key, part in zip(keys, values, strict=True):
        name, eq, value = part.partition("=")
        if name != key or not eq or not value:
            return False
        if key == "sha256" and not SHA.fullmatch(value):
            return False
        if key == "gen" and (not GEN.fullmatch(value) or value == "-1"):
            return False
        if not set(value) <= _VALUE_CHARS:
            return False
    return True


def parse_journal(text: str, where: Path) -> Journal:
    """Read the text of a ``_journal.json``, strictly.

    Raises:
        InputProblem: naming ``where`` when it is not a journal this toolkit wrote.
    """
    from recovery.ownfiles import parse_own_json

    def damaged(why: str) -> InputProblem:
        return InputProblem(
            f"store journal {printable(where)} is damaged ({why}); nothing was read or "
            f"changed: put back the copy that belongs with {MARKER}, or move it out of the "
            "store (folders no manifest lists are then kept but not read)"
        )

    try:
        data: Any = parse_own_json(text, where, "store journal")
    except InputProblem as err:
        raise damaged(str(err)) from None
    if not isinstance(data, dict) or data.get("store") != "agent-recovery" or (
            data.get("journal") != 1):
        raise damaged("not the journal of a folder store of this toolkit")
    generation, committed = data.get("generation"), data.get("committed")
    if type(generation) is not int or generation < 0 or type(committed) is not bool:
        raise damaged("'generation' and 'committed' must be a whole number and true or false")
    lists = [data.get("creates"), data.get("drops")]
    for folders in lists:
        if not isinstance(folders, list) or not all(
                isinstance(f, str) and is_partition_folder(f) for f in folders):
            raise damaged("'creates' and 'drops' must list partition folders of the store")
    return Journal(generation, committed, tuple(lists[0]), tuple(lists[1]))


def read_journal(root: Path) -> Journal | None:
    """The store's journal; ``None`` when it has none (no write committed since there was
    one)."""
    text = read_own_file(root, JOURNAL, "store journal")
    return None if text is None else parse_journal(text, root / JOURNAL)


def write_journal(root: Path, journal: Journal) -> None:
    """Replace the store's journal (durably, by a rename)."""
    write_own_file(root, JOURNAL, journal.to_text())


def stale_manifest(root: Path, manifest: Manifest, journal: Journal) -> InputProblem:
    """The refusal of a manifest older than the journal's commit."""
    have = manifest.generation
    what = "has no generation" if have is None else f"is generation {have}"
    return InputProblem(
        f"store {printable(root)}: its {MARKER} is older than the store's last commit (it "
        f"{what}; {JOURNAL} records commit {journal.generation}): an older {MARKER} was put "
        "back (a backup restored, or a copy made in the wrong order), and it does not list "
        f"the files committed since; nothing was read or changed. Put back the newest "
        f"{MARKER}; or, to use the store as this {MARKER} has it, move {JOURNAL} out of the "
        "store (the files it does not list are then kept but not read)"
    )


def removable(root: Path, manifest: Manifest, journal: Journal | None) -> list[str]:
    """The partition folders the store's own writes left that may go (see the module
    docstring); none listed by ``manifest``.

    Raises:
        InputProblem: when the manifest is older than the journal's commit.
    """
    if journal is None:
        return []
    have, made = manifest.generation or 0, journal.generation
    if made == have:
        names = journal.drops
    elif made == have + 1 and not journal.committed:
        names = (*journal.creates, *journal.drops)
    elif made > have:
        raise stale_manifest(root, manifest, journal)
    else:  # a journal older than the manifest (put back by hand): it names nothing to remove
        names = ()
    listed = manifest.folders()
    return sorted({name for name in names if name not in listed})


def settle_journal(root: Path, manifest: Manifest, journal: Journal | None) -> None:
    """Record, once the clean-up removed what ``journal`` named, that nothing is left to
    remove at the manifest's generation (nothing to record for a store without a journal)."""
    generation = manifest.generation or 0
    # A committed journal of this generation with nothing to drop is settled as it is.
    if journal is not None and (journal.generation != generation or not journal.committed
                                or journal.drops):
        write_journal(root, Journal(generation, True))


def _collision(root: Path, final: str) -> InputProblem:
    return InputProblem(
        f"store {printable(root)}: {printable(root / final)} is already there, but {MARKER} "
        "does not list it and no unfinished write of this store left it; nothing was written. "
        f"If an older {MARKER} was put back, put back the newest; otherwise move the folder "
        "out of the store (a write of an earlier version of this toolkit, or put there by "
        "hand), then run the command again"
    )


def fsync_tree(folder: Path) -> None:
    """Make the files directly in ``folder`` durable."""
    with os.scandir(folder) as it:
        for entry in it:
            if entry.is_file(follow_symlinks=False):
                fd = os.open(entry.path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)


def commit(root: Path, renames: Sequence[tuple[Path, str]], manifest: Manifest,
           replaced: Sequence[str] = ()) -> Manifest:
    """Commit one write (the writer's lock held): journal it, rename each written folder to
    its place (in order: the ``ingests`` one last), then replace ``_store.json`` by
    ``manifest`` as the next generation, and mark the journal committed.

    Args:
        root: The store's folder.
        renames: (written folder, its folder relative to ``root``) pairs.
        manifest: What the store commits once they are in place (of the generation it was
            read at).
        replaced: The folders no longer listed once it commits.

    Returns:
        The committed manifest.

    Raises:
        InputProblem: when a folder to create is already there (nothing is changed then).
    """
    for _, final in renames:
        if lstat(root / final) is not None:
            raise _collision(root, final)
    new = manifest.next_commit()
    previous = read_journal(root)
    carried = previous.drops if previous is not None and (
        previous.generation == (manifest.generation or 0)) else ()
    journal = Journal(new.generation or 0, False, tuple(final for _, final in renames),
                      tuple(dict.fromkeys((*carried, *replaced))))
    write_journal(root, journal)
    for written, final in renames:
        target = root / final
        target.parent.mkdir(parents=True, exist_ok=True)
        fsync_tree(written)
        os.rename(written, target)
        fsync_dir(target.parent)
    write_manifest(root, new)
    write_journal(root, replace(journal, committed=True))
    return new
