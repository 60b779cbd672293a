"""A store connection kept to a memory limit while an analysis reads it (:func:`memory_capped`).

DuckDB's default limit is 80% of the machine's memory, and what a query once took it keeps
from the system after the query ends, so on a large store the analysis would grow with the
turns. With a limit DuckDB's sorts, joins and aggregates work within it and spill the rest
to a temporary folder of their own, removed afterwards.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import duckdb

LIMIT = re.compile(r"^\s*\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)
"""What a limit looks like: a number and a unit, e.g. ``2GB`` or ``500 MiB``."""


FLUSH_THRESHOLD = "32MB"
"""After a task that took more than this, DuckDB hands freed memory back at once."""


def check_limit(limit: str, option: str = "--memory-limit") -> str:
    """``limit`` stripped, when it is a number with a unit of bytes.

    Raises:
        UsageProblem: naming ``option``, for anything else.
    """
    if not LIMIT.match(limit):
        raise UsageProblem(f"{option}: give a size such as 2GB or 500MB, got {limit!r}")
    return limit.strip()


@contextmanager
def memory_capped(con: duckdb.DuckDBPyConnection, limit: str | None,
                  option: str = "--memory-limit") -> Iterator[None]:
    """Within the block, DuckDB on ``con`` uses at most ``limit`` (``None``, or a connection
    whose configuration is locked, as a DuckDB file store's is: as it was) and
    spills past it to a temporary folder; after it, the memory settings are DuckDB's defaults
    again and the temp folder as it was (unless DuckDB spilled, which fixes it for the
    connection's life).

    Raises:
        UsageProblem: for a limit that is not a size, and when a query of the block needs
            more than the limit even with spilling (naming ``option`` to raise).
    """
    import duckdb

    if limit is not None:
        limit = check_limit(limit, option)
    locked = con.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]
    if limit is None or locked:  # a DuckDB file store's settings are fixed when it opens
        yield
        return
    temp_before = con.execute("SELECT current_setting('temp_directory')").fetchall()[0][0]
    with tempfile.TemporaryDirectory(prefix="recovery-spill-") as spill:
        con.execute("SET temp_directory = ?", [spill])
        con.execute(f"SET memory_limit = '{limit}'")  # checked above; SET takes no parameter
        # What a query freed goes back to the system between queries, not kept for the next
        # one: with the limit, at 100M turns the peak up to the statistics went 4.3 -> 2.8 GB.
        con.execute("SET allocator_background_threads = true")
        con.execute(f"SET allocator_flush_threshold = '{FLUSH_THRESHOLD}'")
        try:
            yield
        except duckdb.OutOfMemoryException:
            raise UsageProblem(
                f"the store's queries need more memory than {option} {limit} gives DuckDB; "
                f"give it more (e.g. {option} 8GB)") from None
        finally:
            for name in ("memory_limit", "allocator_background_threads",
                         "allocator_flush_threshold"):
                con.execute(f"RESET {name}")
            # DuckDB keeps a temp folder once it has spilled there
            with contextlib.suppress(duckdb.NotImplementedException):
                con.execute("SET temp_directory = ?", [temp_before])
