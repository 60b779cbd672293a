"""Helpers shared by the reader tests of this folder."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recovery.formats import ReadOptions, read_file
from recovery.schema import RecordError, Trajectory

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "formats"


def read_items(path: Path, fmt: str | None = None, **options: Any) -> list[Any]:
    """Everything the reader yields for ``path`` (trajectories and record errors)."""
    return list(read_file(path, fmt, ReadOptions(**options)))


def read_ok(path: Path, fmt: str | None = None, **options: Any) -> list[Trajectory]:
    """The trajectories of a file that must have no bad records."""
    items = read_items(path, fmt, **options)
    errors = [i for i in items if isinstance(i, RecordError)]
    assert not errors, errors
    return items


def only_error(items: list[Any]) -> RecordError:
    """The one record error among ``items``."""
    errors = [i for i in items if isinstance(i, RecordError)]
    assert len(errors) == 1, items
    return errors[0]


def write_json(path: Path, value: Any, *, indent: int | None = 2) -> Path:
    """``value`` as JSON text at ``path`` (folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=indent, ensure_ascii=False), encoding="utf-8")
    return path


def load_fixture(name: str) -> Any:
    """A JSON fixture of ``tests/fixtures/formats``, parsed."""
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def store_kinds(path: Path, **options: Any) -> dict[tuple[str, int], str | None]:
    """``{(task_id, t): error_kind}`` after ingesting ``path`` into a fresh store."""
    from recovery.store import IngestOptions, open_store

    store = open_store(None)
    try:
        store.ingest_file(path, IngestOptions(**options))
        rows = store.con.execute(
            "SELECT task_id, sample, t, error_kind FROM turns JOIN trajectories USING (traj_id)"
        ).fetchall()
    finally:
        store.close()
    return {(f"{task}#{sample}", t): kind for task, sample, t, kind in rows}


class Blocked(BaseException):
    """Raised by :func:`deadline`; not an OSError, so no reader's ``except OSError`` eats it."""


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the body runs longer than ``seconds``."""

    def expire(signum: int, frame: Any) -> None:
        raise Blocked(f"still running after {seconds} s: a reader blocked")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
