"""The first read of the fast canonical ingest (:mod:`recovery.store.fast_canonical`):
DuckDB's schema detection over every record, which says whether the fast path's fixed-type
reads would store the file exactly, or the Python reader must (:class:`Declined`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.schema import CANONICAL_TRAJECTORY_KEYS

if TYPE_CHECKING:
    import duckdb


# What DuckDB's detection says of a field's values (type names as str(DuckDBPyType) writes
# them): every kind below comes from values of one JSON type only; a field whose values mix
# JSON types is detected as JSON.
_STRING_TYPES = {
    "VARCHAR", "DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE",
    "TIME WITH TIME ZONE", "UUID",
}
_INTEGER_TYPES = {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT",
                  "USMALLINT", "UINTEGER", "UBIGINT", "UHUGEINT"}

# How each field is read, and the detected kinds for which that read casts nothing (null:
# only ever null; json: values of several JSON types, checked value by value after a JSON read).
TOP_FIELDS: dict[str, tuple[str, set[str]]] = {
    "run": ("VARCHAR", {"string", "null"}),
    "task_id": ("JSON", {"string", "integer", "json"}),
    "sample": ("BIGINT", {"integer", "null"}),
    "budget": ("BIGINT", {"integer", "null"}),
    "success": ("BOOLEAN", {"boolean", "null"}),
    "reward": ("DOUBLE", {"integer", "number", "null"}),
    "prompt": ("VARCHAR", {"string", "null"}),
    "end_reason": ("VARCHAR", {"string", "null"}),
    "meta": ("JSON", {"object", "json", "null"}),
}
TURN_FIELDS: dict[str, tuple[str, set[str]]] = {
    "action": ("VARCHAR", {"string"}),
    "observation": ("VARCHAR", {"string", "null"}),
    "reward": ("DOUBLE", {"integer", "number", "null"}),
    "error": ("JSON", {"boolean", "string", "json", "null"}),
    "label": ("DOUBLE", {"integer", "number", "null"}),
    "done": ("BOOLEAN", {"boolean", "null"}),
    "meta": ("JSON", {"object", "json", "null"}),
}

DEFAULT_BUFFER = 1 << 24
"""DuckDB's JSON reader keeps buffers of ``maximum_object_size`` bytes: 16 MiB (its default)
unless a line is longer."""


def buffer_size(longest_line: int) -> int:
    """The reader's ``maximum_object_size`` for a file whose longest line has this many bytes."""
    return max(int(longest_line) + 2, DEFAULT_BUFFER)


def eligible(path: Path, head: bytes) -> bool:
    """Whether the fast path can try this file: plain (not compressed), no BOM."""
    return path.suffix != ".gz" and not head.startswith(b"\xef\xbb\xbf")


class Declined(Exception):
    """The fast path cannot store this file as it is; the caller rolls back and reads it in Python."""


def sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _kind(duck_type: Any) -> str:
    """The JSON kind of a detected DuckDB type: string, integer, number, boolean, object,
    list, null or json (mixed JSON types, or anything else)."""
    name = str(duck_type)
    if name in _STRING_TYPES:
        return "string"
    if name in _INTEGER_TYPES:
        return "integer"
    if name == "DOUBLE":
        return "number"
    if name == "BOOLEAN":
        return "boolean"
    if name == '"NULL"':
        return "null"
    if duck_type.id in ("struct", "map"):
        return "object"
    if duck_type.id == "list":
        return "list"
    return "json"



class SchemaProbe:
    """DuckDB's schema detection over every record of a file, on a thread of its own.

    Start it as early as possible (it needs only the file); :meth:`check` waits for it and
    declines a file whose keys or JSON types the fast path's read would not store exactly;
    :meth:`close` stops it when its answer is not needed.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        path: Path,
        *,
        warm: Callable[[], Any] | None = None,
    ):
        """Start the detection.

        Args:
            con: The store (the detection runs on a cursor of its own).
            path: The file.
            warm: Called on the thread first, e.g. to load the built-in rules while DuckDB
                reads the file on the other threads.
        """
        import threading
        from contextlib import ExitStack

        from recovery.formats._common import duckdb_file_path

        self.path = path
        self._files = ExitStack()
        self._cursor = con.cursor()
        self._result: list[tuple[str, Any]] | None = None
        self._error: BaseException | None = None
        try:
            self.duckdb_path: str | None = self._files.enter_context(duckdb_file_path(path))
        except OSError as err:
            self.duckdb_path = None
            self._error = err
        self._thread = threading.Thread(
            target=self._run, args=(DEFAULT_BUFFER, warm), name="schema-probe", daemon=True
        )
        self._thread.start()

    def _run(self, buffer: int, warm: Callable[[], Any] | None = None) -> None:
        if warm is not None:
            with suppress(Exception):  # only a head start: the caller does it again if needed
                warm()
        if self.duckdb_path is None:
            return
        try:
            detected = self._cursor.sql(
                f"SELECT * FROM read_json({sql_literal(self.duckdb_path)}, "
                "format = 'newline_delimited', sample_size = -1, maximum_depth = 4, "
                f"maximum_object_size = {buffer}) LIMIT 0"
            )
            self._result = list(zip(detected.columns, detected.types, strict=True))
            self._error = None
        except BaseException as err:  # reported to the caller by check()
            self._error = err

    def check(self, longest_line: int) -> bool:
        """Wait for the detection; decline unless every key and JSON type is one the fast
        path's read stores exactly.

        Args:
            longest_line: Bytes of the file's longest line (a line longer than the detection's
                first buffer makes it run again with a buffer that holds it).

        Returns:
            Whether any record has a turn that is not an object (then there must be none).

        Raises:
            Declined: naming the first key or field that needs the Python reader.
        """
        self._thread.join()
        if self.duckdb_path is None:
            raise Declined(f"DuckDB cannot be given the file's name: {self._error}")
        if self._error is not None and buffer_size(longest_line) > DEFAULT_BUFFER:
            self._run(buffer_size(longest_line))
        if self._error is not None:
            raise Declined(f"DuckDB cannot read the file as JSON lines: {self._error}")
        assert self._result is not None
        turns_are_objects = True
        names = set()
        for name, duck_type in self._result:
            names.add(name)
            if name not in CANONICAL_TRAJECTORY_KEYS:
                raise Declined(f"key {name!r} goes to meta")
            kind = _kind(duck_type)
            if name == "turns":
                if kind != "list":
                    raise Declined("turns is not a list in every record")
                element = duck_type.children[0][1]
                if element.id != "struct":  # e.g. lists that are all empty detect as JSON[]
                    turns_are_objects = False
                    continue
                for child, child_type in element.children:
                    if child not in TURN_FIELDS:
                        raise Declined(f"turn key {child!r} goes to meta")
                    child_kind = _kind(child_type)
                    if child_kind not in TURN_FIELDS[child][1]:
                        raise Declined(f"turn field {child!r} holds {child_kind} values")
                continue
            if kind not in TOP_FIELDS[name][1]:
                raise Declined(f"field {name!r} holds {kind} values")
        if not {"turns", "task_id"} <= names:
            raise Declined("records without turns or task_id")
        return not turns_are_objects

    def close(self) -> None:
        """Stop the detection if it still runs, and release its connection."""
        if self._thread.is_alive():
            with suppress(Exception):
                self._cursor.interrupt()
        self._thread.join()
        with suppress(Exception):
            self._cursor.close()
        self._files.close()

