"""What a failed ingest raises, and what a store raises for a write its kind does not do."""

from __future__ import annotations

from recovery.errors import InputProblem


class IngestError(InputProblem):
    """Ingest of a file failed; the store is unchanged. The message names file and line."""


class WriteRefused(InputProblem):
    """A write this kind of store does not do; :attr:`recovery.store.Store.refused` lists them,
    with the reason. The store is unchanged."""
