"""Fuzz every reader through ``ingest_file``: a bad input is a clean error, never a crash.

Each fixture of ``tests/fixtures/formats/`` (``<format>.<ext>``, or a folder ``<format>/``) is a
small valid input of one registered format. Hypothesis mutates it (a value replaced by random
Unicode text with lone surrogates, JSON nested thousands deep, integers too large for the
store, NaN and infinities, a wrong type; a key dropped or added; a CSV cell or a Parquet
column changed) and ingests the result, with and without ``skip_bad``. The only outcomes
allowed: the ingest succeeds, or it raises ``IngestError`` whose message names the file and a
line; and after a failure every table of the store is exactly as before.

Folder inputs get hostile shapes of their own: BALROG folders built from random sets of
entries (episode files of the right and wrong shape, links that point out of the folder or
inside it, dangling links, named pipes, folders and linked folders named like episodes) and
ATIF trajectories whose ``continued_trajectory_ref`` names hostile places (``..``, absolute
paths, links, named pipes, over-long names, random text). Besides the property above, nothing
of the files outside the input may reach the store or a message, and no input may block (each
runs under an alarm).

This random search runs in ``make test-slow`` (a few hundred examples per fixture); the fast
suite runs the fixed corpus of ``test_fuzz_readers_corpus.py`` (every mutation kind, two cases
per format, the hostile folder shapes) with the same property.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recovery.formats import known_formats
from recovery.store import IngestError, IngestOptions, open_store
from tests.recovery.formats._support import deadline

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
# Readers warn about what they guessed (e.g. verl outputs without role markers); not a failure.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
TABLES = ("ingests", "trajectories", "turns", "error_spells", "step_scores", "store_info")


def fixtures() -> list[Path]:
    """Every fixture whose name starts with a registered format."""
    known = set(known_formats())
    found = [p for p in sorted(FIXTURES.iterdir()) if p.name.split(".")[0] in known]
    return found


def format_of(fixture: Path) -> str:
    return fixture.name.split(".")[0]


# --------------------------------------------------------------------------------------------
# Values that break readers

SURROGATE_TEXT = st.builds(
    lambda a, b: a + "\ud800" + b, st.text(max_size=8), st.text(max_size=8)
)
BAD_VALUES = st.one_of(
    st.text(max_size=40),                      # any Unicode, including control characters
    SURROGATE_TEXT,                            # a lone surrogate (json.dumps writes \ud800)
    st.integers(min_value=30, max_value=10_000).map(lambda n: f"{DEEP}{n}__"),
    st.sampled_from([2**31, 2**40, 2**63, 2**64 + 1, 10**30, -1, -(2**40)]),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308]),
    st.sampled_from([None, True, False, 0, 1.5, "", {}, [], {"x": [1, {"y": None}]}]),
)


DEEP = "__nested_"
"""A placeholder :func:`dumps` replaces by JSON nested that many levels deep (a value this deep
cannot pass through Python's own encoder)."""


def _nested_text(depth: int) -> str:
    opens = "".join('{"k":' if level % 2 == 0 else "[" for level in range(depth))
    closes = "".join("}" if level % 2 == 0 else "]" for level in reversed(range(depth)))
    return opens + '"leaf"' + closes


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indices) into a JSON value, iteratively."""
    out = []
    stack = [(value, prefix)]
    while stack:
        item, path = stack.pop()
        out.append(path)
        if isinstance(item, dict):
            stack.extend((v, (*path, k)) for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(item))
    return out


def mutate_json(value: Any, data: st.DataObject) -> Any:
    """``value`` with one random change at a random place."""
    value = copy.deepcopy(value)
    paths = _paths(value)
    path = data.draw(st.sampled_from(paths), label="path")
    action = data.draw(st.sampled_from(["replace", "replace", "replace", "drop", "add"]))
    if not path:
        return data.draw(BAD_VALUES) if action == "replace" else value
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if action == "drop":
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=10) | SURROGATE_TEXT)] = data.draw(BAD_VALUES)
    else:
        parent[last] = data.draw(BAD_VALUES, label="value")
    return value


def dumps(value: Any) -> str:
    """JSON text as a careless writer might produce: NaN tokens, surrogate escapes kept, and
    deep nesting where a placeholder stands."""
    text = json.dumps(value, ensure_ascii=True)
    return re.sub(f'"{DEEP}(\\d+)__"', lambda m: _nested_text(int(m.group(1))), text)


# --------------------------------------------------------------------------------------------
# Mutating a fixture of any shape


def mutate_file(source: Path, target: Path, data: st.DataObject) -> None:
    name = source.name
    if source.is_dir():
        shutil.copytree(source, target)
        files = sorted(p for p in target.rglob("*") if p.is_file())
        chosen = data.draw(st.sampled_from(files), label="file")
        mutate_file(chosen, chosen.with_name("_" + chosen.name), data)
        chosen.with_name("_" + chosen.name).replace(chosen)
    elif name.endswith(".gz"):
        inner = gzip.decompress(source.read_bytes())
        plain = target.with_name("_inner" + source.name[: -len(".gz")])
        plain.write_bytes(inner)
        mutated = plain.with_name("_m" + plain.name)
        mutate_file(plain, mutated, data)
        target.write_bytes(gzip.compress(mutated.read_bytes()))
    elif name.endswith((".jsonl", ".ndjson")):
        lines = [json.loads(x) for x in source.read_text(encoding="utf-8").splitlines() if x]
        index = data.draw(st.integers(0, len(lines) - 1), label="line")
        lines[index] = mutate_json(lines[index], data)
        target.write_text("".join(dumps(x) + "\n" for x in lines), encoding="utf-8")
    elif name.endswith((".json", ".traj")):
        target.write_text(dumps(mutate_json(json.loads(source.read_text("utf-8")), data)),
                          encoding="utf-8")
    elif name.endswith(".eval"):
        with zipfile.ZipFile(source) as archive:
            entries = {n: archive.read(n) for n in archive.namelist()}
        names = sorted(n for n in entries if n.endswith(".json"))
        chosen = data.draw(st.sampled_from(names), label="entry")
        entries[chosen] = dumps(mutate_json(json.loads(entries[chosen]), data)).encode()
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
            for entry, content in entries.items():
                archive.writestr(entry, content)
    elif name.endswith(".csv"):
        import csv

        rows = list(csv.reader(io.StringIO(source.read_text(encoding="utf-8"))))
        r = data.draw(st.integers(0, len(rows) - 1), label="row")
        if rows[r]:
            c = data.draw(st.integers(0, len(rows[r]) - 1), label="cell")
            rows[r][c] = str(data.draw(BAD_VALUES.filter(lambda v: not isinstance(v, str)) |
                                       st.text(max_size=30)))
        with open(target, "w", newline="", encoding="utf-8", errors="surrogatepass") as fh:
            csv.writer(fh).writerows(rows)
    elif name.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(source)
        column = data.draw(st.sampled_from(table.column_names), label="column")
        if data.draw(st.booleans(), label="drop column"):
            table = table.drop_columns([column])
        else:
            values = [json.dumps(v) if not isinstance(v, str) else v
                      for v in table.column(column).to_pylist()]
            row = data.draw(st.integers(0, max(len(values) - 1, 0)), label="row")
            if values:
                values[row] = data.draw(st.text(max_size=30))
            table = table.set_column(table.column_names.index(column), column,
                                     pa.array(values, pa.string()))
        pq.write_table(table, target)
    else:  # pragma: no cover - a fixture of a kind this harness does not know
        raise AssertionError(f"no mutator for fixture {source}")


# --------------------------------------------------------------------------------------------
# The property


def dump(con: Any) -> dict[str, list[tuple]]:
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}


def check_ingest(store: Any, path: Path, fmt: str, skip_bad: bool) -> str:
    """Ingest ``path``: stored, or refused naming the file and a line with the store unchanged.

    Returns the refusal's message (``""`` when the input was stored).
    """
    before = dump(store.con)
    try:
        store.ingest_file(path, IngestOptions(format=fmt, skip_bad=skip_bad))
    except IngestError as err:
        message = str(err)
        assert re.search(re.escape(str(path)) + r"(/[^:]*)?:\d+: ", message), message
        assert "Traceback" not in message
        assert dump(store.con) == before
        return message
    assert store.con.execute("SELECT count(*) FROM ingests").fetchone()[0] >= 1
    return ""


def _fuzz(fixture: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    fmt = format_of(fixture)
    work = tmp_path_factory.mktemp("fuzz")
    target = work / fixture.name
    mutate_file(fixture, target, data)
    store = open_store(None)
    try:
        # A store that already holds the valid fixture, so "unchanged" has content to keep.
        store.ingest_file(fixture, IngestOptions(format=fmt))
        check_ingest(store, target, fmt, skip_bad=data.draw(st.booleans(), label="skip_bad"))
    finally:
        store.close()


SLOW = settings(max_examples=400, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


def test_every_format_has_a_fixture() -> None:
    have = {format_of(p) for p in fixtures()}
    missing = sorted(set(known_formats()) - have)
    assert not missing, f"add a fixture for {missing} to {FIXTURES}"


@pytest.mark.parametrize("fixture", fixtures(), ids=lambda p: p.name)
def test_fixture_ingests_cleanly(fixture: Path) -> None:
    store = open_store(None)
    try:
        result = store.ingest_file(fixture, IngestOptions(format=format_of(fixture)))
        assert result.n_trajectories >= 1 and not result.skipped
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("fixture", fixtures(), ids=lambda p: p.name)
@SLOW
@given(data=st.data())
def test_mutated_input_is_stored_or_refused_cleanly_many(
    fixture: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz(fixture, tmp_path_factory, data)


# --------------------------------------------------------------------------------------------
# Folder inputs: hostile entries, hostile continuation references

SECRET = "outside-marker-7f3a"
"""Written only in files outside the input; it must never reach the store or a message."""
HEADER = "Step,Action,Reasoning,Observation,Reward,Done\n"
ENTRY_KINDS = ("valid", "valid", "garbage", "other-header", "bad-bytes", "empty", "link-out",
               "link-passwd", "link-in", "dangling", "fifo", "folder", "linked-folder")



def _outside(root: Path) -> Path:
    """Files beside the input that nobody asked to read, each holding :data:`SECRET`."""
    place = root / "outside"
    (place / "env" / "task").mkdir(parents=True)
    (place / "episode.csv").write_text(HEADER + f"0,{SECRET},,o,0.0,True\n", encoding="utf-8")
    (place / "summary.json").write_text(json.dumps({"progression": 1.0, "secret": SECRET}),
                                        encoding="utf-8")
    (place / "passwd").write_text(f"root:x:0:0:{SECRET}\n", encoding="utf-8")
    (place / "env" / "task" / "task_run_00.csv").write_text(
        HEADER + f"0,{SECRET},,o,0.0,True\n", encoding="utf-8")
    atif = json.loads((FIXTURES / "atif.json").read_text(encoding="utf-8"))
    atif["final_metrics"] = {"secret": SECRET}
    atif["steps"][-1]["message"] = SECRET
    (place / "cont.json").write_text(json.dumps(atif), encoding="utf-8")
    return place


def _write_entry(path: Path, kind: str, ext: str, outside: Path, folder: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(path):
        return
    target = outside / ("episode.csv" if ext == "csv" else "summary.json")
    if kind == "valid":
        path.write_text(HEADER + "0,go,,seen,0.5,True\n" if ext == "csv" else
                        json.dumps({"progression": 1.0, "episode_return": 1.0, "done": True}),
                        encoding="utf-8")
    elif kind == "garbage":
        path.write_text('0,"unclosed\n{"x": ' if ext == "csv" else "{not json",
                        encoding="utf-8")
    elif kind == "other-header":
        path.write_text("a,b,c\n1,2,3\n" if ext == "csv" else "[1, 2]", encoding="utf-8")
    elif kind == "bad-bytes":
        path.write_bytes(HEADER.encode() + b"0,\xff\xfe,,o,0,True\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "link-out":
        path.symlink_to(target)
    elif kind == "link-passwd":
        path.symlink_to(outside / "passwd")
    elif kind == "link-in":
        path.symlink_to(folder / "summary.json")
    elif kind == "dangling":
        path.symlink_to(outside / "nothing-here")
    elif kind == "fifo" and hasattr(os, "mkfifo"):
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "linked-folder":
        path.symlink_to(outside / "env", target_is_directory=True)


ENTRIES = st.lists(
    st.tuples(st.sampled_from(["env/task", "env/other", "env/task/deep/er", ""]),
              st.integers(0, 3), st.sampled_from(["csv", "json"]),
              st.sampled_from(ENTRY_KINDS)),
    min_size=1, max_size=8,
)


def _no_secret(store: Any, message: str = "") -> None:
    assert SECRET not in message, message
    assert SECRET not in repr(dump(store.con)), "a file outside the input reached the store"


def _check_clean(store: Any, path: Path, fmt: str, skip_bad: bool) -> None:
    """:func:`check_ingest`, and nothing of the files outside ``path`` stored or quoted."""
    _no_secret(store, check_ingest(store, path, fmt, skip_bad))


def _fuzz_balrog_folder(root: Path, data: st.DataObject) -> None:
    outside = _outside(root)
    folder = root / "run"
    folder.mkdir()
    (folder / "summary.json").write_text("{}", encoding="utf-8")
    for where, index, ext, kind in data.draw(ENTRIES, label="entries"):
        name = f"{where.rsplit('/', 1)[-1] or 'top'}_run_{index:02d}.{ext}"
        _write_entry(folder / where / name, kind, ext, outside, folder)
    if data.draw(st.booleans(), label="linked folder"):
        (folder / "elsewhere").symlink_to(outside / "env", target_is_directory=True)
    store = open_store(None)
    try:
        store.ingest_file(FIXTURES / "balrog", IngestOptions(format="balrog"))
        with deadline(20):
            try:
                from recovery.formats import UnknownFormatError, detect_format

                detect_format(folder)
            except UnknownFormatError as err:
                assert SECRET not in str(err)
            _check_clean(store, folder, "balrog", data.draw(st.booleans(), label="skip_bad"))
    finally:
        store.close()


HOSTILE_REFS = st.one_of(
    st.sampled_from(["../outside/cont.json", "../outside/missing.json", "..", ".", "/",
                     "outside/cont.json", "link.json", "dangling.json", "pipe.json",
                     "sub", "x" * 5000, "a\x00b.json", "..\\outside\\cont.json", "cont.json",
                     "self.json", "~/cont.json", " ", "\u202e.json"]),
    st.text(max_size=30),
    st.builds(lambda n: "é" * n, st.integers(100, 400)),
)


def atif_continuation_run(root: Path, ref: str) -> Path:
    """A run folder beside hostile places (a link out of it, a dangling link, a named pipe, a
    continuation file) whose ATIF trajectory continues at ``ref``; returns the trajectory."""
    outside = _outside(root)
    run = root / "run"
    (run / "sub").mkdir(parents=True)
    (run / "link.json").symlink_to(outside / "cont.json")
    (run / "dangling.json").symlink_to(outside / "nothing.json")
    if hasattr(os, "mkfifo"):
        os.mkfifo(run / "pipe.json")
    head = json.loads((FIXTURES / "atif.json").read_text(encoding="utf-8"))
    cont = copy.deepcopy(head)
    cont.pop("final_metrics", None)
    (run / "cont.json").write_text(json.dumps(cont), encoding="utf-8")
    head["continued_trajectory_ref"] = ref
    path = run / "self.json"
    path.write_text(json.dumps(head), encoding="utf-8")
    return path


def _fuzz_atif_continuation(root: Path, data: st.DataObject) -> None:
    path = atif_continuation_run(root, data.draw(HOSTILE_REFS, label="ref"))
    store = open_store(None)
    try:
        store.ingest_file(FIXTURES / "atif.json", IngestOptions(format="atif"))
        with deadline(20):
            _check_clean(store, path, "atif", data.draw(st.booleans(), label="skip_bad"))
    finally:
        store.close()


FOLDERS_SLOW = settings(max_examples=300, deadline=None,
                        suppress_health_check=[HealthCheck.function_scoped_fixture,
                                               HealthCheck.too_slow,
                                               HealthCheck.data_too_large])


@pytest.mark.slow
@FOLDERS_SLOW
@given(data=st.data())
def test_hostile_balrog_folder_is_stored_or_refused_cleanly_many(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz_balrog_folder(tmp_path_factory.mktemp("balrog"), data)


@pytest.mark.slow
@FOLDERS_SLOW
@given(data=st.data())
def test_hostile_continuation_is_stored_or_refused_cleanly_many(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz_atif_continuation(tmp_path_factory.mktemp("atif"), data)
