"""Fixtures shared by the whole suite."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
TAU_AIRLINE = SHARED_DATA / "tau-bench" / "gpt-4o-airline.json"


@pytest.fixture
def tau_airline() -> Path:
    """The real tau-bench airline trajectories (skips when ../shared/data is absent)."""
    if not TAU_AIRLINE.exists():
        pytest.skip(f"real data not found at {TAU_AIRLINE} (../shared/data is absent)")
    return TAU_AIRLINE


@pytest.fixture
def con():
    """A fresh in-memory store."""
    from recovery.store import connect

    connection = connect(None)
    yield connection
    connection.close()
