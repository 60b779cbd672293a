"""Fixtures shared by the whole suite."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from recovery.store import Store

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
TAU_AIRLINE = SHARED_DATA / "tau-bench" / "gpt-4o-airline.json"


def simulated_store(config, path: str | Path | None = None) -> Store:
    """A store (in memory, or the DuckDB file ``path``) holding every run of a simulator config.

    Args:
        config: A :class:`recovery.simulate.SimConfig`.
        path: The store file; ``None`` = in memory.

    Returns:
        The open store; the caller closes it.
    """
    from recovery.simulate import simulate
    from recovery.store import open_store

    store = open_store(path)
    for trajectories in simulate(config).values():
        store.ingest_trajectories(trajectories)
    return store


@pytest.fixture
def tau_airline() -> Path:
    """The real tau-bench airline trajectories (skips when ../shared/data is absent)."""
    if not TAU_AIRLINE.exists():
        pytest.skip(f"real data not found at {TAU_AIRLINE} (../shared/data is absent)")
    return TAU_AIRLINE


@pytest.fixture
def memory_store():
    """A fresh in-memory store: write through its methods, read through ``con``."""
    from recovery.store import open_store

    store = open_store(None)
    yield store
    store.close()


@pytest.fixture
def con(memory_store):
    """The connection of :func:`memory_store` (the same tables), for reading."""
    return memory_store.con
