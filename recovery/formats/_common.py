"""Helpers shared by the readers of trainer and harness outputs (verl, ATIF, SWE-agent,
mini-swe-agent, BALROG, ART).

- :func:`load_document` reads a file that is one JSON document, strictly;
- :func:`guard` turns whatever a malformed record makes a builder raise into a
  :class:`~recovery.schema.RecordError` that names file and line, so that a reader never raises;
- :class:`Results` reads the results file that decides success for harnesses whose
  trajectories carry no outcome (``--results FILE``);
- :func:`duckdb_file_path` gives a file's path in a form DuckDB reads as that one file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recovery.formats.base import ReadOptions
from recovery.formats.files import read_document
from recovery.formats.jsontext import parse_json
from recovery.schema import RecordError, Trajectory, text_problem

UNEXPECTED = (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError,
              OverflowError)
"""What a builder may raise on a record of an unexpected shape (RecordError is a ValueError
too, and is caught first)."""


DUCKDB_PATTERN_CHARACTERS = frozenset("*?[]{}\\")
"""Characters that DuckDB's file readers may read as a pattern (a glob) rather than as part of
a file's name (DuckDB 2.0 expands ``*``, ``?`` and ``[...]``; the others are kept out too)."""


@contextmanager
def duckdb_file_path(path: Path) -> Iterator[str]:
    """A path to give DuckDB's file readers (``read_json``, ``read_parquet``...) that names
    ``path`` and nothing else.

    DuckDB expands globs in every path it reads, so ``x[12].jsonl`` would be read as
    ``x1.jsonl`` and ``a*.parquet`` as every file that matches it. A plain absolute path (no
    glob character, no leading ``~``, no ``s3://``-like prefix, valid UTF-8) is given as it
    is; any other is read through a symbolic link with a plain name in a private temporary
    folder, removed when the block ends.

    Yields:
        The path, as text for DuckDB.

    Raises:
        OSError: when no such link can be made (the temporary folder's own path would need
            one too, or links cannot be made there).
    """
    import os
    import shutil
    import tempfile

    # absolute, but not normalised: ``link/../x`` must stay the file the system opens
    absolute = os.path.join(os.getcwd(), os.fspath(path))
    if _duckdb_plain(absolute):
        yield absolute
        return
    folder = tempfile.mkdtemp(prefix="recovery-read-")
    try:
        suffix = "".join(s for s in Path(absolute).suffixes[-2:] if s[1:].isalnum())
        link = os.path.join(folder, "input" + suffix)
        if not _duckdb_plain(link):
            raise OSError(f"the temporary folder {folder!r} has a name DuckDB would read as a "
                          "pattern; set TMPDIR to a plain folder")
        os.symlink(absolute, link)
        yield link
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _duckdb_plain(path: str) -> bool:
    """Whether DuckDB reads this absolute path as the one file it names."""
    if DUCKDB_PATTERN_CHARACTERS.intersection(path):
        return False
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def type_name(value: Any) -> str:
    """``null`` for None, else the Python type's name (as messages say it)."""
    return "null" if value is None else type(value).__name__


def load_document(path: Path, options: ReadOptions) -> Any:
    """The file as one parsed JSON value.

    Raises:
        RecordError: naming the file and the line where it went wrong (the size limit, bad
            UTF-8, malformed JSON, NaN, a lone surrogate, nesting too deep).
    """
    text = read_document(path, options.max_record_bytes)
    if isinstance(text, RecordError):
        raise text
    return parse_json(text, str(path))


def guard(file: str, line: int, build: Callable[[], Trajectory]) -> Trajectory | RecordError:
    """``build()``, checked, or a RecordError located at ``file:line``.

    The built trajectory's text must be valid Unicode; an exception that a record of an
    unexpected shape raises is reported as a bad record rather than escaping the reader.
    """
    try:
        traj = build()
        problem = text_problem(traj)
        if problem is not None:
            raise RecordError(f"field '{problem}': text holds a lone UTF-16 surrogate")
        return traj
    except RecordError as err:
        return err.located(file, line)
    except UNEXPECTED as err:
        return RecordError(f"cannot read the record ({type(err).__name__}: {err})",
                           file=file, line=line)


def expect_dict(value: Any, where: str) -> dict[str, Any]:
    """``value`` when it is an object, else a RecordError naming ``where``."""
    if not isinstance(value, dict):
        raise RecordError(f"field '{where}': expected object, got {type_name(value)}")
    return value


def optional_dict(value: Any, where: str) -> dict[str, Any]:
    """An optional object: ``{}`` for null."""
    return {} if value is None else expect_dict(value, where)


def expect_list(value: Any, where: str) -> list[Any]:
    """``value`` when it is an array, else a RecordError naming ``where``."""
    if not isinstance(value, list):
        raise RecordError(f"field '{where}': expected array, got {type_name(value)}")
    return value


def optional_text(value: Any, where: str) -> str:
    """An optional string: ``""`` for null; anything else is an error naming ``where``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RecordError(f"field '{where}': expected string, got {type_name(value)}")
    return value


def layout_run(path: Path, task_id: str) -> str:
    """The run label a harness's folder layout gives: ``<run>/<task>/<task>.<ext>`` gives the
    run folder's name, ``<run>/<file>`` the folder's name."""
    parent = path.resolve().parent
    if parent.name == task_id and parent.parent.name:
        return parent.parent.name
    return parent.name or task_id


@dataclass(frozen=True, slots=True)
class Results:
    """Which instances a harness resolved, from a results file.

    Attributes:
        file: The results file, for messages.
        resolved: Instances that succeeded.
        unresolved: Instances evaluated and not resolved (failures).
        errored: Instances whose evaluation itself failed (the harness, not the agent):
            outcome unknown, end reason ``crash``.
        closed: When true, an instance in none of the sets is a failure (a bare list of
            resolved ids); when false it is unknown.
    """

    file: str
    resolved: frozenset[str]
    unresolved: frozenset[str] = frozenset()
    errored: frozenset[str] = frozenset()
    closed: bool = False

    def outcome(self, instance_id: str) -> tuple[bool | None, str | None]:
        """``(success, end reason)`` of one instance; ``(None, None)`` when not listed."""
        if instance_id in self.resolved:
            return True, None
        if instance_id in self.errored:
            return None, "crash"
        if instance_id in self.unresolved or self.closed:
            return False, None
        return None, None


REPORT_FAILED_KEYS = ("unresolved_ids", "empty_patch_ids")
"""Lists of a SWE-bench run report (``make_run_report``) whose instances failed."""
REPORT_ERROR_KEYS = ("error_ids",)
"""Lists of a SWE-bench run report whose instances could not be evaluated."""


def _ids(value: Any, where: str) -> frozenset[str]:
    items = expect_list(value, where)
    out = set()
    for index, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise RecordError(
                f"field '{where}[{index}]': expected an instance id, got {type_name(item)}"
            )
        out.add(str(item))
    return frozenset(out)


def results_from_value(value: Any, file: str) -> Results:
    """Interpret a parsed results file (see :func:`load_results` for the shapes)."""
    if isinstance(value, list):
        return Results(file, _ids(value, "resolved"), closed=True)
    data = expect_dict(value, "results")
    if "resolved_ids" in data:
        failed: set[str] = set()
        for key in REPORT_FAILED_KEYS:
            if data.get(key) is not None:
                failed |= _ids(data[key], key)
        errored: set[str] = set()
        for key in REPORT_ERROR_KEYS:
            if data.get(key) is not None:
                errored |= _ids(data[key], key)
        return Results(file, _ids(data["resolved_ids"], "resolved_ids"), frozenset(failed),
                       frozenset(errored))
    if "resolved" in data and isinstance(data["resolved"], list):
        others: set[str] = set()
        for key, item in data.items():
            if key != "resolved" and isinstance(item, list):
                others |= _ids(item, key)
        resolved = _ids(data["resolved"], "resolved")
        return Results(file, resolved, frozenset(others - resolved), closed=True)
    resolved_set: set[str] = set()
    unresolved_set: set[str] = set()
    for key, report in data.items():
        if not isinstance(report, dict) or not isinstance(report.get("resolved"), bool):
            raise RecordError(
                f"field '{key}': expected a report with a boolean 'resolved' (a results file "
                "is a SWE-bench run report with 'resolved_ids', an object with a 'resolved' "
                "list, a JSON array of resolved ids, or per-instance reports)"
            )
        (resolved_set if report["resolved"] else unresolved_set).add(str(key))
    return Results(file, frozenset(resolved_set), frozenset(unresolved_set))


def load_results(path: Path | None, options: ReadOptions) -> Results | None:
    """The results file of ``--results``, or ``None`` when none was given.

    Shapes read: a SWE-bench run report (``resolved_ids``, ``unresolved_ids``,
    ``empty_patch_ids``, ``error_ids``... as ``swebench.harness.reporting.make_run_report``
    writes it); an object with a ``resolved`` list (older SWE-bench ``results.json``, whose
    other lists count as not resolved); a JSON array of resolved ids (every other instance
    failed); per-instance reports ``{id: {"resolved": bool, ...}}`` (the harness's
    ``report.json``).

    Raises:
        RecordError: naming the results file when it cannot be read or has another shape.
    """
    if path is None:
        return None
    path = Path(path)
    if not path.is_file():
        raise RecordError("no such results file (--results)", file=str(path), line=1)
    try:
        return results_from_value(load_document(path, options), str(path))
    except RecordError as err:
        raise err.located(str(path), 1) from None


def first_key(data: Mapping[str, Any], keys: Iterable[str]) -> Any:
    """The value of the first of ``keys`` that ``data`` holds (not null), else None."""
    for key in keys:
        if data.get(key) is not None:
            return data[key]
    return None


def read_one_document(
    path: Path,
    options: ReadOptions,
    build: Callable[[Any, Results | None], Trajectory],
) -> Iterator[Trajectory | RecordError]:
    """The read loop of a format that is one JSON document per file, with ``--results``.

    Loads the results file (when given) and the document, then yields ``build(document,
    results)`` or the RecordError of whatever failed, located at the file's line 1.
    """
    file = str(path)
    try:
        results = load_results(options.results, options)
        document = load_document(path, options)
    except RecordError as err:
        yield err.located(file, 1)
        return
    yield guard(file, 1, lambda: build(document, results))
