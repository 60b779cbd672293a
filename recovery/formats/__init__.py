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
import math
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from recovery.schema import SUCCESS_THRESHOLD, RecordError, Trajectory

DEFAULT_MAX_RECORD_BYTES = 512 * 1024 * 1024
"""Largest single record (line or document) a reader accepts before reporting it as oversized."""

MAX_JSON_DEPTH = 256
"""Deepest nesting of arrays and objects a record may have (the record itself is level 1).

Every path applies it, DuckDB's fast path included, so that a file is stored or refused the
same way whichever path reads it; Python's own parser would fail near 1,000 levels, and no
rollout format needs more than a few dozen."""

GZIP_MAGIC = b"\x1f\x8b"


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


READ_ERRORS = (OSError, EOFError, zlib.error)
"""What reading a damaged file raises (a truncated or corrupt gzip stream among them)."""

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (0 for a scalar).

    Brackets inside strings do not count.
    """
    depth = deepest = 0
    for bracket in _JSON_BRACKET.findall(_JSON_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def too_deep(text: str) -> int | None:
    """The depth of ``text`` when it exceeds :data:`MAX_JSON_DEPTH`, else ``None``.

    Cheap for ordinary records: text with at most that many opening brackets cannot be deeper,
    and only longer bracket counts are scanned.
    """
    if text.count("{") + text.count("[") <= MAX_JSON_DEPTH:
        return None
    depth = json_depth(text)
    return depth if depth > MAX_JSON_DEPTH else None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of the range of a double")
    return value


JSON_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)
"""The strict decoder every reader uses: no NaN, no infinities, no overflowing numbers."""


def parse_json(text: str | bytes, file: str | None = None, line: int | None = None) -> Any:
    """Parse one JSON record strictly, or raise a RecordError that names file and line.

    Strict: ``NaN``, ``Infinity`` and ``-Infinity`` are refused (they are not JSON, and the
    store could not hold them), lone UTF-16 surrogates (``"\\ud800"``) are refused (they are
    not Unicode text), and so is nesting deeper than :data:`MAX_JSON_DEPTH`.

    Raises:
        RecordError: naming what is wrong (column for a syntax error).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise RecordError(
                f"not valid UTF-8 text (byte {err.start + 1})", file=file, line=line
            ) from None
    depth = too_deep(text)
    if depth is not None:
        raise RecordError(
            f"JSON nested {depth} levels deep; the limit is {MAX_JSON_DEPTH}", file=file,
            line=line,
        )
    try:
        value = JSON_DECODER.decode(text)
    except json.JSONDecodeError as err:
        # A line's own number when given; for a whole document, the line of the error.
        raise RecordError(
            f"malformed JSON: {err.msg} (column {err.colno})", file=file,
            line=err.lineno if line is None else line,
        ) from None
    except ValueError as err:
        raise RecordError(f"not valid JSON: {err}", file=file, line=line) from None
    except RecursionError:
        raise RecordError(
            f"JSON nested too deeply (limit {MAX_JSON_DEPTH} levels)", file=file, line=line
        ) from None
    if "\\u" in text and has_lone_surrogate(value):
        raise RecordError(
            "text holds a lone UTF-16 surrogate escape (e.g. \\ud800), which is not "
            "Unicode; fix the writer or drop the record (--skip-bad)",
            file=file, line=line,
        )
    return value


def has_lone_surrogate(value: Any) -> bool:
    """Whether any string (key or value) in ``value`` holds a lone surrogate (iterative)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False

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
    if path.suffix == ".gz":
        # Decompress what the first bytes give, so that a damaged stream still shows its
        # head (GzipFile raises before returning anything when the stream ends early).
        with open(path, "rb") as raw:
            compressed = raw.read(max(n, 1 << 20))
        try:
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(compressed, n)
        except zlib.error:
            return b""
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
    if path.suffix == ".gz":
        with open(path, "rb") as raw:
            magic = raw.read(len(GZIP_MAGIC))
        if magic and magic != GZIP_MAGIC:
            raise UnknownFormatError(
                f"{path}: not gzip data (a .gz file starts with the bytes 1f 8b; this one "
                f"starts with {magic.hex(' ')}); rename it or recompress it"
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

    Used by formats that are one JSON document (a JSON array, an Inspect ``.json`` log). At
    most ``max_record_bytes`` are decompressed: a larger document is an error.
    """
    file = str(path)
    limit = DEFAULT_MAX_RECORD_BYTES if max_record_bytes is None else max_record_bytes
    try:
        with open_binary(path) as fh:
            data = fh.read(limit + 1)  # a bounded read: a gzip bomb stops at the limit
    except READ_ERRORS as err:
        return RecordError(f"cannot read the file: {err}", file=file, line=1)
    if len(data) > limit:
        return RecordError(
            f"the document is larger than the limit of {limit} bytes (decompressed; raise it "
            "with --max-record-mb)",
            file=file, line=1,
        )
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
    "JSON_DECODER",
    "MAX_JSON_DEPTH",
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
    "has_lone_surrogate",
    "head_bytes",
    "iter_lines",
    "json_depth",
    "known_formats",
    "open_binary",
    "open_text",
    "parse_json",
    "read_document",
    "read_file",
    "stem",
    "too_deep",
]
