"""``budgetmix assign`` reads its dataset a bounded piece at a time and writes safely.

A Parquet dataset of a few KB can decode to gigabytes (one long string that every row refers
to); a JSON Lines row can be any length. assign streams both under ``--max-record-mb`` and a
batch budget, and writes through a unique temporary file that it removes when it fails.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analyses.budgetmix import assign_stream
from analyses.budgetmix.assign import AssignOptions, assign_budgets
from analyses.budgetmix.schedule import mixture_schedule
from recovery.errors import InputProblem
from recovery.formats import parquet_budget

MB = 1024 * 1024


def shared_value_dataset(path: Path, value_bytes: int, rows: int) -> Path:
    """A verl-like Parquet dataset whose ``prompt`` is one string every row refers to
    (dictionary-encoded: tiny on disk, ``rows * value_bytes`` decoded)."""
    prompt = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()),
                                            pa.array(["p" * value_bytes], pa.string()))
    table = pa.table({"prompt": prompt, "index": pa.array(range(rows))})
    pq.write_table(table, path, compression="zstd", store_schema=False)
    return path


def _leftovers(folder: Path, *expected: str) -> list[str]:
    return sorted(set(os.listdir(folder)) - set(expected))


def test_a_parquet_row_over_the_limit_is_refused_by_file_and_row(tmp_path: Path) -> None:
    dataset = shared_value_dataset(tmp_path / "d.parquet", 2 * MB, 30)
    assert dataset.stat().st_size < 50_000
    out = tmp_path / "o.parquet"
    with pytest.raises(InputProblem) as err:
        assign_budgets(dataset, mixture_schedule([4], [1]), out, AssignOptions(max_record_bytes=MB))
    message = str(err.value)
    assert message.startswith(f"{dataset}: row 1 is larger than the limit of {MB} bytes")
    assert "--max-record-mb" in message and "\n" not in message
    assert _leftovers(tmp_path, "d.parquet") == []


def test_a_parquet_row_group_over_the_limit_is_refused_from_its_metadata(tmp_path: Path) -> None:
    dataset = tmp_path / "d.parquet"
    rows = [{"prompt": str(i) + "q" * (2 * MB)} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), dataset, use_dictionary=False)
    with pytest.raises(InputProblem, match=r"d\.parquet: row group 0 \(rows 1-3\) holds .*"
                                           r"--max-record-mb"):
        assign_budgets(dataset, mixture_schedule([4], [1]), tmp_path / "o.jsonl",
                       AssignOptions(max_record_bytes=MB))
    assert _leftovers(tmp_path, "d.parquet") == []


def test_a_jsonl_line_over_the_limit_is_refused_by_file_and_line(tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    lines = [json.dumps({"prompt": "a"}), json.dumps({"prompt": "b" * (2 * MB)})]
    dataset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputProblem) as err:
        assign_budgets(dataset, mixture_schedule([4], [1]), tmp_path / "o.parquet",
                       AssignOptions(max_record_bytes=MB))
    assert str(err.value).startswith(f"{dataset}:2: record is larger than the limit")
    assert "--max-record-mb" in str(err.value)
    assert _leftovers(tmp_path, "d.jsonl") == []


def test_pieces_draw_the_same_budgets_as_one_draw(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    schedule = mixture_schedule([2, 5, 9], [0.2, 0.3, 0.5])
    rows = [{"prompt": f"task {i}", "extra_info": {"index": i}} for i in range(500)]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    monkeypatch.setattr(assign_stream, "JSONL_CHUNK_BYTES", 300)  # about ten rows a chunk
    monkeypatch.setattr(parquet_budget, "BATCH_BYTES", 2000)
    expected = schedule.sample(np.random.default_rng(7), 500).tolist()
    from_jsonl = assign_budgets(jsonl, schedule, tmp_path / "a.parquet", AssignOptions(seed=7))
    from_parquet = assign_budgets(parquet, schedule, tmp_path / "b.jsonl", AssignOptions(seed=7))
    written = pq.read_table(from_jsonl.path)
    assert pq.ParquetFile(from_jsonl.path).metadata.num_row_groups > 10  # written in pieces
    assert written.column("max_turns").to_pylist() == expected
    assert written.column("prompt").to_pylist() == [r["prompt"] for r in rows]
    back = [json.loads(line) for line in from_parquet.path.read_text().splitlines()]
    assert [r["extra_info"]["max_turns"] for r in back] == expected
    assert [r["extra_info"]["index"] for r in back] == list(range(500))


def test_jsonl_to_parquet_keeps_keys_and_types_that_first_appear_late(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assign_stream, "JSONL_CHUNK_BYTES", 1)  # one row a chunk
    dataset = tmp_path / "d.jsonl"
    rows = [{"prompt": "a", "note": None}, {"prompt": "b", "note": "late", "score": 1.5}]
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = assign_budgets(dataset, mixture_schedule([3], [1]), tmp_path / "o.parquet").path
    table = pq.read_table(out)
    assert table.column("note").to_pylist() == [None, "late"]
    assert table.column("score").to_pylist() == [None, 1.5]


def test_a_link_at_the_old_temporary_name_is_not_followed(tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps({"prompt": "a"}) + "\n", encoding="utf-8")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me", encoding="utf-8")
    for name in ("o.jsonl", "o.parquet"):
        planted = tmp_path / f".{name}.tmp"
        planted.symlink_to(victim)
        result = assign_budgets(dataset, mixture_schedule([4], [1]), tmp_path / name)
        assert victim.read_text(encoding="utf-8") == "keep me"
        assert planted.is_symlink() and not result.path.is_symlink()
        assert result.n_rows == 1
    assert _leftovers(tmp_path, "d.jsonl", "victim.txt", "o.jsonl", "o.parquet",
                      ".o.jsonl.tmp", ".o.parquet.tmp") == []


@pytest.mark.parametrize("out_name", ["o.jsonl", "o.parquet"])
def test_a_failure_after_writing_began_leaves_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out_name: str) -> None:
    monkeypatch.setattr(assign_stream, "JSONL_CHUNK_BYTES", 1)
    dataset = tmp_path / "d.jsonl"
    rows = [{"prompt": str(i)} for i in range(5)] + [{"prompt": "x", "extra_info": 3}]
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / out_name
    out.write_text("old", encoding="utf-8")
    with pytest.raises(InputProblem, match=r"d\.jsonl: row 6: extra_info is int"):
        assign_budgets(dataset, mixture_schedule([4], [1]), out)
    assert out.read_text(encoding="utf-8") == "old"
    assert _leftovers(tmp_path, "d.jsonl", out_name) == []


def test_a_parquet_failure_in_a_later_batch_leaves_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parquet_budget, "BATCH_BYTES", 100)
    dataset = tmp_path / "d.parquet"
    rows = [{"prompt": "p" * (1000 if i < 20 else 5000)} for i in range(21)]
    pq.write_table(pa.Table.from_pylist(rows), dataset, use_dictionary=False)
    with pytest.raises(InputProblem, match=r"row 21 is larger than the limit of 3000 bytes"):
        assign_budgets(dataset, mixture_schedule([4], [1]), tmp_path / "o.parquet",
                       AssignOptions(max_record_bytes=3000))
    assert _leftovers(tmp_path, "d.parquet") == []


_CHILD = """
import sys
def peak_mb():  # this process's own peak (ru_maxrss keeps the forking parent's)
    status = open('/proc/self/status').read().split('VmHWM:')[1]
    return int(status.split()[0]) // 1024
from analyses.budgetmix.assign import assign_budgets
from analyses.budgetmix.schedule import mixture_schedule
result = assign_budgets(sys.argv[1], mixture_schedule([4, 8], [1, 1]), sys.argv[2])
print(result.n_rows, peak_mb())
"""


def _run_capped(dataset: Path, out: Path, cap_bytes: int) -> tuple[int, int]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root), "ARROW_DEFAULT_MEMORY_POOL": "system"}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(dataset), str(out)],
                          capture_output=True, text=True, env=env, cwd=root, preexec_fn=cap,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    rows, peak_mb = map(int, done.stdout.split())
    return rows, peak_mb


@pytest.mark.skipif(sys.platform != "linux", reason="address-space limits as Linux sets them")
def test_a_tiny_parquet_dataset_that_decodes_to_gigabytes_streams_under_a_cap(
        tmp_path: Path) -> None:
    # 40 rows sharing a 20 MB prompt: 800 MB decoded, each row under the default limit
    dataset = shared_value_dataset(tmp_path / "d.parquet", 20 * MB, 40)
    assert dataset.stat().st_size < 50_000
    out = tmp_path / "o.parquet"
    rows, peak_mb = _run_capped(dataset, out, 1024 * MB)
    assert rows == 40 == pq.ParquetFile(out).metadata.num_rows
    assert peak_mb < 800  # about 580 MB measured; reading it whole took 1.7 GB
    first = pq.ParquetFile(out).read_row_group(0)
    assert first.column("prompt")[0].as_py() == "p" * (20 * MB)


@pytest.mark.skipif(sys.platform != "linux", reason="address-space limits as Linux sets them")
def test_a_large_jsonl_dataset_streams_under_a_cap(tmp_path: Path) -> None:
    dataset = tmp_path / "d.jsonl"
    line = json.dumps({"prompt": "r" * 2000, "extra_info": {"split": "train"}}) + "\n"
    with open(dataset, "w", encoding="utf-8") as fh:
        for _ in range(20):
            fh.write(line * 5000)  # 200 MB in all
    rows, peak_mb = _run_capped(dataset, tmp_path / "o.jsonl", 1024 * MB)
    assert rows == 100_000
    assert peak_mb < 250  # about 110 MB measured; reading it whole took 3 to 4 times that


@pytest.mark.parametrize("case", ["folder", "under-a-file"])
def test_the_output_path_is_checked_before_the_dataset_is_read(tmp_path: Path, case: str) -> None:
    from analyses.budgetmix.assign import AssignConfig, assign

    schedule = tmp_path / "schedule.json"
    mixture_schedule([4], [1]).save(schedule)
    dataset = tmp_path / "d.jsonl"
    dataset.write_text("not json at all\n")  # reading it would fail with another message
    if case == "folder":
        out = tmp_path / "o.jsonl"
        out.mkdir()
        fragment = "is a folder"
    else:
        (tmp_path / "plain").write_text("x")
        out = tmp_path / "plain" / "o.jsonl"
        fragment = "is a file, not a folder"
    with pytest.raises(InputProblem) as err:
        assign(AssignConfig(schedule=schedule, dataset=dataset, out=out))
    assert "--out" in str(err.value) and fragment in str(err.value)
