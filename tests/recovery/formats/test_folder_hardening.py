"""Hostile folders and archives: readers read only what was asked, name the right file, and
never hang.

A BALROG folder is read only from the regular files inside it (no links, no named pipes, nothing
outside); an ATIF continuation is a bare file name beside the trajectory, refused with one
message whatever lies at the named place; an Inspect ``.eval`` whose entries overlap (a zip bomb)
or whose epoch is out of the store's range fails its own file; blank lines cost no per-line
work; SWE-agent and mini-swe-agent limits are whole numbers or the file is refused.
"""

from __future__ import annotations

import builtins
import copy
import gzip
import json
import os
import re
import struct
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from recovery.formats import detect_format
from recovery.schema import RecordError, Trajectory
from recovery.store import IngestError, IngestOptions, open_store

from ._support import FIXTURES, deadline, load_fixture, only_error, read_items, write_json

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SECRET = "s3cret-marker-0x5f"
GOTO = "babyai/BabyAI-MixedTrainLocal-v0/goto/BabyAI-MixedTrainLocal-v0"
HEADER = "Step,Action,Reasoning,Observation,Reward,Done\n"
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")



def balrog_folder(tmp_path: Path) -> Path:
    """A copy of the BALROG fixture folder."""
    import shutil

    folder = tmp_path / "balrog-run"
    shutil.copytree(FIXTURES / "balrog", folder)
    return folder


def outside(tmp_path: Path) -> Path:
    """A folder beside the input holding files nobody asked to read."""
    place = tmp_path / "elsewhere"
    place.mkdir(exist_ok=True)
    (place / "passwd").write_text(f"root:x:0:0:{SECRET}:/root:/bin/bash\n", encoding="utf-8")
    (place / "episode.csv").write_text(HEADER + f'0,{SECRET},,seen,0.0,True\n', encoding="utf-8")
    (place / "summary.json").write_text(
        json.dumps({"task": "goto", "progression": 1.0, "episode_return": 1.0, "done": True,
                    "secret": SECRET}), encoding="utf-8")
    return place


def nothing_secret(items: list[Any]) -> None:
    """No trajectory and no message holds the outside files' marker."""
    for item in items:
        text = item.message if isinstance(item, RecordError) else json.dumps(
            [item.meta, [t.action for t in item.turns]], default=str)
        assert SECRET not in text, item


def errors_of(items: list[Any]) -> dict[str, str]:
    return {Path(e.file).name: e.message for e in items if isinstance(e, RecordError)}


# --------------------------------------------------------------------------------------------
# BALROG: links and files outside the folder


def test_symlinked_summary_is_refused_not_merged(tmp_path: Path) -> None:
    folder = balrog_folder(tmp_path)
    summary = folder / GOTO / "goto_run_01.json"
    summary.unlink()
    summary.symlink_to(outside(tmp_path) / "summary.json")
    items = read_items(folder, "balrog")
    nothing_secret(items)
    error = errors_of(items)["goto_run_01.json"]
    assert "is a symbolic link" in error and "regular files inside it" in error
    assert [e.file for e in items if isinstance(e, RecordError)] == [str(summary)]
    assert len([t for t in items if isinstance(t, Trajectory)]) == 2  # the other episodes


def test_symlinked_steps_file_is_refused_not_stored(tmp_path: Path) -> None:
    folder = balrog_folder(tmp_path)
    steps = folder / GOTO / "goto_run_02.csv"
    steps.symlink_to(outside(tmp_path) / "episode.csv")
    items = read_items(folder, "balrog")
    nothing_secret(items)
    assert "is a symbolic link" in errors_of(items)["goto_run_02.csv"]


def test_a_link_to_a_password_file_is_never_quoted(tmp_path: Path) -> None:
    folder = balrog_folder(tmp_path)
    steps = folder / GOTO / "goto_run_03.csv"
    steps.symlink_to(outside(tmp_path) / "passwd")
    items = read_items(folder, "balrog")
    nothing_secret(items)
    assert "root:x" not in errors_of(items)["goto_run_03.csv"]


def test_a_link_that_stays_inside_is_refused_too(tmp_path: Path) -> None:
    folder = balrog_folder(tmp_path)
    (folder / GOTO / "goto_run_04.csv").symlink_to(folder / GOTO / "goto_run_00.csv")
    assert "is a symbolic link" in errors_of(read_items(folder, "balrog"))["goto_run_04.csv"]


def test_a_linked_folder_is_not_followed(tmp_path: Path) -> None:
    folder = balrog_folder(tmp_path)
    away = outside(tmp_path) / "env" / "task"
    away.mkdir(parents=True)
    (away / "task_run_00.csv").write_text(HEADER + f"0,{SECRET},,o,0.0,True\n", encoding="utf-8")
    (folder / "linked-env").symlink_to(away.parent, target_is_directory=True)
    items = read_items(folder, "balrog")
    nothing_secret(items)
    assert len([t for t in items if isinstance(t, Trajectory)]) == 3


def test_header_of_another_shape_is_quoted_bounded_and_printable(tmp_path: Path) -> None:
    folder = balrog_folder(tmp_path)
    header = "\x1b]8;;http://x\x07" + ",".join(f"col{i}" for i in range(2000))
    (folder / GOTO / "goto_run_05.csv").write_text(header + "\n1,2\n", encoding="utf-8")
    error = errors_of(read_items(folder, "balrog"))["goto_run_05.csv"]
    assert "column 'Action' is missing" in error
    assert "\x1b" not in error and "\x07" not in error and len(error) < 400


def test_long_cell_is_quoted_bounded(tmp_path: Path) -> None:
    folder = balrog_folder(tmp_path)
    (folder / GOTO / "goto_run_06.csv").write_text(
        HEADER + "0,a,,o," + "9" * 5000 + "x,False\n", encoding="utf-8")
    error = errors_of(read_items(folder, "balrog"))["goto_run_06.csv"]
    assert "column 'Reward': expected a number" in error and len(error) < 400


# --------------------------------------------------------------------------------------------
# BALROG: named pipes and unreadable files


@needs_fifo
@pytest.mark.parametrize("name", ["goto_run_00.csv", "goto_run_00.json", "goto_run_07.csv"])
def test_a_named_pipe_in_the_folder_is_refused_without_opening_it(tmp_path: Path,
                                                                  name: str) -> None:
    folder = balrog_folder(tmp_path)
    pipe = folder / GOTO / name
    pipe.unlink(missing_ok=True)
    os.mkfifo(pipe)
    with deadline(5):
        assert detect_format(folder) == "balrog"
        items = read_items(folder, "balrog")
        store = open_store(None)
        try:
            with pytest.raises(IngestError, match="named pipe"):
                store.ingest_file(folder, IngestOptions())
        finally:
            store.close()
    assert "a named pipe (FIFO)" in errors_of(items)[name]


@needs_fifo
def test_a_named_pipe_first_in_the_folder_does_not_hang_detection(tmp_path: Path) -> None:
    folder = tmp_path / "only-pipe" / "env" / "task"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "task_run_00.csv")
    (folder / "task_run_01.csv").write_text(HEADER + "0,a,,o,0.0,True\n", encoding="utf-8")
    with deadline(5):
        assert detect_format(tmp_path / "only-pipe") == "balrog"


def _deny(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Opening a file called ``name`` fails as a file without read permission would (the tests
    may run as root, where chmod 000 does not stop reads)."""
    real_open, real_os_open = builtins.open, os.open

    def check(file: Any) -> None:
        if isinstance(file, (str, bytes, Path)) and Path(os.fsdecode(file)).name == name:
            raise PermissionError(13, "Permission denied", os.fsdecode(file))

    def fake_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        check(file)
        return real_open(file, *args, **kwargs)

    def fake_os_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        check(file)
        return real_os_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(os, "open", fake_os_open)


@pytest.mark.parametrize("name", ["goto_run_01.csv", "goto_run_01.json"])
def test_an_unreadable_episode_file_is_named_by_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    folder = balrog_folder(tmp_path)
    _deny(monkeypatch, name)
    error = only_error(read_items(folder, "balrog"))
    assert error.file == str(folder / GOTO / name)
    assert "cannot read the file" in error.message and "Permission denied" in error.message


def test_an_unreadable_episode_file_is_named_by_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = balrog_folder(tmp_path)
    _deny(monkeypatch, "goto_run_01.csv")
    store = open_store(None)
    try:
        (result,) = store.ingest_files([folder])
    finally:
        store.close()
    assert result.status == "failed"
    assert str(folder / GOTO / "goto_run_01.csv") in result.error


def test_a_folder_digest_reads_no_link_and_no_pipe(tmp_path: Path) -> None:
    """The sha256 of a folder input never follows a link out of it nor opens a named pipe:
    the link's target text counts, not the bytes behind it."""
    import os

    from recovery.store.digest import directory_digest

    folder = balrog_folder(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("one")
    os.symlink(secret, folder / "linked.txt")
    os.mkfifo(folder / "pipe")
    before = directory_digest(folder).sha256
    secret.write_text("two")                      # the bytes behind the link change
    assert directory_digest(folder).sha256 == before


# --------------------------------------------------------------------------------------------
# ATIF continuations


def atif(steps_text: str, **root: Any) -> dict[str, Any]:
    return {"schema_version": "ATIF-v1.4", "session_id": "s", "agent": {"name": "a"},
            "steps": [{"step_id": 1, "source": "agent", "message": steps_text}], **root}


def _hostile_refs(tmp_path: Path) -> dict[str, str]:
    """Refused continuation names, keyed by what they are; each beside ``tmp_path/run/t.json``."""
    away = tmp_path / "away"
    away.mkdir()
    write_json(away / "c.json", atif(SECRET, final_metrics={"secret": SECRET}))
    run = tmp_path / "run"
    run.mkdir()
    (run / "link.json").symlink_to(away / "c.json")
    (run / "sub").mkdir()
    write_json(run / "sub" / "c.json", atif(SECRET))
    refs = {
        "dotdot-existing": "../away/c.json",
        "dotdot-missing": "../away/nothing.json",
        "absolute-existing": str(away / "c.json"),
        "absolute-missing": str(away / "nothing.json"),
        "subfolder": "sub/c.json",
        "link-out": "link.json",
        "dot": ".",
        "dotdot": "..",
        "too-long": "x" * 5000,
        "missing": "missing.json",
        "nul": "a\x00b.json",
        "backslash": "..\\away\\c.json",
    }
    if hasattr(os, "mkfifo"):
        os.mkfifo(run / "pipe.json")
        refs["fifo"] = "pipe.json"
    return refs


def test_continuation_refs_are_bare_names_beside_the_file_refused_alike(tmp_path: Path) -> None:
    refs = _hostile_refs(tmp_path)
    messages = {}
    with deadline(10):
        for kind, ref in refs.items():
            path = write_json(tmp_path / "run" / f"t-{kind}.json",
                              atif("go", continued_trajectory_ref=ref))
            items = read_items(path, "atif")
            nothing_secret(items)
            error = only_error(items)
            assert (error.file, error.line) == (str(path), 1)
            messages[kind] = error.message
    # One message for every refusal: the same words whether or not the target exists.
    shapes = {re.sub(r"no such file .* beside", "no such file <ref> beside", m, flags=re.S)
              for m in messages.values()}
    assert len(shapes) == 1, messages
    assert len(messages["too-long"]) < 400
    assert "field 'continued_trajectory_ref'" in messages["missing"]


def test_a_bare_continuation_name_is_still_followed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_json(run / "t.cont-1.json", atif("second"))
    path = write_json(run / "t.json", atif("first", continued_trajectory_ref="t.cont-1.json"))
    (traj,) = read_items(path, "atif")
    assert [t.action for t in traj.turns] == ["first", "second"]


def test_a_long_continuation_name_fails_its_file_and_the_next_is_stored(tmp_path: Path) -> None:
    bad = write_json(tmp_path / "bad.json", atif("go", continued_trajectory_ref="x" * 5000))
    good = FIXTURES / "atif.json"
    store = open_store(None)
    try:
        first, second = store.ingest_files([bad, good])
        assert first.status == "failed" and f"{bad}:1: " in first.error
        assert "field 'continued_trajectory_ref'" in first.error
        assert second.status == "ingested" and second.n_trajectories == 1
    finally:
        store.close()


# --------------------------------------------------------------------------------------------
# Inspect .eval: epochs out of range, overlapping entries


def _eval_archive(path: Path, samples: dict[str, dict[str, Any]]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("header.json", json.dumps({"eval": {"task": "t", "model": "m"},
                                                    "version": 2}))
        for name, sample in samples.items():
            archive.writestr(name, json.dumps(sample))
    return path


def _sample(epoch: Any) -> dict[str, Any]:
    return {"id": 1, "epoch": epoch, "messages": [{"role": "user", "content": "q"},
                                                  {"role": "assistant", "content": "a"}]}


def test_an_epoch_past_the_store_range_fails_its_file_and_the_next_is_stored(
    tmp_path: Path
) -> None:
    bad = _eval_archive(tmp_path / "bad.eval", {"samples/1_epoch_1.json": _sample(2**40)})
    good = _eval_archive(tmp_path / "good.eval", {"samples/1_epoch_1.json": _sample(2)})
    store = open_store(None)
    try:
        first, second = store.ingest_files([bad, good])
        assert first.status == "failed", first
        assert f"{bad}:1: samples/1_epoch_1.json: field 'epoch'" in first.error
        assert "out of range" in first.error
        assert second.status == "ingested" and second.n_trajectories == 1
        assert store.con.execute("SELECT sample FROM trajectories").fetchall() == [(1,)]
    finally:
        store.close()


def _overlapping_zstd_archive(path: Path, copies: int, inflated: int) -> Path:
    """An .eval whose central directory lists ``copies`` zstd sample entries that all point at
    the same compressed bytes (the "overlapping files" zip bomb)."""
    import zstandard

    sample = json.dumps(_sample(1) | {"pad": "z" * inflated}).encode()
    frame = zstandard.ZstdCompressor().compress(sample)
    header = json.dumps({"eval": {"task": "t"}, "version": 2}).encode()
    out = bytearray()
    central = bytearray()

    def local(name: bytes, data: bytes, method: int, size: int) -> int:
        offset = len(out)
        out.extend(struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, method, 0, 0,
                               zipfile.crc32(data if method == 0 else sample) & 0xFFFFFFFF,
                               len(data), size, len(name), 0))
        out.extend(name + data)
        return offset

    def entry(name: bytes, offset: int, data: bytes, method: int, size: int, crc: int) -> None:
        central.extend(struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, method, 0, 0,
                                   crc, len(data), size, len(name), 0, 0, 0, 0, 0, offset))
        central.extend(name)

    h = local(b"header.json", header, 0, len(header))
    entry(b"header.json", h, header, 0, len(header), zipfile.crc32(header))
    name = b"samples/1_epoch_1.json"
    s = local(name, frame, 93, len(sample))
    for _ in range(copies):
        entry(name, s, frame, 93, len(sample), zipfile.crc32(sample))
    start = len(out)
    out.extend(central)
    out.extend(struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, copies + 1, copies + 1,
                           len(central), start, 0))
    path.write_bytes(bytes(out))
    return path


def test_overlapping_archive_entries_are_refused(tmp_path: Path) -> None:
    bomb = _overlapping_zstd_archive(tmp_path / "bomb.eval", copies=200, inflated=1 << 20)
    assert bomb.stat().st_size < 20_000
    store = open_store(None)
    try:
        started = time.perf_counter()
        result = store.ingest_file(bomb, IngestOptions(skip_bad=True))
        elapsed = time.perf_counter() - started
        assert result.n_trajectories == 0
        (skipped,) = result.skipped
        assert "entries overlap" in skipped.message and skipped.file == str(bomb)
        assert elapsed < 2.0
    finally:
        store.close()
    store = open_store(None)
    try:
        with pytest.raises(IngestError, match=r"bomb.eval:1: .*entries overlap"):
            store.ingest_file(bomb, IngestOptions(skip_bad=False))
    finally:
        store.close()


def test_an_archive_without_overlaps_is_still_read(tmp_path: Path) -> None:
    path = _overlapping_zstd_archive(tmp_path / "one.eval", copies=1, inflated=10)
    (traj,) = read_items(path, "inspect")
    assert isinstance(traj, Trajectory) and traj.n_turns == 1


# --------------------------------------------------------------------------------------------
# Blank lines cost no per-line work


def test_a_gzip_of_blank_lines_is_read_fast(tmp_path: Path) -> None:
    n = 16 << 20
    path = tmp_path / "blank.jsonl.gz"
    path.write_bytes(gzip.compress(b"\n" * n + b" \t\r\n" * 1000 + b"not json\n", 9))
    assert path.stat().st_size < 64_000
    started = time.perf_counter()
    items = read_items(path, "canonical")
    elapsed = time.perf_counter() - started
    error = only_error(items)
    assert error.line == n + 1000 + 1  # line numbers still count the skipped blank lines
    assert elapsed < 1.5, elapsed


def test_blank_lines_between_records_keep_their_numbers(tmp_path: Path) -> None:
    path = tmp_path / "gaps.jsonl"
    record = json.dumps({"task_id": "t", "success": True, "turns": []})
    path.write_bytes(b"\n \n" + record.encode() + b"\n\r\n\t\n   " + b"bad\n\n" + b"  bad2")
    items = read_items(path, "canonical")
    assert [e.line for e in items if isinstance(e, RecordError)] == [6, 8]
    assert [t.source_line for t in items if isinstance(t, Trajectory)] == [3]


# --------------------------------------------------------------------------------------------
# SWE-agent and mini-swe-agent limits


@pytest.mark.parametrize("value", [True, "250", -5, 2.5, [250]])
def test_minisweagent_step_limit_must_be_a_whole_number(tmp_path: Path, value: Any) -> None:
    data = copy.deepcopy(load_fixture("minisweagent.traj.json"))
    data["info"]["config"]["agent"]["step_limit"] = value
    path = write_json(tmp_path / "bad.traj.json", data)
    error = only_error(read_items(path, "minisweagent"))
    assert (error.file, error.line) == (str(path), 1)
    assert "field 'info.config.agent.step_limit': expected a whole number" in error.message


@pytest.mark.parametrize("value", [True, "75", -5, 2.5])
def test_sweagent_call_limit_must_be_a_whole_number(tmp_path: Path, value: Any) -> None:
    data = copy.deepcopy(load_fixture("sweagent.traj"))
    config = json.loads(data["replay_config"])
    config["agent"]["model"]["per_instance_call_limit"] = value
    data["replay_config"] = json.dumps(config)
    path = write_json(tmp_path / "bad.traj", data)
    error = only_error(read_items(path, "sweagent"))
    assert (error.file, error.line) == (str(path), 1)
    assert "field 'per_instance_call_limit': expected a whole number" in error.message


@pytest.mark.parametrize(("value", "budget"), [(250, 250), (0, None), (None, None), (30.0, 30)])
def test_whole_number_limits_give_the_budget(tmp_path: Path, value: Any, budget: Any) -> None:
    data = copy.deepcopy(load_fixture("minisweagent.traj.json"))
    data["info"]["config"]["agent"]["step_limit"] = value
    (traj,) = read_items(write_json(tmp_path / "ok.traj.json", data), "minisweagent")
    assert traj.budget == budget
