"""Writing PRM step scores, to either kind of store."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


def replace_step_scores(con: duckdb.DuckDBPyConnection, scores: str, model: str) -> None:
    """Replace ``model``'s rows of ``step_scores`` for the trajectories in ``scores``, atomically.

    Args:
        con: The store.
        scores: A relation on ``con`` (a table, a view, or a registered Arrow table) with
            ``traj_id, t, score``.
        model: The model's name.

    A DuckDB store deletes and inserts in one transaction; a folder store rewrites the model's
    Parquet file whole and renames it over the old one.
    """
    from recovery.store.folder import folder_root, replace_folder_step_scores
    from recovery.store.ingest import in_transaction

    if folder_root(con) is not None:
        replace_folder_step_scores(con, scores, model)
        return

    def replace() -> None:
        con.execute(
            f"DELETE FROM step_scores WHERE model = ? AND traj_id IN "
            f"(SELECT DISTINCT traj_id FROM {scores})",
            [model],
        )
        con.execute(
            f"INSERT INTO step_scores SELECT traj_id, t, ?, score FROM {scores}", [model]
        )

    in_transaction(con, replace)
