"""The registry of readers, format detection, and :func:`read_file`.

Readers are imported inside :func:`_registry`, so that importing one never costs the others.
"""

from __future__ import annotations

from pathlib import Path

from recovery.formats.base import Reader, ReadOptions, ReadResult, UnknownFormatError
from recovery.formats.files import GZIP_MAGIC, UTF8_BOM, head_bytes


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


