"""The readers' hostile inputs as a fixed corpus: the fast suite's share of the fuzzing.

Each case is one mutation of a format's fixture, of the kinds the random search of
``test_fuzz_readers.py`` draws (a value replaced by a lone surrogate, JSON nested thousands deep,
an integer too large for the store, NaN or an infinity, a wrong type; a key dropped or added; a
CSV cell or a Parquet column changed), two per format, plus hostile folder shapes (BALROG
entries, ATIF continuation references). The property is the random search's: the ingest
succeeds, or it raises ``IngestError`` naming the file and a line with the store unchanged, and
nothing outside the input reaches the store or a message. The random search itself runs in
``make test-slow``.
"""

from __future__ import annotations

import copy
import gzip
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from recovery.formats import known_formats
from recovery.store import IngestOptions, open_store
from tests.recovery.formats._support import deadline
from tests.recovery.test_fuzz_readers import (
    DEEP,
    FIXTURES,
    _check_clean,
    _outside,
    _paths,
    _write_entry,
    atif_continuation_run,
    check_ingest,
    dumps,
    format_of,
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SURROGATE = "a\ud800b"
NESTED = f"{DEEP}5000__"
"""JSON 5,000 levels deep (see ``dumps``)."""

# (fixture, file inside it (folders, archives) or "", key whose first occurrence is hit
#  ("" = the whole document), action, value)
CORPUS: list[tuple[str, str, str, str, Any]] = [
    ("agentprocessbench.jsonl", "", "step_labels", "replace", 2**64 + 1),
    ("agentprocessbench.jsonl", "", "content", "replace", SURROGATE),
    ("art.parquet", "", "messages", "text", "not a list \u202e\x00"),
    ("art.parquet", "", "reward", "drop", None),
    ("atif.json", "", "steps", "replace", {"x": [1, {"y": None}]}),
    ("atif.json", "", "message", "replace", NESTED),
    ("canonical.jsonl", "", "turns", "replace", float("nan")),
    ("canonical.jsonl", "", "sample", "replace", 2**63),
    ("canonical.jsonl.gz", "", "success", "replace", float("inf")),
    ("canonical.jsonl.gz", "", "action", "replace", NESTED),
    ("inspect.eval", "samples/1_epoch_1.json", "messages", "drop", None),
    ("inspect.eval", "samples/1_epoch_1.json", "content", "replace", SURROGATE),
    ("inspect.json", "", "samples", "replace", -(2**40)),
    ("inspect.json", "", "", "add", (SURROGATE, 1e308)),
    ("minisweagent.traj.json", "", "messages", "replace", "only text"),
    ("minisweagent.traj.json", "", "content", "replace", float("-inf")),
    ("openai.jsonl", "", "tool_calls", "replace", True),
    ("openai.jsonl", "", "messages", "drop", None),
    ("sweagent.traj", "", "trajectory", "replace", []),
    ("sweagent.traj", "", "observation", "replace", NESTED),
    ("taubench.json", "", "traj", "replace", 10**30),
    ("taubench.json", "", "reward", "replace", float("nan")),
    ("verl.jsonl", "", "output", "replace", SURROGATE),
    ("verl.jsonl", "", "", "add", ("\ud800key", 2**31)),
    ("whowhen.json", "", "history", "replace", {}),
    ("whowhen.json", "", "mistake_step", "replace", 2**40),
    ("balrog", "babyai_summary.json", "", "replace", NESTED),
    ("balrog", "goto_run_00.csv", "1,3", "cell", "\x00\ud800"),
]


def _hit(value: Any, key: str, action: str, new: Any) -> Any:
    """``value`` with one change at the first path ending in ``key`` (``""``: the top)."""
    value = copy.deepcopy(value)
    if action == "add":
        target = value[0] if isinstance(value, list) else value
        target[new[0]] = new[1]
        return value
    if not key:
        return new
    path = next(p for p in sorted(_paths(value), key=len) if p and p[-1] == key)
    parent = value
    for part in path[:-1]:
        parent = parent[part]
    if action == "drop":
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return value


def _mutate_text(text: str, name: str, key: str, action: str, new: Any) -> str:
    if name.endswith((".jsonl", ".ndjson")):
        lines = [json.loads(x) for x in text.splitlines() if x]
        lines[0] = _hit(lines[0], key, action, new)
        return "".join(dumps(x) + "\n" for x in lines)
    if name.endswith(".csv"):
        import csv
        import io

        rows = list(csv.reader(io.StringIO(text)))
        row, col = (int(x) for x in key.split(","))
        rows[row][col] = new
        out = io.StringIO()
        csv.writer(out).writerows(rows)
        return out.getvalue()
    return dumps(_hit(json.loads(text), key, action, new))


def _write_parquet(source: Path, target: Path, column: str, action: str, new: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    if action == "drop":
        table = table.drop_columns([column])
    else:
        values = [json.dumps(v) for v in table.column(column).to_pylist()]
        values[0] = new
        table = table.set_column(table.column_names.index(column), column,
                                 pa.array(values, pa.string()))
    pq.write_table(table, target)


def build_case(fixture: Path, target: Path, inner: str, key: str, action: str, new: Any) -> None:
    """Write the mutated copy of ``fixture`` at ``target``."""
    name = fixture.name
    if fixture.is_dir():
        import shutil

        shutil.copytree(fixture, target)
        chosen = next(p for p in sorted(target.rglob(inner)) if p.is_file())
        chosen.write_text(_mutate_text(chosen.read_text("utf-8"), chosen.name, key, action,
                                       new), encoding="utf-8", errors="surrogatepass")
    elif name.endswith(".gz"):
        text = gzip.decompress(fixture.read_bytes()).decode("utf-8")
        target.write_bytes(gzip.compress(
            _mutate_text(text, name[: -len(".gz")], key, action, new).encode()))
    elif name.endswith(".eval"):
        with zipfile.ZipFile(fixture) as archive:
            entries = {n: archive.read(n) for n in archive.namelist()}
        entries[inner] = _mutate_text(entries[inner].decode(), inner, key, action, new).encode()
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
            for entry, content in entries.items():
                archive.writestr(entry, content)
    elif name.endswith(".parquet"):
        _write_parquet(fixture, target, key, action, new)
    else:
        target.write_text(_mutate_text(fixture.read_text("utf-8"), name, key, action, new),
                          encoding="utf-8")


def test_the_corpus_covers_every_format_twice() -> None:
    counts = {fmt: sum(format_of(FIXTURES / c[0]) == fmt for c in CORPUS)
              for fmt in known_formats()}
    assert all(n >= 2 for n in counts.values()), counts


@pytest.mark.parametrize("skip_bad", [False, True], ids=["strict", "skip_bad"])
@pytest.mark.parametrize("case", CORPUS, ids=lambda c: f"{c[0]}-{c[3]}-{c[2] or 'top'}")
def test_hostile_input_is_stored_or_refused_cleanly(case: tuple, skip_bad: bool,
                                                    tmp_path: Path) -> None:
    fixture = FIXTURES / case[0]
    target = tmp_path / fixture.name
    build_case(fixture, target, *case[1:])
    assert target.exists()
    fmt = format_of(fixture)
    store = open_store(None)
    try:
        store.ingest_file(fixture, IngestOptions(format=fmt))
        with deadline(20):
            check_ingest(store, target, fmt, skip_bad)
    finally:
        store.close()


BALROG_FOLDERS = {
    "links-out-and-in": [("env/task", 0, "csv", "link-out"), ("env/task", 0, "json", "link-in"),
                         ("env/task", 1, "csv", "valid"), ("env/task", 1, "json", "valid")],
    "passwd-fifo-dangling": [("", 0, "csv", "link-passwd"), ("env/other", 2, "json", "fifo"),
                             ("env/other", 2, "csv", "dangling")],
    "garbage-and-folders": [("env/task/deep/er", 3, "csv", "garbage"),
                            ("env/task", 0, "json", "other-header"),
                            ("env/task", 1, "csv", "bad-bytes"), ("env/task", 2, "csv", "folder"),
                            ("env/task", 3, "json", "linked-folder"),
                            ("env/task", 0, "csv", "empty")],
}


@pytest.mark.parametrize("entries", BALROG_FOLDERS.values(), ids=BALROG_FOLDERS.keys())
def test_hostile_balrog_folder(entries: list[tuple], tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "summary.json").write_text("{}", encoding="utf-8")
    for where, index, ext, kind in entries:
        name = f"{where.rsplit('/', 1)[-1] or 'top'}_run_{index:02d}.{ext}"
        _write_entry(folder / where / name, kind, ext, outside, folder)
    (folder / "elsewhere").symlink_to(outside / "env", target_is_directory=True)
    store = open_store(None)
    try:
        store.ingest_file(FIXTURES / "balrog", IngestOptions(format="balrog"))
        with deadline(20):
            for skip_bad in (False, True):
                _check_clean(store, folder, "balrog", skip_bad)
    finally:
        store.close()


@pytest.mark.parametrize("ref", ["../outside/cont.json", "..", "/", "link.json",
                                 "dangling.json", "pipe.json", "x" * 5000, "a\x00b.json",
                                 "self.json", "\u202e.json", "é" * 300])
def test_hostile_continuation_reference(ref: str, tmp_path: Path) -> None:
    path = atif_continuation_run(tmp_path, ref)
    store = open_store(None)
    try:
        store.ingest_file(FIXTURES / "atif.json", IngestOptions(format="atif"))
        with deadline(20):
            _check_clean(store, path, "atif", skip_bad=False)
    finally:
        store.close()

