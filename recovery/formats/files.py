"""Reading input files: gzip, bounded lines and documents, sniffing helpers."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from recovery.formats.base import DEFAULT_MAX_RECORD_BYTES
from recovery.schema import RecordError

GZIP_MAGIC = b"\x1f\x8b"


READ_ERRORS = (OSError, EOFError, zlib.error)
"""What reading a damaged file raises (a truncated or corrupt gzip stream among them)."""

UTF8_BOM = b"\xef\xbb\xbf"

EXCERPT_CHARS = 80
"""How much of a text read from an input a message quotes, at most."""
FOLDER_RULE = "a folder input is read only from the regular files inside it"
"""What a folder reader says when it refuses an entry (a link, a named pipe, a device...)."""
_BLANK_BYTES = b" \t\r\n\x0b\x0c"
_PEEK_BYTES = 1 << 16


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


def excerpt(text: object, limit: int = EXCERPT_CHARS) -> str:
    """A bounded, printable piece of a text read from an input, for a message.

    At most ``limit`` characters of ``text`` (``...`` marks a cut), control characters
    escaped, so a message never carries a whole field or a terminal escape.
    """
    from recovery.display import printable

    value = text if isinstance(text, str) else str(text)
    cut = value[:limit]
    return printable(cut) + ("..." if len(value) > limit else "")


def special_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, for messages (a link, a named pipe...)."""
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def entry_problem(root: Path, path: Path) -> str | None:
    """Why ``path`` may not be read as part of the folder input ``root``, or ``None``.

    An entry may be read when it is a regular file itself (``lstat``: not a symbolic link,
    not a named pipe, device or socket) and its resolved path lies inside ``root``'s. Nothing
    is opened, so a named pipe cannot block.
    """
    try:
        mode = os.lstat(path).st_mode
    except (OSError, ValueError) as err:  # ValueError: a NUL in the name
        return f"cannot read the file: {getattr(err, 'strerror', None) or err}"
    if not stat.S_ISREG(mode):
        return f"is {special_kind(mode)}"
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return "lies outside the folder"
    return None


def open_entry(root: Path, path: Path) -> IO[bytes]:
    """Open a file of the folder input ``root`` for reading bytes, refusing what
    :func:`entry_problem` refuses.

    The file is opened without following a link and without blocking (``O_NOFOLLOW``,
    ``O_NONBLOCK``) and checked again once open, so that an entry swapped after the check is
    refused too.

    Raises:
        RecordError: naming ``path`` (line 1): a refused entry, or one that cannot be opened.
    """
    file = str(path)
    problem = entry_problem(root, path)
    if problem is not None:
        raise RecordError(_refusal(problem), file=file, line=1)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise RecordError(f"cannot read the file: {err.strerror or err}", file=file,
                          line=1) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise RecordError(_refusal(f"is {special_kind(mode)}"), file=file, line=1)
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _refusal(problem: str) -> str:
    if problem.startswith("cannot read"):
        return problem
    return f"{problem}; {FOLDER_RULE}"


def read_entry_document(root: Path, path: Path, max_record_bytes: int) -> str:
    """A file of the folder input ``root`` (see :func:`open_entry`) as text, bounded.

    Raises:
        RecordError: naming ``path``: refused, unreadable, over the limit, or not UTF-8.
    """
    file = str(path)
    with open_entry(root, path) as fh:
        try:
            data = fh.read(max_record_bytes + 1)
        except READ_ERRORS as err:
            raise RecordError(f"cannot read the file: {err}", file=file, line=1) from None
    if len(data) > max_record_bytes:
        raise RecordError(
            f"the document is larger than the limit of {max_record_bytes} bytes (raise it "
            "with --max-record-mb)", file=file, line=1)
    data = data.removeprefix(UTF8_BOM)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise RecordError("not valid UTF-8 text", file=file, line=line) from None


def _skip_blank_lines(fh: IO[bytes]) -> tuple[int, BaseException | None]:
    """Consume the whole lines of ASCII white space at ``fh``'s position.

    Returns how many lines were consumed, and the error that stopped reading (a truncated
    gzip stream), if one did. A run of blank lines is dropped a buffer at a time (``peek``),
    not line by line, so a file of millions of newlines (a gzip of a few hundred KB) costs
    what decompressing it does. A line that is not blank, or blank but longer than the
    buffer, is left for ``readline``.
    """
    peek = getattr(fh, "peek", None)
    skipped = 0
    if peek is None:
        return skipped, None
    try:
        while True:
            window = peek(_PEEK_BYTES)[:_PEEK_BYTES]
            run = len(window) - len(window.lstrip(_BLANK_BYTES))
            end = window.rfind(b"\n", 0, run) + 1
            if end == 0:
                return skipped, None
            fh.read(end)
            skipped += window.count(b"\n", 0, end)
            if run < len(window):
                return skipped, None
    except READ_ERRORS as err:
        return skipped, err


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
            failed: BaseException | None = None
            if lineno:  # line 1 may start with a BOM: readline reads it
                skipped, failed = _skip_blank_lines(fh)
                lineno += skipped
            raw = b""
            if failed is None:
                try:
                    raw = fh.readline(max_record_bytes + 1)
                except READ_ERRORS as err:
                    failed = err
            if failed is not None:
                yield lineno + 1, RecordError(
                    f"cannot read the file past line {lineno}: {failed}", file=file,
                    line=lineno + 1,
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


