"""Reading Parquet under a byte budget: row groups checked against their declared sizes,
batches whose rows are measured before they become Python values.

A Parquet file can be tiny on disk and huge in memory: a long, repetitive string compresses
to almost nothing, and a dictionary-encoded column repeats one stored value in every row that
refers to it. So a file is read like this:

- each row group's declared uncompressed size (``total_byte_size`` and the column chunks'
  sizes) is checked before anything is decompressed: a group whose size per row is over the
  record limit is refused (at least one of its rows is over it);
- string and binary columns are read as dictionaries (:func:`open_parquet`), so a value that
  many rows share is held once, and the batch size is chosen from the declared sizes so that
  one batch stays under the batch budget;
- what was read is measured (:func:`row_sizes`: the bytes each row takes once decoded) and a
  batch far larger than its group declared is refused (the metadata lied); a row over the
  record limit is reported before it is converted, and rows are converted a slice at a time
  (:func:`row_slices`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

BATCH_BYTES = 64 * 1024 * 1024
"""Bytes (decoded) a batch of rows aims to stay under."""
MAX_BATCH_ROWS = 1024
"""Rows in a batch at most, whatever the declared sizes say."""
LIMIT_HINT = "raise it with --max-record-mb"
_SLACK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Batch:
    """Rows ``first_row`` (1-based) onwards of a file, read, and each row's decoded size."""

    first_row: int
    data: pa.RecordBatch
    sizes: np.ndarray


@dataclass(frozen=True, slots=True)
class Refusal:
    """Rows ``first_row``..``last_row`` (1-based) that were not read, and why (one line)."""

    first_row: int
    last_row: int
    message: str


def open_parquet(path: Path) -> pq.ParquetFile:
    """The file, its string and binary columns read as dictionaries.

    Raises:
        pyarrow.ArrowException, OSError: when it is not a readable Parquet file.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = pq.ParquetFile(pa.OSFile(str(path)))
    schema = first.schema
    leaves = [schema.column(i).path for i in range(len(schema))
              if schema.column(i).physical_type == "BYTE_ARRAY"]
    # views have no cast back from a dictionary: they are read as they are
    kept = [leaf for leaf in leaves if not _view_leaf(first.schema_arrow, leaf)]
    return pq.ParquetFile(pa.OSFile(str(path)), metadata=first.metadata,
                          read_dictionary=kept or None)


def _view_leaf(schema: pa.Schema, leaf: str) -> bool:
    import pyarrow as pa

    top = leaf.split(".", 1)[0]
    if top not in schema.names:
        return False
    kind = str(schema.field(top).type)
    return "view" in kind or isinstance(schema.field(top).type, pa.ExtensionType)


def declared_bytes(file: pq.ParquetFile, group: int) -> int:
    """A row group's uncompressed size as its metadata declares it."""
    meta = file.metadata.row_group(group)
    chunks = sum(meta.column(j).total_uncompressed_size for j in range(meta.num_columns))
    return max(meta.total_byte_size, chunks, 0)


def iter_batches(
    file: pq.ParquetFile, max_record_bytes: int, batch_bytes: int = BATCH_BYTES,
    max_rows: int = MAX_BATCH_ROWS,
) -> Iterator[Batch | Refusal]:
    """The file's rows, a batch at a time under ``batch_bytes``; a row group that cannot be
    read under the limits is one :class:`Refusal` (and its rows are not read).

    Raises:
        pyarrow.ArrowException, OSError: when the file cannot be read further.
    """
    first = 1
    for group in range(file.metadata.num_row_groups):
        rows = file.metadata.row_group(group).num_rows
        yield from _group_batches(file, group, first, max_record_bytes, (batch_bytes, max_rows))
        first += rows


def _group_batches(
    file: pq.ParquetFile, group: int, first: int, max_record_bytes: int,
    batch: tuple[int, int],
) -> Iterator[Batch | Refusal]:
    """One row group's batches; ``batch`` is the budget in bytes and the most rows."""
    rows = file.metadata.row_group(group).num_rows
    if rows <= 0:
        return
    declared = declared_bytes(file, group)
    where = f"row group {group} (rows {first}-{first + rows - 1})"
    if declared / rows > max_record_bytes:
        yield Refusal(first, first + rows - 1, (
            f"{where} holds {declared} bytes uncompressed, {declared // rows} a row: more than "
            f"the limit of {max_record_bytes} bytes a record ({LIMIT_HINT})"))
        return
    per_row = max(1, math.ceil(declared / rows))
    size = max(1, min(batch[1], batch[0] // per_row))
    # a batch holds no more than its group: dictionaries once, indices, offsets
    ceiling = 2 * declared + 16 * size * max(1, len(file.schema)) + _SLACK_BYTES
    start = first
    for data in file.iter_batches(batch_size=size, row_groups=[group], use_threads=False):
        if data.nbytes > ceiling:
            yield Refusal(start, first + rows - 1, (
                f"{where} declares {declared} bytes uncompressed but {data.num_rows} of its "
                f"rows hold {data.nbytes}: the file's metadata is wrong"))
            return
        yield Batch(start, data, row_sizes(data))
        start += data.num_rows


def row_slices(sizes: np.ndarray, budget: int, alone: float = math.inf) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` ranges covering ``sizes`` in order, each summing to at most
    ``budget`` or holding one row (one larger than ``budget``, or any row over ``alone``)."""
    start, total = 0, 0.0
    for i, size in enumerate(sizes.tolist()):
        if i > start and (total + size > budget or size > alone):
            yield start, i
            start, total = i, 0.0
        total += size
        if size > alone:
            yield i, i + 1
            start, total = i + 1, 0.0
    if start < len(sizes):
        yield start, len(sizes)


def row_sizes(batch: pa.RecordBatch) -> np.ndarray:
    """The bytes each row of ``batch`` takes decoded (a dictionary value counted in every row
    that refers to it), as floats (a hostile row may exceed any integer type's range)."""
    total = np.zeros(batch.num_rows, dtype=np.float64)
    for column in batch.columns:
        total += _sizes(column)
    return total


def _sizes(array: pa.Array) -> np.ndarray:
    """Decoded bytes per element of ``array``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind, n = array.type, len(array)
    if pa.types.is_dictionary(kind):
        return _dictionary_sizes(array)
    if (pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind)
            or pa.types.is_large_binary(kind)):
        lengths = pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False)
        return lengths.astype(np.float64) + 8
    if isinstance(array, (pa.ListArray, pa.LargeListArray)):  # a MapArray is a ListArray
        offsets = array.offsets.to_numpy(zero_copy_only=False)
        cumulative = np.concatenate([[0.0], np.cumsum(_sizes(array.values))])
        return cumulative[offsets[1:]] - cumulative[offsets[:-1]] + 8
    if isinstance(array, pa.StructArray):
        total = np.ones(n, dtype=np.float64)
        for field in array.flatten():
            total += _sizes(field)
        return total
    try:
        width = kind.bit_width
    except ValueError:  # a type of no fixed width this function does not know: the mean
        return np.full(n, array.nbytes / max(n, 1), dtype=np.float64)
    return np.full(n, max(1, width // 8), dtype=np.float64)


def _dictionary_sizes(array: pa.DictionaryArray) -> np.ndarray:
    values = _sizes(array.dictionary)
    indices = array.indices.fill_null(0).to_numpy(zero_copy_only=False)
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    looked_up = values[indices] if len(values) else np.zeros(len(array))
    return np.where(valid, looked_up, 0.0) + 4
