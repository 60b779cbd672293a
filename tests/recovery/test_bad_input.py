"""Each bad input that once gave a traceback: now one clear `FILE:LINE: ...` line, exit 1,
and an unchanged store (or, for the odd files, a message that says what the file is)."""

from __future__ import annotations

import gzip
import json
import os
import zipfile
from pathlib import Path

import pytest

from recovery.store import IngestError, IngestOptions, open_store
from tests.cli_support import FORMAT_FIXTURES, canonical_store, copy_folder, refused
from tests.cli_support import run_cli as run

FIXTURES = FORMAT_FIXTURES


@pytest.fixture(scope="module")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store and its input, built once; each test gets a copy (see :func:`store`)."""
    folder = tmp_path_factory.mktemp("store")
    return canonical_store(folder)


@pytest.fixture
def store(store_template: Path, tmp_path: Path) -> Path:
    return copy_folder(store_template, tmp_path)


def record(**fields: object) -> dict:
    base = {"task_id": "t", "success": True, "turns": [{"action": "a", "observation": "o"}]}
    return base | fields


def write_lines(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ('{"task_id":"t","success":true,"turns":[{"action":"\\ud800","observation":""}]}',
         "lone UTF-16 surrogate"),
        ('{"task_id":"t","sample":1099511627776,"success":true,"turns":[]}', "out of range"),
        ('{"task_id":"t","budget":1099511627776,"success":true,"turns":[]}', "out of range"),
        ('{"task_id":"t","reward":NaN,"turns":[]}', "NaN is not a JSON number"),
        ('{"task_id":"t","reward":Infinity,"turns":[]}', "Infinity is not a JSON number"),
        ('{"task_id":"t","reward":1e400,"turns":[]}', "out of the range of a double"),
        ('{"task_id":"t","success":true,"turns":[],"meta":{"x":NaN}}', "NaN"),
    ],
    ids=["surrogate", "sample", "budget", "nan", "inf", "overflow", "nan-in-meta"],
)
def test_bad_values_every_path(store: Path, tmp_path: Path, suffix: str, text: str,
                               expect: str) -> None:
    """The fast path (plain .jsonl), the Python reader and the .gz path agree: refused."""
    path = tmp_path / f"bad{suffix}"
    good = json.dumps(record(task_id="ok"))
    content = good + "\n" + text + "\n"
    if suffix.endswith(".gz"):
        path.write_bytes(gzip.compress(content.encode()))
    else:
        path.write_text(content)
    message = refused(store, path)
    assert f"{path}:2: " in message and expect in message


def test_deep_nesting_is_refused_by_both_paths(store: Path, tmp_path: Path) -> None:
    deep = '{"k":' * 10_000 + "1" + "}" * 10_000
    text = '{"task_id":"t","success":true,"turns":[],"meta":' + deep + "}"
    for name in ("deep.jsonl", "deep2.jsonl.gz"):
        path = tmp_path / name
        data = (json.dumps(record()) + "\n" + text + "\n").encode()
        path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        message = refused(store, path)
        assert f"{path}:2: " in message and "levels deep; the limit is 256" in message


def test_shallow_but_bracket_heavy_records_still_take_the_fast_path(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """Many turns mean many brackets, not depth: such a file is stored, by DuckDB itself."""
    import recovery.store.ingest as store_module

    def forbidden(*args, **kwargs):
        raise AssertionError("the Python reader was used")

    monkeypatch.setattr(store_module, "_write_trajectories", forbidden)
    turns = [{"action": f"a{i}", "observation": "o", "meta": {"k": [i]}} for i in range(300)]
    path = write_lines(tmp_path / "long.jsonl", [json.dumps(record(turns=turns))])
    con = open_store(None)
    assert con.ingest_file(path).n_turns == 300


def test_surrogates_for_every_json_reader(store: Path, tmp_path: Path) -> None:
    for fixture, word in (("openai.jsonl", "hello"), ("taubench.json", "hello"),
                          ("agentprocessbench.jsonl", "step one"), ("inspect.json", "question 1"),
                          ("canonical.jsonl", "Buy a lamp")):
        text = (FIXTURES / fixture).read_text(encoding="utf-8")
        bad = tmp_path / fixture
        bad.write_text(text.replace(word, word[:2] + "\\ud800" + word[2:]))
        assert bad.read_text() != text
        message = refused(store, bad)
        assert "surrogate" in message and f"{bad}:" in message


def test_a_record_duckdb_quotes_in_a_cut_message_is_still_a_clean_error(
        store: Path, tmp_path: Path) -> None:
    # DuckDB's message about a line that is not an object quotes the line, cut after some
    # bytes; cut inside a multi-byte character it is not UTF-8 and Python cannot decode it.
    lines = (FIXTURES / "canonical.jsonl").read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "cut.jsonl"
    first = json.dumps('0000""\x1f\x1f\x1f\x1f\x0b\x07\x80\x80\x80')
    bad.write_text("\n".join([first, *lines[1:]]) + "\n", encoding="utf-8")
    message = refused(store, bad, "--format", "canonical")
    assert f"{bad}:1: " in message and "JSON object" in message


def test_inspect_scores_nan_and_inf_are_refused(store: Path, tmp_path: Path) -> None:
    text = (FIXTURES / "inspect.json").read_text()
    for token in ("NaN", "Infinity"):
        bad = tmp_path / f"{token}.json"
        bad.write_text(text.replace('"value": "C"', f'"value": {token}', 1))
        message = refused(store, bad)
        assert f"{token} is not a JSON number" in message


def test_skip_bad_skips_never_crashes(store: Path, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "mixed.jsonl", [
        json.dumps(record(task_id="a")),
        '{"task_id":"b","sample":1099511627776,"success":true,"turns":[]}',
        '{"task_id":"c","success":true,"turns":[{"action":"\\ud800","observation":""}]}',
        json.dumps(record(task_id="d")),
    ])
    result = run("ingest", path, "--store", store, "--skip-bad")
    assert result.exit_code == 0, result.output
    assert "2 trajectories" in result.stdout and "2 bad records skipped" in result.stdout
    assert f"{path}:2:" in result.stderr and f"{path}:3:" in result.stderr


# --------------------------------------------------------------------------------------------
# Several files, odd files


def test_one_bad_file_does_not_stop_the_others(store: Path, tmp_path: Path) -> None:
    good = write_lines(tmp_path / "good.jsonl", [json.dumps(record(task_id="g"))])
    bad = write_lines(tmp_path / "bad.jsonl", ['{"task_id": "x", "turns": 3}'])
    later = write_lines(tmp_path / "later.jsonl", [json.dumps(record(task_id="l"))])
    result = run("ingest", good, bad, later, "--store", store)
    assert result.exit_code == 1
    assert f"{good}: 1 trajectories" in result.stdout
    assert f"{later}: 1 trajectories" in result.stdout
    assert f"error: {bad}:1: " in result.stderr
    assert "1 of 3 files failed" in result.stderr


def test_analyze_reports_every_bad_file_and_exits_non_zero(tmp_path: Path) -> None:
    bad1 = write_lines(tmp_path / "b1.jsonl", ['{"task_id": "x", "turns": 3}'])
    bad2 = write_lines(tmp_path / "b2.jsonl", ['not json'])
    good = write_lines(tmp_path / "g.jsonl", [json.dumps(record(task_id="g"))])
    result = run("analyze", bad1, good, bad2, "--n-boot", "0")
    assert result.exit_code == 1
    assert f"{bad1}:1: " in result.stderr and f"{bad2}: could not detect" in result.stderr
    assert "2 of 3 input files could not be ingested" in result.stderr


def test_wrong_format_leaves_no_empty_store(tmp_path: Path) -> None:
    store = tmp_path / "new.duckdb"
    result = run("ingest", FIXTURES / "canonical.jsonl", "--store", store, "--format", "taubench")
    assert result.exit_code == 1
    assert not store.exists() and "not created" in result.stderr


def test_garbage_gz_says_it_is_not_gzip(store: Path, tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl.gz"
    path.write_bytes(b"this is plain text, not gzip\n")
    message = refused(store, path)
    assert "not gzip data" in message and "1f 8b" in message


def test_truncated_gz_names_the_line(store: Path, tmp_path: Path) -> None:
    lines = "".join(json.dumps(record(task_id=f"t{i}")) + "\n" for i in range(200))
    data = gzip.compress(lines.encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    message = refused(store, path)
    assert f"{path}:" in message and "cannot read the file past line" in message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_fifo_and_device_say_what_they_are(store: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    assert "a named pipe (FIFO)" in refused(store, fifo)
    assert "a character device" in refused(store, Path("/dev/null"))


def test_inputs_of_the_same_name_are_two_runs_not_duplicates(tmp_path: Path) -> None:
    """Two files called base.jsonl in two folders were refused as duplicates of one run; they
    are two runs, named by their folders (the refusal, where names still collide, is tested
    with the groups)."""
    one = tmp_path / "a" / "base.jsonl"
    two = tmp_path / "b" / "base.jsonl"
    for path in (one, two):
        path.parent.mkdir()
        write_lines(path, [json.dumps(record(task_id="t", sample=0, success=path == one))])
    result = run("analyze", one, two, "--n-boot", "0")
    assert result.exit_code == 0, result.output
    assert "a/base" in result.stdout and "b/base" in result.stdout


# --------------------------------------------------------------------------------------------
# Decompression limits


def test_eval_zstd_entry_without_content_size_is_capped(tmp_path: Path) -> None:
    """A zstd sample that declares a small size but inflates far past --max-record-mb."""
    import zstandard

    big = b'{"id": 1, "messages": [], "pad": "' + b"x" * (8 << 20) + b'"}'
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(big)
    path = tmp_path / "bomb.eval"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("header.json", json.dumps({"eval": {"task": "t"}, "version": 2}))
        info = zipfile.ZipInfo("samples/1_epoch_1.json")
        archive.writestr(info, b"")
    # Re-write the entry as method 93 (zstd) with a small declared size, as a crafted log would.
    _replace_with_zstd(path, "samples/1_epoch_1.json", frame, declared_size=100)
    con = open_store(None)
    with pytest.raises(IngestError, match=r"bomb.eval:1: .*inflates to more than the limit"):
        con.ingest_file(path, IngestOptions(max_record_bytes=1 << 20))


def test_deflate_header_bomb_is_capped(tmp_path: Path) -> None:
    header = b'{"eval": {"task": "t"}, "version": 2, "pad": "' + b" " * (8 << 20) + b'"}'
    path = tmp_path / "bomb2.eval"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("header.json", header)
    con = open_store(None)
    with pytest.raises(IngestError, match=r"header.json: inflates to more than the limit"):
        con.ingest_file(path, IngestOptions(max_record_bytes=1 << 20))


def test_gzip_json_document_is_capped(tmp_path: Path) -> None:
    doc = json.dumps([{"task_id": 1, "trial": 0, "reward": 1.0, "traj": [],
                       "pad": "y" * (4 << 20)}]).encode()
    path = tmp_path / "tau.json.gz"
    path.write_bytes(gzip.compress(doc))
    con = open_store(None)
    with pytest.raises(IngestError, match="larger than the limit"):
        con.ingest_file(path, IngestOptions(format="taubench", max_record_bytes=1 << 20))


def _replace_with_zstd(path: Path, name: str, frame: bytes, declared_size: int) -> None:
    """Rewrite one stored entry of a zip as zstd (method 93) with a chosen declared size."""
    with zipfile.ZipFile(path) as archive:
        entries = [(i, archive.read(i)) for i in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for info, data in entries:
            if info.filename == name:
                info.compress_type = zipfile.ZIP_STORED
                archive.writestr(info, frame)
            else:
                archive.writestr(info, data)
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        target = archive.getinfo(name)
    # local header: method at offset 8, uncompressed size at 22
    offset = target.header_offset
    raw[offset + 8: offset + 10] = (93).to_bytes(2, "little")
    raw[offset + 22: offset + 26] = declared_size.to_bytes(4, "little")
    central = raw.rfind(b"PK\x01\x02" + raw[raw.find(b"PK\x01\x02") + 4: raw.find(b"PK\x01\x02") + 4]
                        , 0)
    # central directory records: patch the one for `name`
    pos = raw.find(b"PK\x01\x02")
    while pos != -1:
        name_len = int.from_bytes(raw[pos + 28: pos + 30], "little")
        if raw[pos + 46: pos + 46 + name_len].decode() == name:
            raw[pos + 10: pos + 12] = (93).to_bytes(2, "little")
            raw[pos + 24: pos + 28] = declared_size.to_bytes(4, "little")
        pos = raw.find(b"PK\x01\x02", pos + 4)
    del central
    path.write_bytes(bytes(raw))


# --------------------------------------------------------------------------------------------
# Rule files


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b'[[rule]]\nkind = "x"\nfield = "reward"\ngt = inf\n', "'gt' must be a finite number"),
        (b'[[rule]]\nkind = "x"\nfield = "reward"\nlt = nan\n', "'lt' must be a finite number"),
        (b'[[rule]]\nkind = "x\xff"\nfield = "action"\ncontains = "a"\n', "not UTF-8 text"),
    ],
    ids=["inf", "nan", "not-utf8"],
)
def test_bad_rule_files(store: Path, tmp_path: Path, content: bytes, expect: str) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_bytes(content)
    result = run("mark", "--store", store, "--rules", rules)
    assert result.exit_code == 2 and expect in result.stderr and str(rules) in result.stderr
