"""What one streamed pass over an input tells (sha256, lines), and stable trajectory ids."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


def file_sha256(path: str | Path) -> str:
    """sha256 of the file's bytes (streamed)."""
    return file_digest(path).sha256


@dataclass(frozen=True, slots=True)
class FileDigest:
    """What one streamed pass over a file's bytes tells.

    Attributes:
        sha256: Hex digest of the bytes.
        n_lines: Number of lines (a last line without a newline counts).
        longest_line: Bytes of the longest line, without its newline.
    """

    sha256: str
    n_lines: int
    longest_line: int


def directory_digest(path: str | Path) -> FileDigest:
    """sha256 of a directory input: of every regular file below it, by relative path.

    The same files with the same bytes give the same digest wherever the directory lies, so
    re-ingesting a moved copy adds nothing. Line counts are not taken (0).
    """
    import os
    import stat

    root = Path(path)
    entries: list[tuple[str, Path, os.stat_result]] = []
    # Never follow a link and never open anything but a regular file: a link is hashed by
    # the text it points to (nothing outside the folder is read), a named pipe not at all.
    for folder, _dirs, names in os.walk(root, followlinks=False):
        for name in names:
            file = Path(folder) / name
            info = file.lstat()
            entries.append((file.relative_to(root).as_posix(), file, info))
    digest = hashlib.sha256()
    for relative, file, info in sorted(entries, key=lambda e: e[0]):
        if stat.S_ISREG(info.st_mode):
            content = bytes.fromhex(file_digest(file).sha256)
        elif stat.S_ISLNK(info.st_mode):
            content = b"link\0" + os.fsencode(os.readlink(file))
        else:
            continue
        digest.update(relative.encode("utf-8", "surrogateescape"))
        digest.update(b"\0")
        digest.update(content)
    return FileDigest(digest.hexdigest(), 0, 0)


def file_digest(path: str | Path) -> FileDigest:
    """sha256, line count and longest line of a file, in one streamed pass."""
    import numpy as np

    digest = hashlib.sha256()
    newlines = longest = offset = 0
    last_newline = -1  # absolute position of the last newline seen
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
            ends = np.flatnonzero(np.frombuffer(chunk, np.uint8) == ord("\n")) + offset
            if len(ends):
                longest = max(longest, int(np.diff(ends, prepend=last_newline).max()) - 1)
                last_newline = int(ends[-1])
                newlines += len(ends)
            offset += len(chunk)
    rest = offset - last_newline - 1
    return FileDigest(digest.hexdigest(), newlines + (rest > 0), max(longest, rest))


def make_traj_id(run: str, task_id: str, budget: int | None, sample: int) -> str:
    """Stable trajectory id: the same (run, task, budget, sample) always gives the same id,
    and different ones different ids, whatever characters the parts hold.

    The first 16 hex digits of the sha1 of the parts, each written as its length in UTF-8
    bytes, a colon, and its UTF-8 bytes (budget empty when unknown): ``4:base2:t12:301:0``
    for run ``base``, task ``t1``, budget 30, sample 0. No part can run into the next, as it
    could with a separator the parts may hold. The fast path and the store's upgrade compute
    the same in SQL (:func:`traj_id_sql`, tied to this function by a test).
    """
    parts = (run, task_id, "" if budget is None else str(budget), str(sample))
    key = b"".join(b"%d:%b" % (len(part), part) for part in (p.encode("utf-8") for p in parts))
    return hashlib.sha1(key).hexdigest()[:16]


def traj_id_sql(run: str, task_id: str, budget: str, sample: str) -> str:
    """:func:`make_traj_id` as a SQL expression over column expressions: each part as its
    length in UTF-8 bytes, a colon and its text, hashed."""

    def part(expr: str) -> str:
        return f"strlen({expr})::VARCHAR || ':' || {expr}"

    parts = " || ".join(part(p) for p in (
        f"({run})", f"({task_id})", f"coalesce(({budget})::VARCHAR, '')", f"({sample})::VARCHAR"))
    return f"substr(sha1({parts}), 1, 16)"
