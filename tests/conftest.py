"""Fixtures shared by the whole suite."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
TAU_AIRLINE = SHARED_DATA / "tau-bench" / "gpt-4o-airline.json"


def simulated_store(config, path: str | Path | None = None):
    """A store (in memory, or the DuckDB file ``path``) holding every run of a simulator config.

    Args:
        config: A :class:`recovery.simulate.SimConfig`.
        path: The store file; ``None`` = in memory.

    Returns:
        The open connection; the caller closes it.
    """
    from recovery.simulate import simulate
    from recovery.store import open_store

    connection = open_store(path)
    for trajectories in simulate(config).values():
        connection.ingest_trajectories(trajectories)
    return connection


@pytest.fixture
def tau_airline() -> Path:
    """The real tau-bench airline trajectories (skips when ../shared/data is absent)."""
    if not TAU_AIRLINE.exists():
        pytest.skip(f"real data not found at {TAU_AIRLINE} (../shared/data is absent)")
    return TAU_AIRLINE


@pytest.fixture
def con():
    """A fresh in-memory store."""
    from recovery.store import open_store

    connection = open_store(None)
    yield connection
    connection.close()
