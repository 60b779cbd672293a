"""The ART reader under ``--max-record-mb``: Parquet rows are measured before they are decoded.

A Parquet file can be a few KB on disk and gigabytes in memory (one long, repetitive string
that every row refers to through a dictionary). The reader reports a row over the limit, and
a row group over it per row, naming file and row, and reads the rest within a bounded memory.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from recovery.schema import RecordError, Trajectory

from ._support import read_items
from .test_art import row, v2_schema

MB = 1024 * 1024


def shared_metadata_file(path: Path, value_bytes: int, rows: int) -> Path:
    """An ART file whose ``metadata`` is one JSON object of ``value_bytes`` that every row
    refers to (dictionary-encoded: tiny on disk, ``rows * value_bytes`` decoded)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    metadata = json.dumps({"task_id": "t", "pad": "a" * value_bytes})
    base = pa.Table.from_pylist([row(trajectory_index=i) for i in range(rows)],
                                schema=v2_schema())
    shared = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()),
                                            pa.array([metadata], pa.string()))
    index = base.schema.get_field_index("metadata")
    # the Arrow schema is not stored: the file reads back as plain strings, as a hostile
    # writer's would
    pq.write_table(base.set_column(index, "metadata", shared), path, compression="zstd",
                   store_schema=False)
    return path


def test_a_row_over_the_limit_is_named_and_the_others_are_read(tmp_path: Path) -> None:
    path = tmp_path / "wide.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [row(trajectory_index=i, metadata=json.dumps({"pad": "b" * (3 * MB if i == 1 else 10)}))
            for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows, schema=v2_schema()), path, compression="zstd")
    items = read_items(path, "art", max_record_bytes=2 * MB)
    assert [type(i) for i in items] == [Trajectory, RecordError, Trajectory]
    error = items[1]
    assert (error.file, error.line) == (str(path), 2)
    assert "larger than the limit of 2097152 bytes" in error.message
    assert "--max-record-mb" in error.message
    assert [t.source_line for t in items if isinstance(t, Trajectory)] == [1, 3]


def test_shared_values_count_in_every_row_that_refers_to_them(tmp_path: Path) -> None:
    path = shared_metadata_file(tmp_path / "shared.parquet", 2 * MB, 30)
    assert path.stat().st_size < 100_000
    items = read_items(path, "art", max_record_bytes=MB)
    assert len(items) == 30 and all(isinstance(i, RecordError) for i in items)
    assert [(i.file, i.line) for i in items] == [(str(path), n) for n in range(1, 31)]
    assert all("--max-record-mb" in i.message for i in items)


def test_a_row_group_over_the_limit_per_row_is_refused_from_its_metadata(
        tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "groups.parquet"
    big = [row(trajectory_index=i, metadata=json.dumps({"pad": "c" * (2 * MB)}))
           for i in range(3)]
    small = [row(trajectory_index=3 + i) for i in range(2)]
    with pq.ParquetWriter(path, v2_schema(), compression="zstd", use_dictionary=False) as out:
        out.write_table(pa.Table.from_pylist(big, schema=v2_schema()))
        out.write_table(pa.Table.from_pylist(small, schema=v2_schema()))
    items = read_items(path, "art", max_record_bytes=MB)
    error, *rest = items
    assert isinstance(error, RecordError) and (error.file, error.line) == (str(path), 1)
    assert "row group 0 (rows 1-3)" in error.message and "--max-record-mb" in error.message
    assert [(type(t), t.source_line) for t in rest] == [(Trajectory, 4), (Trajectory, 5)]


def test_metadata_that_understates_the_rows_is_refused(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from recovery.formats import parquet_budget

    path = tmp_path / "lies.parquet"
    rows = [row(trajectory_index=i, metadata=json.dumps({"pad": str(i) + "d" * 200_000}))
            for i in range(20)]
    pq.write_table(pa.Table.from_pylist(rows, schema=v2_schema()), path, use_dictionary=False)
    assert len(read_items(path, "art")) == 20
    # a forged footer: the declared size says nothing, what is read says 4 MB
    monkeypatch.setattr(parquet_budget, "declared_bytes", lambda file, group: 20)
    (error,) = read_items(path, "art")
    assert (error.file, error.line) == (str(path), 1)
    assert "declares 20 bytes uncompressed" in error.message
    assert "metadata is wrong" in error.message


def test_row_sizes_count_dictionaries_lists_maps_and_structs() -> None:
    import pyarrow as pa

    from recovery.formats.parquet_budget import row_sizes

    value = pa.array(["x" * 1000], pa.string())
    refs = pa.DictionaryArray.from_arrays(pa.array([0] * 7, pa.int32()), value)
    listed = pa.ListArray.from_arrays(pa.array([0, 5, 5, 7], pa.int32()), refs)
    mapped = pa.array([[("k", "v" * 300)], None, []], pa.map_(pa.string(), pa.string()))
    nested = pa.array([{"a": "y" * 50, "b": 1}, None, {"a": None, "b": 2}])
    batch = pa.RecordBatch.from_arrays([listed, mapped, nested], ["l", "m", "s"])
    sizes = row_sizes(batch)
    assert sizes[0] >= 5 * 1000 + 300 + 50 and sizes[0] < 5 * 1000 + 300 + 50 + 200
    assert sizes[1] < 100  # null list, null map, null struct
    assert 2 * 1000 <= sizes[2] < 2 * 1000 + 100
    sliced = row_sizes(batch.slice(2, 1))
    assert np.allclose(sliced, sizes[2:])


_CHILD = """
import sys
def peak_mb():  # this process's own peak (ru_maxrss keeps the forking parent's)
    status = open('/proc/self/status').read().split('VmHWM:')[1]
    return int(status.split()[0]) // 1024
from pathlib import Path
from recovery.formats import ReadOptions, read_file
from recovery.schema import Trajectory
n = sum(isinstance(i, Trajectory) for i in read_file(Path(sys.argv[1]), "art", ReadOptions()))
print(n, peak_mb())
"""


def _capped(cap_bytes: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))
    return apply


@pytest.mark.skipif(sys.platform != "linux", reason="address-space limits as Linux sets them")
def test_a_tiny_file_that_decodes_to_gigabytes_streams_under_a_memory_cap(
        tmp_path: Path) -> None:
    # 40 rows sharing a 20 MB value: 800 MB decoded, each row under the default record limit
    # (the reader that fetched 256 rows at a time through DuckDB peaked at 2.5 GB on it)
    path = shared_metadata_file(tmp_path / "bomb.parquet", 20 * MB, 40)
    assert path.stat().st_size < 100_000
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root), "ARROW_DEFAULT_MEMORY_POOL": "system"}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True,
                          text=True, env=env, cwd=root, preexec_fn=_capped(1024 * MB),
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    count, peak_mb = map(int, done.stdout.split())
    assert count == 40
    assert peak_mb < 700  # about 370 MB measured
