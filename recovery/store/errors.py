"""What a failed ingest raises."""

from __future__ import annotations


class IngestError(RuntimeError):
    """Ingest of a file failed; the store is unchanged. The message names file and line."""
