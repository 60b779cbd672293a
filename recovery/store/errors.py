"""What a failed ingest raises."""

from __future__ import annotations

from recovery.errors import InputProblem


class IngestError(InputProblem):
    """Ingest of a file failed; the store is unchanged. The message names file and line."""
