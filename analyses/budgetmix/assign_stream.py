"""The dataset of ``recovery budgetmix assign``, read a bounded piece at a time.

Parquet is read in batches under a byte budget (:mod:`recovery.formats.parquet_budget`: row
groups checked from their metadata, string columns read as dictionaries, each row measured
before it is decoded); JSON Lines a line at a time with the readers' bounded line reader. So
memory follows ``BATCH_BYTES`` and the largest row (``--max-record-mb``), not the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.errors import InputProblem

if TYPE_CHECKING:
    import pyarrow as pa

ASSIGN_BATCH_ROWS = 65536
"""Rows in a Parquet batch at most (each batch is a row group of the output)."""
JSONL_CHUNK_BYTES = 16 * 1024 * 1024
"""Bytes of JSON text parsed into one chunk of rows (Python objects take several times more)."""


def parquet_rows(path: Path) -> int:
    """How many rows the Parquet file's metadata declares.

    Raises:
        InputProblem: naming the file when it cannot be read as Parquet.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return int(pq.read_metadata(pa.OSFile(str(path))).num_rows)
    except (pa.ArrowException, OSError) as err:
        raise InputProblem(f"{path}: cannot be read as Parquet ({err})") from None


def parquet_tables(path: Path, max_record_bytes: int) -> Iterator[pa.Table]:
    """The Parquet file's rows as tables of its own schema, each under the batch budget (one
    row alone may reach ``max_record_bytes``).

    Raises:
        InputProblem: naming the file (and the rows) when it cannot be read, or a row or a
            row group is over ``max_record_bytes``.
    """
    import pyarrow as pa

    from recovery.formats.parquet_budget import BATCH_BYTES, Refusal, iter_batches, open_parquet

    try:
        file = open_parquet(path)
        schema = _plain_schema(path)
        for batch in iter_batches(file, max_record_bytes, BATCH_BYTES, ASSIGN_BATCH_ROWS):
            if isinstance(batch, Refusal):
                raise InputProblem(f"{path}: {batch.message}")
            for start, stop in _slices(batch, max_record_bytes, BATCH_BYTES, path):
                piece = pa.Table.from_batches([batch.data.slice(start, stop - start)])
                yield piece.cast(schema)  # dictionaries back to the file's own types
    except (pa.ArrowException, OSError) as err:
        raise InputProblem(f"{path}: cannot be read as Parquet ({err})") from None


def _plain_schema(path: Path) -> pa.Schema:
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pq.read_schema(pa.OSFile(str(path)))


def _slices(batch: Any, max_record_bytes: int, budget: int, path: Path) -> Iterator[tuple[int, int]]:
    """A batch's row ranges under ``budget``; a row over ``max_record_bytes`` is refused."""
    from recovery.formats.parquet_budget import LIMIT_HINT, row_slices

    for start, stop in row_slices(batch.sizes, budget, alone=max_record_bytes):
        size = batch.sizes[start]
        if stop - start == 1 and size > max_record_bytes:
            raise InputProblem(
                f"{path}: row {batch.first_row + start} is larger than the limit of "
                f"{max_record_bytes} bytes ({int(size)} bytes decoded; {LIMIT_HINT})")
        yield start, stop


def jsonl_chunks(path: Path, max_record_bytes: int) -> Iterator[list[dict[str, Any]]]:
    """The JSON Lines file's rows, a chunk of about ``JSONL_CHUNK_BYTES`` of text at a time,
    each line parsed strictly (UTF-8, no NaN, bounded depth) and at most
    ``max_record_bytes`` long.

    Raises:
        InputProblem: naming the file and line of the first row that cannot be read.
    """
    from recovery.formats.files import iter_lines

    chunk: list[dict[str, Any]] = []
    size = 0
    for number, text in iter_lines(path, max_record_bytes):
        if not isinstance(text, str):
            raise InputProblem(f"{path}:{number}: {_plain(text.message)}")
        chunk.append(_parse_row(path, number, text))
        size += len(text)
        if size >= JSONL_CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _plain(message: str) -> str:
    """A reader's message without the ingest options assign does not have."""
    message = message.replace(" or drop the record (--skip-bad)", "")
    if message.startswith("malformed JSON: "):
        message = f"not JSON: {message.removeprefix('malformed JSON: ')}"
    return message


def _parse_row(path: Path, number: int, text: str) -> dict[str, Any]:
    from recovery.formats.jsontext import parse_json
    from recovery.schema import RecordError

    try:
        row = parse_json(text, file=str(path), line=number)
    except RecordError as err:
        raise InputProblem(f"{path}:{number}: {_plain(err.message)}") from None
    if not isinstance(row, dict):
        raise InputProblem(f"{path}:{number}: a row must be a JSON object, "
                           f"got {type(row).__name__}")
    return row


def jsonl_schema(chunks: Iterator[list[dict[str, Any]]]) -> pa.Schema:
    """One Parquet schema for rows read in chunks: every key any row has, each type widened
    to hold every chunk's values.

    Raises:
        pyarrow.ArrowException, TypeError, ValueError: when the values cannot share a type.
    """
    import pyarrow as pa

    schemas = []
    for chunk in chunks:
        kind = pa.array(chunk).type  # a struct of every key of the chunk's rows
        schemas.append(pa.schema([kind.field(i) for i in range(kind.num_fields)]))
    if not schemas:
        return pa.schema([])
    return pa.unify_schemas(schemas, promote_options="permissive")
