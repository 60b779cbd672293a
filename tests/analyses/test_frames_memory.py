"""analyses.frames.trajectories_frame keeps its string columns compact (no Python objects):
the report holds one row per trajectory, millions at 100M turns."""

from __future__ import annotations


def test_trajectory_frame_string_columns_are_not_python_objects(tau_airline, con,
                                                                memory_store) -> None:
    from analyses.frames import trajectories_frame
    from recovery.store import IngestOptions

    memory_store.ingest_file(tau_airline, IngestOptions(mark=False))
    frame = trajectories_frame(con)
    assert len(frame) > 10
    usage = frame.memory_usage(deep=True)
    for column in ("traj_id", "run", "task_id", "end_reason"):
        longest = int(frame[column].str.len().max())
        # an Arrow string costs its characters and an offset; a Python str about 50 bytes more
        assert usage[column] / len(frame) <= longest + 16, column
        assert frame[column].dtype != object, column
