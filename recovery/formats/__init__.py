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

from recovery.formats.base import (
    DEFAULT_MAX_RECORD_BYTES,
    Reader,
    ReadOptions,
    ReadResult,
    UnknownFormatError,
)
from recovery.formats.files import (
    GZIP_MAGIC,
    READ_ERRORS,
    UTF8_BOM,
    first_json_char,
    first_record,
    first_record_has_keys,
    head_bytes,
    iter_lines,
    open_binary,
    open_text,
    read_document,
    stem,
)
from recovery.formats.jsontext import (
    JSON_DECODER,
    MAX_JSON_DEPTH,
    has_lone_surrogate,
    json_depth,
    parse_json,
    too_deep,
)
from recovery.formats.registry import (
    detect_format,
    get_reader,
    known_formats,
    read_file,
)

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "GZIP_MAGIC",
    "JSON_DECODER",
    "MAX_JSON_DEPTH",
    "READ_ERRORS",
    "UTF8_BOM",
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
