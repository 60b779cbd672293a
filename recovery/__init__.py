"""Trajectories in: formats, the canonical schema, the DuckDB store, error and recovery
marking, turn graphs, the simulator, and the ``recovery`` command line."""

__version__ = "0.1.0"
