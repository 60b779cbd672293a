"""ART trajectory groups saved as Parquet (OpenPipe ART, ``write_trajectory_groups_parquet``).

ART writes one row per trajectory (``src/art/utils/trajectory_logging.py``): format version 2
has ``format_version``, ``group_index``, ``trajectory_index``, ``group_json`` and
``trajectory_json`` (the complete models, as JSON text), and query-friendly columns
``reward``, ``metrics``, ``metadata``, ``tools`` (JSON text), ``logs``, ``group_metadata``,
``group_metrics``, ``group_logs`` and ``messages`` (a list of ``{role, content, tool_calls
(JSON text), tool_call_id, trainable}``). A group without trajectories is one row whose
``trajectory_index`` is null. Version 1 files have the same columns less the first five but
``group_index``. ART keeps them under ``<model>/trajectories/<split>/<step>.parquet``.

- One row is one trajectory; ``messages`` (or, where it is null, the ``messages_and_choices``
  of ``trajectory_json``; a Choice is its message) become turns as for OpenAI chats, with
  ``trainable`` in each turn's meta.
- ``task_id`` = ``metadata.task_id`` (or ``scenario_id``, ``id``) of the trajectory or its
  group, else a hash of the prompt; samples are numbered in file order.
- ``run`` = ``--run``, else ``<model>/<split>/step<N>`` for ART's own layout, else the file's stem.
- success = ``reward`` >= the success threshold; ``metrics``, ``metadata``, the group's
  metadata and both indexes go to meta. The end reason is derived.
- The file is read with pyarrow a batch of rows at a time, under a byte budget
  (:mod:`recovery.formats.parquet_budget`): a row, or a row group, larger than
  ``--max-record-mb`` once decoded is reported, naming file and row, and skipped; a row's
  "line" is its position in the file (1-based).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from recovery.fields import coerce_optional_float, coerce_task_id
from recovery.formats._chat import split_turns, task_id_from_prompt
from recovery.formats._common import first_key, guard, type_name
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import stem
from recovery.formats.jsontext import parse_json
from recovery.schema import RecordError, Trajectory, derive_success

PARQUET_MAGIC = b"PAR1"
FORMAT_VERSIONS = (1, 2)
JSON_COLUMNS = ("metrics", "metadata", "tools", "group_metadata", "group_metrics")
TASK_KEYS = ("task_id", "scenario_id", "id")
KEPT_COLUMNS = ("group_index", "trajectory_index", "format_version", "logs", "group_logs")


def sniff(path: Path, head: bytes) -> bool:
    """A Parquet file with ART's ``group_index`` and ``reward`` columns and its messages."""
    if not head.startswith(PARQUET_MAGIC):
        return False
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(path).names)
    except (pa.ArrowException, OSError):  # any unreadable file is simply not ART's
        return False
    return {"group_index", "reward"} <= names and bool({"messages", "trajectory_json"} & names)


def _json_column(row: dict[str, Any], column: str, file: str, line: int) -> Any:
    value = row.get(column)
    if value is None or not isinstance(value, str):
        return value
    try:
        return parse_json(value, file, line)
    except RecordError as err:
        raise RecordError(f"column '{column}': {err.message}", file=file, line=line) from None


def _message(raw: Any, where: str) -> dict[str, Any]:
    """A ``messages`` struct (or a ``messages_and_choices`` item) as an OpenAI message."""
    if not isinstance(raw, dict):
        raise RecordError(f"field '{where}': expected a message, got {type_name(raw)}")
    trainable = raw.get("trainable")
    if "finish_reason" in raw and isinstance(raw.get("message"), dict):
        raw, trainable = raw["message"], True  # a Choice: the model's own output
    role = raw.get("role")
    if not isinstance(role, str):
        raise RecordError(f"field '{where}.role': expected string, got {type_name(role)}")
    message: dict[str, Any] = {"role": role, "content": raw.get("content")}
    tool_calls = raw.get("tool_calls")
    if isinstance(tool_calls, str):
        try:
            tool_calls = parse_json(tool_calls)
        except RecordError as err:
            raise RecordError(f"field '{where}.tool_calls': {err.message}") from None
    if tool_calls:
        message["tool_calls"] = tool_calls
    for key in ("tool_call_id", "name"):
        if raw.get(key):
            message[key] = raw[key]
    if trainable is not None:
        message["trainable"] = trainable
    return message


def _messages(row: dict[str, Any], file: str, line: int) -> list[dict[str, Any]]:
    if row.get("messages") is not None:
        listed = row["messages"]
        where = "messages"
    else:
        data = _json_column(row, "trajectory_json", file, line)
        if data is None:
            return []
        if not isinstance(data, dict):
            raise RecordError(f"column 'trajectory_json': expected object, got {type_name(data)}")
        listed = data.get("messages_and_choices") or []
        where = "trajectory_json.messages_and_choices"
    if not isinstance(listed, list):
        raise RecordError(f"field '{where}': expected array, got {type_name(listed)}")
    return [_message(m, f"{where}[{i}]") for i, m in enumerate(listed)]


def _run(path: Path) -> str:
    """``<model>/<split>/step<N>`` for ``.../<model>/trajectories/<split>/<N>.parquet``."""
    parts = path.resolve().parts
    name = stem(path).removesuffix(".parquet")
    if name.isdigit() and len(parts) >= 4 and parts[-3] == "trajectories":
        return f"{parts[-4]}/{parts[-2]}/step{int(name)}"
    return name


def empty_group(row: dict[str, Any]) -> bool:
    """The row that version 2 writes for a group without trajectories."""
    return (row.get("format_version") is not None and row.get("trajectory_index") is None
            and row.get("trajectory_json") is None and row.get("messages") is None)


def row_trajectory(
    row: dict[str, Any], *, run: str, options: ReadOptions, file: str, line: int
) -> Trajectory:
    """One row (not an :func:`empty_group` row) as a trajectory."""
    version = row.get("format_version")
    if version is not None and version not in FORMAT_VERSIONS:
        raise RecordError(
            f"field 'format_version': version {version!r} is not one this reader knows "
            f"({', '.join(map(str, FORMAT_VERSIONS))})"
        )
    parsed = {column: _json_column(row, column, file, line) for column in JSON_COLUMNS}
    prompt, turns = split_turns(_messages(row, file, line))
    reward = coerce_optional_float(row.get("reward"), "reward")
    metadata = parsed["metadata"] if isinstance(parsed["metadata"], dict) else {}
    group = parsed["group_metadata"] if isinstance(parsed["group_metadata"], dict) else {}
    task = first_key(metadata, TASK_KEYS)
    if task is None:
        task = first_key(group, TASK_KEYS)
    meta: dict[str, Any] = {c: row[c] for c in KEPT_COLUMNS if row.get(c) is not None}
    meta.update({c: v for c, v in parsed.items() if v is not None})
    return Trajectory(
        run=run,
        task_id=coerce_task_id(task, "metadata.task_id") if task is not None
        else task_id_from_prompt(prompt),
        turns=turns,
        success=derive_success(None, reward, options.success_threshold, required=False),
        reward=reward,
        prompt=prompt,
        meta=meta,
        source_file=file,
        source_line=line,
    )


def _rows(path: Path, max_record_bytes: int) -> Iterator[tuple[int, dict[str, Any] | RecordError]]:
    """``(line, row)`` for each row of the file, read under the byte budget
    (:mod:`recovery.formats.parquet_budget`); a row (or a row group) over ``max_record_bytes``
    is a RecordError in its place, reported before it is converted to Python values.

    Raises:
        RecordError: when the file has no ``group_index`` column.
        pyarrow.ArrowException, OSError: when the file cannot be read further.
    """
    from recovery.formats.parquet_budget import Refusal, iter_batches, open_parquet

    parquet = open_parquet(path)
    if "group_index" not in parquet.schema_arrow.names:
        raise RecordError("column 'group_index' is missing: not an ART trajectory file")
    file = str(path)
    for batch in iter_batches(parquet, max_record_bytes):
        if isinstance(batch, Refusal):
            yield batch.first_row, RecordError(batch.message, file=file, line=batch.first_row)
            continue
        yield from _batch_rows(batch, max_record_bytes, file)


def _batch_rows(
    batch: Any, max_record_bytes: int, file: str
) -> Iterator[tuple[int, dict[str, Any] | RecordError]]:
    """A :class:`~recovery.formats.parquet_budget.Batch`'s rows, a bounded slice at a time."""
    from recovery.formats.parquet_budget import BATCH_BYTES, LIMIT_HINT, row_slices

    for start, stop in row_slices(batch.sizes, BATCH_BYTES, alone=max_record_bytes):
        line = batch.first_row + start
        if stop - start == 1 and batch.sizes[start] > max_record_bytes:
            yield line, RecordError(
                f"record is larger than the limit of {max_record_bytes} bytes "
                f"({int(batch.sizes[start])} bytes decoded; {LIMIT_HINT})", file=file, line=line)
            continue
        for offset, row in enumerate(batch.data.slice(start, stop - start).to_pylist()):
            yield line + offset, row


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read an ART trajectory-group Parquet file, under ``options.max_record_bytes``."""
    import pyarrow as pa

    file = str(path)
    run = options.run or _run(path)
    rows = _rows(path, options.max_record_bytes)
    line = 0
    while True:
        try:
            line, row = next(rows)
        except StopIteration:
            return
        except RecordError as err:
            yield err.located(file, line + 1)
            return
        except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError) as err:
            yield RecordError(f"cannot read the Parquet file: {err}", file=file, line=line + 1)
            return
        if isinstance(row, RecordError):
            yield row
            continue
        if empty_group(row):
            continue
        yield guard(file, line, lambda row=row, n=line: row_trajectory(
            row, run=run, options=options, file=file, line=n))


READER = Reader(
    name="art",
    description="ART trajectory groups saved as Parquet (format version 1 or 2)",
    sniff=sniff,
    read=read,
)
