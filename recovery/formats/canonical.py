"""Canonical JSONL: one trajectory per line, also ``.jsonl.gz``."""

from __future__ import annotations

from pathlib import Path

from recovery.canonical_records import trajectory_from_dict
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import first_record_has_keys, iter_lines, stem
from recovery.formats.jsontext import parse_json
from recovery.schema import RecordError


def sniff(path: Path, head: bytes) -> bool:
    """A JSON object per line whose first record has a ``turns`` key (and no ``messages``)."""
    return first_record_has_keys(head, ("turns",), absent=("messages",), container="lines")


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read canonical JSONL line by line; a bad line becomes a RecordError naming it."""
    default_run = stem(path)
    for lineno, line in iter_lines(path, options.max_record_bytes):
        if isinstance(line, RecordError):
            yield line
            continue
        try:
            raw = parse_json(line, str(path), lineno)
        except RecordError as err:
            yield err
            continue
        try:
            yield trajectory_from_dict(
                raw,
                default_run=default_run,
                run_override=options.run,
                success_threshold=options.success_threshold,
                file=str(path),
                line=lineno,
            )
        except RecordError as err:
            yield err


READER = Reader(
    name="canonical",
    description="canonical JSONL, one trajectory per line with a 'turns' list (.jsonl, .jsonl.gz)",
    sniff=sniff,
    read=read,
)
