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
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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
        inspect_scorer: The Inspect scorer whose value decides success; ``None`` = the
            sample's first scorer.
        results: A results file that decides success for formats whose trajectories carry
            no outcome (e.g. the resolved-instance list a SWE-bench harness writes for
            SWE-agent trajectories); ``None`` = the outcome stays unknown.
    """

    run: str | None = None
    success_threshold: float = SUCCESS_THRESHOLD
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    inspect_success: tuple[str, ...] = ("C", "1", "1.0", "True", "true", "correct")
    inspect_scorer: str | None = None
    results: Path | None = None


ReadResult = Iterator[Trajectory | RecordError]


@dataclass(frozen=True, slots=True)
class Reader:
    """A registered format.

    Attributes:
        name: The name users pass to ``--format``.
        description: One line for ``--help`` and error messages.
        sniff: Given the path and the first bytes of the (decompressed) file, say whether the
            file is in this format. Cheap and conservative. For a ``directory`` format it is
            given the directory and ``b""``.
        read: Read the whole file (or directory).
        directory: The format's input is a directory (e.g. a BALROG episode folder), not a
            file; ingest then hashes every file below it.
    """

    name: str
    description: str
    sniff: Callable[[Path, bytes], bool]
    read: Callable[[Path, ReadOptions], ReadResult]
    directory: bool = False


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


READ_ERRORS = (OSError, EOFError, zlib.error)
"""What reading a damaged file raises (a truncated or corrupt gzip stream among them)."""

UTF8_BOM = b"\xef\xbb\xbf"


def open_binary(path: Path) -> IO[bytes]:
    """Open a possibly gzip-compressed file for reading bytes."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def open_text(path: Path) -> IO[str]:
    """Open a possibly gzip-compressed text file for reading as UTF-8 (a BOM is skipped)."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig")


def head_bytes(path: Path, n: int = 65536) -> bytes:
    """The first ``n`` bytes of the (decompressed) file.

    A damaged compressed file gives the bytes that could be read before the damage; the
    reader then reports the damage with its line.
    """
    chunks: list[bytes] = []
    size = 0
    with open_binary(path) as fh:
        while size < n:
            try:
                chunk = fh.read(min(8192, n - size))
            except READ_ERRORS:
                break
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


def detect_format(path: str | Path) -> str:
    """Name of the first registered format whose sniffer accepts the file.

    Raises:
        UnknownFormatError: when none does; the message lists the known formats.
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
            "give the files inside it, or pass --format"
        )
    head = head_bytes(path)
    if not head.lstrip(UTF8_BOM).strip():
        raise UnknownFormatError(
            f"{path}: the file is empty, so its format cannot be detected; pass --format, "
            f"one of: {', '.join(known_formats())}"
        )
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

    Raises:
        UnknownFormatError: when ``format`` is not registered or cannot be detected.
    """
    path = Path(path)
    reader = get_reader(format or detect_format(path))
    yield from reader.read(path, options or ReadOptions())


def _oversized(path: Path, line: int, max_record_bytes: int) -> RecordError:
    return RecordError(
        f"record is larger than the limit of {max_record_bytes} bytes "
        "(raise it with --max-record-mb)",
        file=str(path),
        line=line,
    )


def iter_lines(path: Path, max_record_bytes: int) -> Iterator[tuple[int, str | RecordError]]:
    """Yield ``(line_number, text)`` for each non-blank line, or a RecordError for a bad one.

    Lines are read as bytes in bounded pieces, so an oversized line is reported (and skipped)
    without holding more than ``max_record_bytes`` of it in memory. A line that is not valid
    UTF-8 is reported with its number; a file that cannot be read further (e.g. a truncated
    gzip stream) ends with one RecordError naming the line where reading stopped.
    """
    file = str(path)
    with open_binary(path) as fh:
        lineno = 0
        while True:
            try:
                raw = fh.readline(max_record_bytes + 1)
            except READ_ERRORS as err:
                yield lineno + 1, RecordError(
                    f"cannot read the file past line {lineno}: {err}", file=file, line=lineno + 1
                )
                return
            if not raw:
                return
            lineno += 1
            if lineno == 1:
                raw = raw.removeprefix(UTF8_BOM)
            if len(raw) > max_record_bytes and not raw.endswith(b"\n"):
                try:
                    while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):
                        pass
                except READ_ERRORS:
                    pass
                yield lineno, _oversized(path, lineno, max_record_bytes)
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                yield lineno, RecordError(
                    f"not valid UTF-8 text (byte {err.start + 1} of the line)",
                    file=file,
                    line=lineno,
                )
                continue
            if text.strip():
                yield lineno, text


def read_document(path: Path, max_record_bytes: int | None = None) -> str | RecordError:
    """The whole (decompressed) file as text, or a RecordError naming where it went wrong.

    Used by formats that are one JSON document (a JSON array, an Inspect ``.json`` log).
    """
    file = str(path)
    try:
        with open_binary(path) as fh:
            data = fh.read()
    except READ_ERRORS as err:
        return RecordError(f"cannot read the file: {err}", file=file, line=1)
    data = data.removeprefix(UTF8_BOM)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        return RecordError("not valid UTF-8 text", file=file, line=line)


def first_record(head: bytes) -> dict[str, Any] | None:
    """The first JSON object of a JSONL file or of a JSON array, parsed from ``head``.

    Returns ``None`` when it does not lie wholly within ``head`` (a very long first record) or
    is not an object; sniffers then fall back to looking for key names in ``head``.
    """
    text = head.removeprefix(UTF8_BOM).decode("utf-8", errors="replace").lstrip()
    try:
        if text.startswith("["):
            value, _ = json.JSONDecoder().raw_decode(text, len(text) - len(text[1:].lstrip()))
        else:
            value = json.loads(text.split("\n", 1)[0])
    except (json.JSONDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def first_record_has_keys(
    head: bytes,
    required: tuple[str, ...],
    *,
    absent: tuple[str, ...] = (),
    container: str = "lines",
) -> bool:
    """Whether the file's first record has every ``required`` key and none of ``absent``.

    Args:
        head: The first bytes of the (decompressed) file.
        required: Keys the first record must have.
        absent: Keys it must not have.
        container: ``"lines"`` (JSON objects, one per line), ``"array"`` (a JSON array of
            objects) or ``"any"`` (either).

    When the first record cannot be parsed from ``head`` (it is longer than ``head``, or it is
    malformed), the key names are looked for as quoted text instead: in its first line for
    ``"lines"``, in ``head`` for an array. A malformed first line is then still detected, and
    the reader reports it with its line number.
    """
    first = first_json_char(head)
    if first not in ("{", "[") or (container == "lines" and first != "{"):
        return False
    if container == "array" and first != "[":
        return False
    record = first_record(head)
    if record is not None:
        return all(k in record for k in required) and not any(k in record for k in absent)
    region = head if first == "[" else head.removeprefix(UTF8_BOM).lstrip().split(b"\n", 1)[0]

    def has(key: str) -> bool:
        return f'"{key}"'.encode() in region

    return all(has(k) for k in required) and not any(has(k) for k in absent)


def stem(path: Path) -> str:
    """The file's name without its extensions (``runs/base.jsonl.gz`` -> ``base``)."""
    name = path.name
    for suffix in (".gz", ".jsonl", ".json", ".eval", ".ndjson"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name or path.name


def first_json_char(head: bytes) -> str:
    """The first non-whitespace character of the file (after a UTF-8 BOM), or ''."""
    text = head.removeprefix(UTF8_BOM).lstrip()
    return chr(text[0]) if text else ""


__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "READ_ERRORS",
    "ReadOptions",
    "ReadResult",
    "Reader",
    "UnknownFormatError",
    "detect_format",
    "first_json_char",
    "first_record",
    "first_record_has_keys",
    "get_reader",
    "head_bytes",
    "iter_lines",
    "known_formats",
    "open_binary",
    "open_text",
    "read_document",
    "read_file",
    "stem",
]
