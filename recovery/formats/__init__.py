"""Readers for the formats agent stacks write, behind a small registry.

Each reader module defines a :class:`Reader` and registers it here. A reader turns a file into
:class:`~recovery.schema.Trajectory` objects and *yields* a :class:`~recovery.schema.RecordError`
for a record it cannot read, so the caller decides whether to stop or skip.

Example:
    >>> from recovery.formats import read_file
    >>> for item in read_file("runs/base.jsonl"):
    ...     ...
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from recovery.schema import SUCCESS_THRESHOLD, RecordError, Trajectory

DEFAULT_MAX_RECORD_BYTES = 512 * 1024 * 1024
"""Largest single record (line or document) a reader accepts before reporting it as oversized."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What every reader is told.

    Attributes:
        run: Run label that overrides the data's own (``--run``); ``None`` keeps the data's.
        success_threshold: A reward at or above it is a success where the format has no flag.
        max_record_bytes: A larger record is reported as oversized, naming file and line.
        inspect_success: Score values that count as success for Inspect logs.
    """

    run: str | None = None
    success_threshold: float = SUCCESS_THRESHOLD
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    inspect_success: tuple[str, ...] = ("C", "1", "1.0", "True", "true", "correct")


ReadResult = Iterator[Trajectory | RecordError]


@dataclass(frozen=True, slots=True)
class Reader:
    """A registered format.

    Attributes:
        name: The name users pass to ``--format``.
        description: One line for ``--help`` and error messages.
        sniff: Given the path and the first bytes of the (decompressed) file, say whether the
            file is in this format. Cheap and conservative.
        read: Read the whole file.
    """

    name: str
    description: str
    sniff: Callable[[Path, bytes], bool]
    read: Callable[[Path, ReadOptions], ReadResult]


class UnknownFormatError(ValueError):
    """The format could not be detected or the name is not registered."""


def _registry() -> dict[str, Reader]:
    # Imported here, not at module load, so that importing one reader never costs the others.
    from recovery.formats import agentprocessbench, canonical, inspect_log, openai_chat, taubench

    readers = [
        canonical.READER,
        agentprocessbench.READER,
        openai_chat.READER,
        taubench.READER,
        inspect_log.READER,
    ]
    return {r.name: r for r in readers}


def known_formats() -> list[str]:
    """Names of the registered formats, in detection order."""
    return list(_registry())


def get_reader(name: str) -> Reader:
    """The reader registered under ``name``.

    Raises:
        UnknownFormatError: listing the known formats.
    """
    registry = _registry()
    if name not in registry:
        raise UnknownFormatError(
            f"unknown format {name!r}; known formats: {', '.join(registry)}"
        )
    return registry[name]


def open_text(path: Path) -> IO[str]:
    """Open a possibly gzip-compressed text file for reading as UTF-8."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def head_bytes(path: Path, n: int = 65536) -> bytes:
    """The first ``n`` bytes of the (decompressed) file."""
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as fh:
            return fh.read(n)
    with open(path, "rb") as fh:
        return fh.read(n)


def detect_format(path: str | Path) -> str:
    """Name of the first registered format whose sniffer accepts the file.

    Raises:
        UnknownFormatError: when none does; the message lists the known formats.
    """
    path = Path(path)
    head = head_bytes(path)
    for reader in _registry().values():
        if reader.sniff(path, head):
            return reader.name
    raise UnknownFormatError(
        f"{path}: could not detect the format; pass --format, one of: "
        f"{', '.join(known_formats())}"
    )


def read_file(
    path: str | Path, format: str | None = None, options: ReadOptions | None = None
) -> ReadResult:
    """Read a file into trajectories (and record errors), detecting its format when not given.

    Args:
        path: The input file.
        format: A registered format name; ``None`` detects it.
        options: Reader options; defaults when ``None``.

    Yields:
        A :class:`Trajectory` per record, or a :class:`RecordError` for a record that cannot be
        read (the reader carries on after it).
    """
    path = Path(path)
    reader = get_reader(format or detect_format(path))
    yield from reader.read(path, options or ReadOptions())


def iter_lines(path: Path, max_record_bytes: int) -> Iterator[tuple[int, str | RecordError]]:
    """Yield ``(line_number, text)`` for each non-blank line, or a RecordError when oversized.

    Lines are read in bounded chunks, so an oversized line is reported without holding more
    than ``max_record_bytes`` of it in memory.
    """
    with open_text(path) as fh:
        lineno = 0
        while True:
            line = fh.readline(max_record_bytes + 1)
            if not line:
                return
            lineno += 1
            if len(line) > max_record_bytes and not line.endswith("\n"):
                # Drain the rest of the oversized line.
                while True:
                    rest = fh.readline(max_record_bytes)
                    if not rest or rest.endswith("\n"):
                        break
                yield lineno, RecordError(
                    f"record is larger than the limit of {max_record_bytes} bytes "
                    "(raise it with --max-record-mb)",
                    file=str(path),
                    line=lineno,
                )
                continue
            if line.strip():
                yield lineno, line


def stem(path: Path) -> str:
    """The file's name without its extensions (``runs/base.jsonl.gz`` -> ``base``)."""
    name = path.name
    for suffix in (".gz", ".jsonl", ".json", ".eval", ".ndjson"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or path.name


def first_json_char(head: bytes) -> str:
    """The first non-whitespace character of the file (after a UTF-8 BOM), or ''."""
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    return chr(text[0]) if text else ""


__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "ReadOptions",
    "ReadResult",
    "Reader",
    "UnknownFormatError",
    "detect_format",
    "first_json_char",
    "get_reader",
    "head_bytes",
    "iter_lines",
    "known_formats",
    "open_text",
    "read_file",
    "stem",
]
