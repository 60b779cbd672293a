"""The registry of readers, format detection, and :func:`read_file`.

Readers are imported inside :func:`_registry`, so that importing one never costs the others.
"""

from __future__ import annotations

from pathlib import Path

from recovery.formats.base import Reader, ReadOptions, ReadResult, UnknownFormatError
from recovery.formats.files import GZIP_MAGIC, UTF8_BOM, head_bytes
from recovery.formats.jsontext import MAX_JSON_DEPTH, leading_depth

HEAD_BYTES = 64 * 1024
"""What detection reads of a file first."""

FIRST_LINE_BYTES = 16 * 1024 * 1024
"""How far detection reads to see the whole of a long first line (a verl record holding a long
response, a canonical record with a long prompt): its keys may lie past the first bytes."""


def _registry() -> dict[str, Reader]:
    # Imported here, not at module load, so that importing one reader never costs the others.
    from recovery.formats import (
        agentprocessbench,
        art,
        atif,
        balrog,
        canonical,
        inspect_log,
        minisweagent,
        openai_chat,
        sweagent,
        taubench,
        verl,
        whowhen,
    )

    # Detection tries them in this order. mini-swe-agent files are chat messages too, so their
    # (specific) sniffer comes before the OpenAI one; the other new sniffers accept only their
    # own files, and the JSON documents among them come before Inspect's key-text sniffer.
    readers = [
        canonical.READER,
        agentprocessbench.READER,
        minisweagent.READER,
        openai_chat.READER,
        taubench.READER,
        atif.READER,
        sweagent.READER,
        whowhen.READER,
        inspect_log.READER,
        verl.READER,
        art.READER,
        balrog.READER,
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


def detect_format(path: str | Path) -> str:
    """Name of the first registered format whose sniffer accepts the file.

    Sniffers see the file's first 64 KiB, or its whole first line when that is longer (up to
    :data:`FIRST_LINE_BYTES`), so that a long first record's keys are seen.

    Raises:
        UnknownFormatError: when none does (the message lists the known formats), or when the
            first record is nested too deeply to be parsed (the message names file and line).
    """
    path = Path(path)
    if path.is_dir():
        folder_readers = [r for r in _registry().values() if r.directory]
        for reader in folder_readers:
            if reader.sniff(path, b""):
                return reader.name
        names = ", ".join(r.name for r in folder_readers) or "none"
        raise UnknownFormatError(
            f"{path}: is a directory in no format that reads directories (those are: {names}); "
            f"give the files inside it (e.g. {path}/*.json)"
        )
    if path.suffix == ".gz":
        with open(path, "rb") as raw:
            magic = raw.read(len(GZIP_MAGIC))
        if magic and magic != GZIP_MAGIC:
            raise UnknownFormatError(
                f"{path}: not gzip data (a .gz file starts with the bytes 1f 8b; this one "
                f"starts with {magic.hex(' ')}); rename it or recompress it"
            )
    head = _head(path)
    if not head.lstrip(UTF8_BOM).strip():
        raise UnknownFormatError(
            f"{path}: the file is empty, so its format cannot be detected; pass --format, "
            f"one of: {', '.join(known_formats())}"
        )
    for reader in _registry().values():
        try:
            accepted = reader.sniff(path, head)
        except RecursionError:
            # A sniffer's parse of a first record nested far too deeply. (One nested deeper
            # than the limit but parsed is detected, and the reader refuses it by its line.)
            deep = _first_record_too_deep(head)
            line, depth = deep if deep is not None else (_first_line(head), None)
            raise _too_deep(path, line, depth) from None
        if accepted:
            return reader.name
    raise UnknownFormatError(
        f"{path}: could not detect the format; pass --format, one of: "
        f"{', '.join(known_formats())}"
    )


def _head(path: Path) -> bytes:
    """The first bytes of the (decompressed) file that sniffers look at: the first
    :data:`HEAD_BYTES`, or, when the first line is longer, as much as holds it (up to
    :data:`FIRST_LINE_BYTES`)."""
    size = HEAD_BYTES
    head = head_bytes(path, size)
    while len(head) == size and size < FIRST_LINE_BYTES and b"\n" not in head.lstrip():
        size = min(size * 4, FIRST_LINE_BYTES)
        head = head_bytes(path, size)
    return head


def _first_line(head: bytes) -> int:
    """The line on which the file's first record starts."""
    text = head.removeprefix(UTF8_BOM)
    start = len(text) - len(text.lstrip())
    if text[start:start + 1] == b"[":
        start = len(text) - len(text[start + 1:].lstrip())
    return text.count(b"\n", 0, start) + 1


def _first_record_too_deep(head: bytes) -> tuple[int, int] | None:
    """``(line, depth)`` of the file's first record (a JSON line, or the first element of a
    JSON array) when it is nested deeper than :data:`MAX_JSON_DEPTH`, else ``None``.

    The depth counts brackets outside strings, up to where the record ends or ``head`` does
    (a lower bound then, which is enough to refuse it).
    """
    if head.count(b"{") + head.count(b"[") <= MAX_JSON_DEPTH:
        return None
    text = head.removeprefix(UTF8_BOM).decode("utf-8", errors="replace")
    body = text.lstrip()
    if body[:1] == "[":
        body = body[1:].lstrip()  # the array's first element
    elif body[:1] == "{":
        body = body.split("\n", 1)[0]  # the first JSON line
    depth = leading_depth(body) if body[:1] in ("{", "[") else 0
    return (_first_line(head), depth) if depth > MAX_JSON_DEPTH else None


def _too_deep(path: Path, line: int, depth: int | None) -> UnknownFormatError:
    levels = f"{depth} levels deep" if depth is not None else "too deeply"
    return UnknownFormatError(
        f"{path}:{line}: the first record is JSON nested {levels}; the limit is "
        f"{MAX_JSON_DEPTH} levels, so the file's format cannot be detected"
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

    Raises:
        UnknownFormatError: when ``format`` is not registered or cannot be detected.
    """
    path = Path(path)
    reader = get_reader(format or detect_format(path))
    yield from reader.read(path, options or ReadOptions())


