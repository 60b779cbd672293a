"""The memory cap an analysis puts on its store connection (recovery.store.memory_cap)."""

from __future__ import annotations

import duckdb
import pytest

from recovery.errors import UsageProblem
from recovery.store.memory_cap import check_limit, memory_capped


def _settings(con: duckdb.DuckDBPyConnection) -> tuple:
    return con.execute("SELECT current_setting('memory_limit'), "
                       "current_setting('allocator_background_threads'), "
                       "current_setting('allocator_flush_threshold')").fetchall()[0]


@pytest.mark.parametrize("limit", ["2GB", "500 MB", "1.5GiB", " 64mb "])
def test_sizes_are_taken(limit: str) -> None:
    assert check_limit(limit) == limit.strip()


@pytest.mark.parametrize("limit", ["", "2", "lots", "2GB; SET threads=1", "-1GB"])
def test_other_text_is_refused_naming_the_option(limit: str) -> None:
    with pytest.raises(UsageProblem, match="--memory-limit: give a size"):
        check_limit(limit)


def test_the_limit_holds_inside_and_the_defaults_come_back_after() -> None:
    con = duckdb.connect()
    before = _settings(con)
    con.execute("SET memory_limit = '5GB'")
    with memory_capped(con, "300MB"):
        limit, background, _ = _settings(con)
        assert limit.replace(" ", "") in {"300.0MB", "286.1MiB"}
        assert background is True
    assert _settings(con) == before


def test_none_leaves_the_connection_as_it_is() -> None:
    con = duckdb.connect()
    before = _settings(con)
    with memory_capped(con, None):
        assert _settings(con) == before


def test_a_locked_connection_is_left_as_it_is() -> None:
    con = duckdb.connect()
    con.execute("SET lock_configuration = true")
    before = _settings(con)
    with memory_capped(con, "300MB"):
        assert _settings(con) == before


def test_a_query_past_the_limit_says_which_option_to_raise() -> None:
    con = duckdb.connect()
    # A hash aggregate of 4M distinct wide keys, with no room to spill into (256 kB).
    with (pytest.raises(UsageProblem, match="more memory than --memory-limit 1MB"),
          memory_capped(con, "1MB")):
        con.execute("SELECT count(*) FROM (SELECT DISTINCT repeat('x', 40) || i::VARCHAR "
                    "FROM range(4000000) t(i))").fetchall()
    assert con.execute("SELECT 1").fetchall() == [(1,)]  # the connection is still usable
