"""What every reader is and is told: :class:`Reader`, :class:`ReadOptions`, the limits."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from recovery.errors import UsageProblem
from recovery.schema import SUCCESS_THRESHOLD, RecordError, Trajectory

DEFAULT_MAX_RECORD_BYTES = 512 * 1024 * 1024
"""Largest single record (line or document) a reader accepts before reporting it as oversized."""

@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What every reader is told.

    Attributes:
        run: Run label that overrides the data's own (``--run``); ``None`` keeps the data's.
        success_threshold: A reward at or above it is a success where the format has no flag.
        max_record_bytes: A larger record is reported as oversized, naming file and line.
        inspect_success: Score values that count as success for Inspect logs.
        inspect_scorer: The Inspect scorer whose value decides success; ``None`` = the
            sample's first scorer.
        results: A results file that decides success for formats whose trajectories carry
            no outcome (e.g. the resolved-instance list a SWE-bench harness writes for
            SWE-agent trajectories); ``None`` = the outcome stays unknown.
    """

    run: str | None = None
    success_threshold: float = SUCCESS_THRESHOLD
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    inspect_success: tuple[str, ...] = ("C", "1", "1.0", "True", "true", "correct")
    inspect_scorer: str | None = None
    results: Path | None = None


ReadResult = Iterator[Trajectory | RecordError]


@dataclass(frozen=True, slots=True)
class Reader:
    """A registered format.

    Attributes:
        name: The name users pass to ``--format``.
        description: One line for ``--help`` and error messages.
        sniff: Given the path and the first bytes of the (decompressed) file, say whether the
            file is in this format. Cheap and conservative. For a ``directory`` format it is
            given the directory and ``b""``.
        read: Read the whole file (or directory).
        directory: The format's input is a directory (e.g. a BALROG episode folder), not a
            file; ingest then hashes every file below it.
    """

    name: str
    description: str
    sniff: Callable[[Path, bytes], bool]
    read: Callable[[Path, ReadOptions], ReadResult]
    directory: bool = False


class UnknownFormatError(UsageProblem):
    """The format could not be detected or the name is not registered (``--format`` fixes it)."""


