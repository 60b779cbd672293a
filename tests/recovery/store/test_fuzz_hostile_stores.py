"""Fuzz the store's read and write paths with hostile store files and folders: a store is data
from elsewhere, so whatever it carries either reads as the data it holds or is one clean error.

Each example starts from a small valid store of the canonical fixture, of both kinds, and
applies one or more hostile changes drawn by Hypothesis. A DuckDB file gets SQL planted in its
catalog: a toolkit table replaced by a view over ``read_text`` / ``read_csv`` of a secret file
outside the store, a macro named like a builtin function (or anything else), a foreign view, a
toolkit view or macro with another body, an extra, retyped or generated column, a CHECK or
UNIQUE constraint, a DEFAULT that calls a function. A folder store gets its ``_store.json``
changed (a key repeated, a part listed twice, the generation lowered, an older manifest put
back, random JSON values, deep nesting, truncated text, a FIFO or a link in its place, a part
path that points outside) and stray files, folders, links and FIFOs added to its tree.

Then the read path (``open_store(read_only=True)`` and a query of ``trajectories``; ``recovery
analyze --json``) and the write path (``open_store`` and an ingest of another small file) run,
each under an alarm. The only outcomes allowed: it works and the data read is the original
data (plus the new file's, after a write), or it fails with a :class:`recovery.errors.Problem`
of one line (the command line: exit status 1 or 2, one line on stderr, no traceback). The
secret file's text never reaches a message, an output, a query result or a written file, and
no Parquet file of a folder store is removed or changed unless the write committed.

The default suite runs a few examples per store kind; ``make test-slow`` runs many more.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from recovery.errors import Problem
from recovery.store import IngestOptions, open_store
from tests.cli_support import FORMAT_FIXTURES, run_cli
from tests.recovery.formats._support import deadline
from tests.recovery.test_fuzz_readers import dumps, mutate_json

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SECRET = "secret-text-9c41e7-never-shown"
"""Held only by files outside the store; it must never reach any output."""
TABLES = ("ingests", "trajectories", "turns", "error_spells", "step_scores")
TOOLKIT_VIEWS = ("task_outcomes", "step_score_means", "recovery_stats", "pass_kt_task_counts",
                 "pass_at_kt", "pass_hat_kt")
TOOLKIT_MACROS = ("pass_at_k", "pass_hat_k")
BUILTINS = ("sha1", "lower", "upper", "coalesce", "avg", "count", "sum", "md5", "concat",
            "length", "round", "greatest", "least", "list_value", "json_extract", "hash",
            "strftime", "regexp_matches", "now", "current_setting")
REPLACED = {"ingests": "file", "trajectories": "run", "turns": "observation",
            "error_spells": "run", "step_scores": "model"}
"""A text column of each table, which a hostile view fills with the secret."""
IDENTIFIER = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)


# --------------------------------------------------------------------------------------------
# The valid stores, made once


def _extra_run(path: Path, run: str = "extra") -> Path:
    """A small canonical file of another run (what the write path ingests)."""
    lines = [{"run": run, "task_id": f"x{i}", "success": bool(i % 2),
              "turns": [{"action": "look", "observation": "Error: no"},
                        {"action": "go", "observation": "ok"}]} for i in range(3)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def _rows(store: Any) -> list[tuple]:
    return store.con.execute("SELECT * FROM trajectories ORDER BY ALL").fetchall()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both kinds of store of the canonical fixture, their rows, an older manifest of the
    folder store, the secret files and the file the write path ingests."""
    base = tmp_path_factory.mktemp("pristine")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n", encoding="utf-8")
    (outside / "secret.csv").write_text(f"run,task_id\n{SECRET},{SECRET}\n", encoding="utf-8")
    older = _extra_run(base / "older.jsonl", "older")
    for target in (base / "s.duckdb", f"{base / 'folder'}/"):
        with open_store(target) as store:
            store.ingest_file(older)
    old_manifest = (base / "folder" / "_store.json").read_text(encoding="utf-8")
    for target in (base / "s.duckdb", f"{base / 'folder'}/"):
        with open_store(target) as store:
            store.ingest_file(FORMAT_FIXTURES / "canonical.jsonl")
    rows = {}
    for name in ("s.duckdb", "folder"):
        with open_store(base / name, read_only=True) as store:
            rows[name] = _rows(store)
    # a Parquet file outside the store, of the turns table's shape, holding the secret
    import duckdb

    con = duckdb.connect()
    con.execute(f"COPY (SELECT * FROM '{base}/folder/turns/run=base/*/*/*.parquet' LIMIT 1) "
                f"TO '{outside}/secret.parquet'")
    con.execute(f"COPY (SELECT * REPLACE ('{SECRET}' AS observation) FROM "
                f"'{outside}/secret.parquet') TO '{outside}/secret.parquet'")
    con.close()
    return {"base": base, "outside": outside, "rows": rows, "old_manifest": old_manifest,
            "extra": _extra_run(base / "extra.jsonl")}


# --------------------------------------------------------------------------------------------
# Hostile DuckDB files


def _secret_sql(outside: Path, data: st.DataObject) -> str:
    """A query over the secret file, as one column ``v`` of text."""
    return data.draw(st.sampled_from([
        f"SELECT content AS v FROM read_text('{outside}/secret.txt')",
        f"SELECT run AS v FROM read_csv('{outside}/secret.csv')",
        f"SELECT observation AS v FROM read_parquet('{outside}/secret.parquet')",
        "SELECT current_setting('temp_directory') AS v",
    ]), label="secret query")


def _table_def(con: Any, table: str) -> str:
    row = con.execute("SELECT sql FROM duckdb_tables() WHERE table_name = ? "
                      "AND schema_name = 'main'", [table]).fetchone()
    if row is None:  # an earlier change made it a view: this change is not made
        con.execute("SELECT error('a view now')")  # raises duckdb.Error
    return row[0]


def _remake(con: Any, table: str, extra: str) -> None:
    """``table`` made again with ``extra`` (a column or a constraint) added, its rows kept."""
    columns = [r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND schema_name = 'main' "
        "ORDER BY column_index", [table]).fetchall()]
    ddl = _table_def(con, table).rstrip().rstrip(";").rstrip()
    assert ddl.endswith(")"), ddl
    con.execute(f"ALTER TABLE {table} RENAME TO old_{table}")
    con.execute(ddl[:-1] + f", {extra})")
    listed = ", ".join(f'"{c}"' for c in columns)
    con.execute(f"INSERT INTO {table} ({listed}) SELECT {listed} FROM old_{table}")
    con.execute(f"DROP TABLE old_{table}")


def _duckdb_mutation(con: Any, outside: Path, data: st.DataObject) -> None:
    """One hostile change to an open DuckDB store file."""
    kind = data.draw(st.sampled_from([
        "table-view", "macro", "foreign-view", "toolkit-view", "toolkit-macro", "add-column",
        "generated", "check", "unique", "default", "retype", "other-table"]), label="mutation")
    table = data.draw(st.sampled_from(TABLES), label="table")
    secret = _secret_sql(outside, data)
    if kind == "table-view":
        con.execute(f"ALTER TABLE {table} RENAME TO real_{table}")
        body = data.draw(st.sampled_from([
            f"SELECT t.*, s.v AS leaked FROM real_{table} t, ({secret}) s",
            f"SELECT t.* REPLACE (s.v AS {REPLACED[table]}) FROM real_{table} t, ({secret}) s",
            f"SELECT * FROM real_{table}"]), label="view body")
        con.execute(f"CREATE VIEW {table} AS {body}")
    elif kind == "macro":
        name = data.draw(st.sampled_from(BUILTINS) | IDENTIFIER, label="macro name")
        arity = data.draw(st.integers(0, 3), label="arity")
        params = ", ".join(f"p{i}" for i in range(arity))
        body = data.draw(st.sampled_from([f"({secret})", "'same-for-all'", "42"]))
        con.execute(f'CREATE OR REPLACE MACRO "{name}"({params}) AS {body}')
    elif kind == "foreign-view":
        name = data.draw(IDENTIFIER, label="view name")
        con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {secret}')
    elif kind == "toolkit-view":
        name = data.draw(st.sampled_from(TOOLKIT_VIEWS), label="view name")
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT v AS run FROM ({secret})")
    elif kind == "toolkit-macro":
        name = data.draw(st.sampled_from(TOOLKIT_MACROS), label="macro name")
        con.execute(f"CREATE OR REPLACE MACRO {name}(n, c, k) AS ({secret})")
    elif kind == "add-column":
        name = data.draw(IDENTIFIER, label="column")
        con.execute(f'ALTER TABLE {table} ADD COLUMN "{name}" VARCHAR')
    elif kind == "generated":
        _remake(con, table, "planted VARCHAR GENERATED ALWAYS AS (lower('x'))")
    elif kind == "check":
        _remake(con, table, data.draw(st.sampled_from([
            "CHECK (length(current_setting('temp_directory')) >= 0)", "CHECK (1 = 1)"])))
    elif kind == "unique":
        _remake(con, table, data.draw(st.sampled_from(["planted INTEGER DEFAULT 1 UNIQUE",
                                                        "planted INTEGER PRIMARY KEY"])))
    elif kind == "default":
        column = con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
                             "AND schema_name = 'main' ORDER BY column_index LIMIT 1",
                             [table]).fetchone()[0]
        expr = data.draw(st.sampled_from(["lower('x')", "current_setting('temp_directory')",
                                          "random()::VARCHAR", "'planted'"]), label="default")
        con.execute(f'ALTER TABLE {table} ALTER COLUMN "{column}" SET DEFAULT {expr}')
    elif kind == "retype":
        column = data.draw(st.sampled_from(["n_turns", "t", "score", "success", "reward"]))
        con.execute(f'ALTER TABLE {table} ALTER COLUMN "{column}" TYPE VARCHAR')
    else:  # a table the toolkit never reads: left alone
        con.execute(f'CREATE TABLE "{data.draw(IDENTIFIER)}_x" AS {secret}')


def _hostile_duckdb(pristine: dict[str, Any], work: Path, data: st.DataObject) -> Path:
    import duckdb

    path = work / "s.duckdb"
    shutil.copy(pristine["base"] / "s.duckdb", path)
    con = duckdb.connect(str(path))
    try:
        for _ in range(data.draw(st.integers(1, 3), label="changes")):
            con.begin()
            try:
                _duckdb_mutation(con, pristine["outside"], data)
                con.commit()
            except duckdb.Error:  # e.g. a column the table lacks: that change is not made
                con.rollback()
    finally:
        con.close()
    return path


# --------------------------------------------------------------------------------------------
# Hostile folder stores


def _repeat_key(text: str, data: st.DataObject) -> str:
    """The text with a key put again before its first place (so its object holds it twice)."""
    key = data.draw(st.sampled_from(['"files"', '"generation"', '"store"', '"parts"',
                                     '"table"', '"path"', '"gen"', '"step_scores"']))
    at = text.find(key)
    value = data.draw(st.sampled_from(["{}", "[]", "0", '"x"', "null"]))
    return text if at < 0 else text[:at] + f"{key}: {value}, " + text[at:]


def _manifest_change(root: Path, pristine: dict[str, Any], data: st.DataObject) -> None:
    """One hostile change to ``_store.json``."""
    marker = root / "_store.json"
    text = marker.read_text(encoding="utf-8", errors="replace")
    kind = data.draw(st.sampled_from([
        "repeat-key", "part-twice", "generation", "older", "random", "random", "deep",
        "truncate", "fifo", "link", "outside-path", "gone"]), label="manifest change")
    try:  # an earlier change may have left it no manifest
        manifest = json.loads(text)
        entry = next(iter(manifest["files"].values()))
        if not entry["parts"] or not all(isinstance(x, dict) for x in entry["parts"]):
            raise TypeError("no parts")
    except (ValueError, RecursionError, TypeError, KeyError, IndexError, StopIteration,
            AttributeError):
        kind = kind if kind in ("repeat-key", "older", "deep", "fifo", "link",
                                "gone") else "truncate"
    if kind == "repeat-key":
        marker.write_text(_repeat_key(text, data), encoding="utf-8")
    elif kind == "part-twice":
        entry["parts"].append(data.draw(st.sampled_from(entry["parts"])))
        marker.write_text(json.dumps(manifest), encoding="utf-8")
    elif kind == "generation":
        manifest["generation"] = data.draw(st.sampled_from([0, 1, -1, 2**64, 1.5, "2"]))
        marker.write_text(json.dumps(manifest), encoding="utf-8")
    elif kind == "older":
        marker.write_text(pristine["old_manifest"], encoding="utf-8")
    elif kind == "random":
        marker.write_text(dumps(mutate_json(manifest, data)), encoding="utf-8")
    elif kind == "deep":
        depth = data.draw(st.integers(50, 200_000), label="depth")
        marker.write_text('{"store": ' + "[" * depth + "]" * depth + "}", encoding="utf-8")
    elif kind == "truncate":
        marker.write_text(text[:data.draw(st.integers(0, max(len(text) - 1, 0)))],
                          encoding="utf-8")
    elif kind in ("fifo", "link", "gone"):
        marker.unlink()
        if kind == "fifo":
            os.mkfifo(marker)
        elif kind == "link":
            marker.symlink_to(data.draw(st.sampled_from(
                [pristine["outside"] / "secret.txt", pristine["base"] / "folder" / "_store.json"])))
    else:
        part = data.draw(st.sampled_from(entry["parts"]), label="part")
        part["path"] = data.draw(st.sampled_from([
            str(pristine["outside"] / "secret.parquet"), "../outside/secret.parquet",
            "turns/../../outside/secret.parquet", "turns/run=base/x/../../../outside/s.parquet",
            "/etc/passwd", "", "turns", "turns/run=base"]), label="path")
        marker.write_text(json.dumps(manifest), encoding="utf-8")


def _stray(root: Path, pristine: dict[str, Any], data: st.DataObject) -> None:
    """A file, folder, link or FIFO put somewhere in the store's tree."""
    folders = sorted(Path(folder) for folder, _, _ in os.walk(root))
    where = data.draw(st.sampled_from(folders), label="stray folder")
    name = data.draw(st.sampled_from(["data_1.parquet", "data_0.parquet", "x.txt", "gen=9",
                                      "run=evil", "_store.json.bak", ".hidden", "_journal.json",
                                      "sha256=" + "ab" * 32]), label="stray name")
    path = where / name
    if os.path.lexists(path):
        return
    kind = data.draw(st.sampled_from(["file", "folder", "link", "link-dir", "fifo",
                                      "parquet"]), label="stray kind")
    secret = pristine["outside"] / "secret.parquet"
    if kind == "file":
        path.write_text(SECRET, encoding="utf-8")
    elif kind == "folder":
        path.mkdir()
    elif kind == "link":
        path.symlink_to(secret)
    elif kind == "link-dir":
        path.symlink_to(pristine["outside"], target_is_directory=True)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        shutil.copy(secret, path)


def _hostile_folder(pristine: dict[str, Any], work: Path, data: st.DataObject) -> Path:
    root = work / "folder"
    shutil.copytree(pristine["base"] / "folder", root, symlinks=True)
    for _ in range(data.draw(st.integers(1, 3), label="changes")):
        if (root / "_store.json").is_file() and data.draw(st.booleans(), label="manifest"):
            _manifest_change(root, pristine, data)
        else:
            _stray(root, pristine, data)
    return root


# --------------------------------------------------------------------------------------------
# The property


def _parquet(root: Path) -> dict[str, bytes]:
    """Every regular Parquet file of a folder store with its bytes."""
    return {k: v for k, v in _files(root).items() if k.endswith(".parquet")}


def _note(outcome: str) -> None:
    """Count ``outcome`` in Hypothesis' statistics (``--hypothesis-show-statistics``)."""
    from hypothesis.control import currently_in_test_context

    if currently_in_test_context():
        event(outcome)


def _one_line(err: Problem) -> str:
    message = str(err)
    assert message and "\n" not in message, message
    assert SECRET not in message, message
    return message


def _read(path: Path, rows: list[tuple]) -> None:
    """The read path: the original rows, or one clean line."""
    try:
        with open_store(path, read_only=True) as store:
            got = _rows(store)
    except Problem as err:
        _one_line(err)
        _note("read: refused")
        return
    _note("read: worked")
    assert got == rows


def _analyze(path: Path, out: Path) -> None:
    """``recovery analyze --json``: works, or exits 1 or 2 with one line; no secret."""
    result = run_cli("analyze", "--store", path, "--quiet", "--n-boot", "0", "--json", out)
    assert SECRET not in result.output
    if result.exit_code == 0:
        assert SECRET not in out.read_text(encoding="utf-8")
        return
    assert result.exit_code in (1, 2), result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 or (result.exit_code == 2 and sum(
        line.startswith("Error:") for line in lines) == 1), result.output


def _write(path: Path, extra: Path, rows: list[tuple]) -> bool:
    """The write path: another file ingested (the original rows kept, the new ones added),
    or one clean line. Returns whether it committed."""
    try:
        with open_store(path) as store:
            store.ingest_file(extra, IngestOptions())
    except Problem as err:
        _one_line(err)
        _note("write: refused")
        return False
    _note("write: committed")
    with open_store(path, read_only=True) as store:
        got = _rows(store)
        runs = store.con.execute(
            "SELECT count(*) FROM trajectories WHERE run = 'extra'").fetchone()
    assert set(rows) <= set(got) and runs == (3,), got
    assert SECRET not in repr(got)
    return True


def _check(path: Path, pristine: dict[str, Any], work: Path,
           snapshot: Callable[[Path], dict[str, Any]]) -> None:
    before = snapshot(path)
    rows = pristine["rows"][path.name]
    with deadline(60):
        _read(path, rows)
        _analyze(path, work / "out.json")
        assert snapshot(path) == before, "the read path changed the store's files"
        committed = _write(path, pristine["extra"], rows)
    if not committed:
        assert snapshot(path) == before, "a refused write changed the store's files"
    elif path.is_dir():
        # a successful write removes nothing it did not write itself
        assert set(before) <= set(snapshot(path)), sorted(before)


def _catalog_and_tables(path: Path) -> dict[str, Any]:
    """A DuckDB file's catalog (every table, view and macro with its SQL) and the rows of its
    base tables, read with file access off and no view or macro run. (Its bytes are no
    measure: a command that opens it for writing may checkpoint it.)"""
    import duckdb

    con = duckdb.connect(str(path), read_only=True,
                         config={"enable_external_access": False})
    try:
        catalog = con.execute(
            "SELECT 'table', table_name, sql FROM duckdb_tables() WHERE NOT internal UNION ALL "
            "SELECT 'view', view_name, sql FROM duckdb_views() WHERE NOT internal UNION ALL "
            "SELECT 'macro', function_name, macro_definition FROM duckdb_functions() "
            "WHERE NOT internal ORDER BY ALL").fetchall()
        found: dict[str, Any] = {"catalog": catalog}
        for kind, name, _ in catalog:
            if kind == "table":
                found[name] = con.execute(f'SELECT * FROM "{name}" ORDER BY ALL').fetchall()
        return found
    finally:
        con.close()


def _fuzz_duckdb(pristine: dict[str, Any], work: Path, data: st.DataObject) -> None:
    path = _hostile_duckdb(pristine, work, data)
    _check(path, pristine, work, _catalog_and_tables)


def _fuzz_folder(pristine: dict[str, Any], work: Path, data: st.DataObject) -> None:
    root = _hostile_folder(pristine, work, data)
    before = _files(root)
    _check(root, pristine, work, _parquet)
    for name, content in _files(root).items():  # what the commands wrote
        if before.get(name) != content:
            assert SECRET.encode() not in content, name


def _files(root: Path) -> dict[str, bytes]:
    """Every regular file of the tree with its bytes."""
    found = {}
    for folder, _, names in os.walk(root):  # links not followed
        for name in names:
            path = Path(folder, name)
            if path.is_file() and not path.is_symlink():
                found[str(path.relative_to(root))] = path.read_bytes()
    return dict(sorted(found.items()))


SUPPRESS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
            HealthCheck.data_too_large]
# No shrinking: an example runs commands for a second or more, so shrinking a failure takes
# many minutes; the failing example's draws are printed as they were.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
FAST = settings(max_examples=10, deadline=None, derandomize=True, phases=PHASES,
                suppress_health_check=SUPPRESS)
FAST_FOLDERS = settings(FAST, max_examples=20)
SLOW = settings(max_examples=200, deadline=None, phases=PHASES, suppress_health_check=SUPPRESS)


def test_the_valid_stores_read_and_write(pristine: dict[str, Any],
                                         tmp_path: Path) -> None:
    """Unchanged, both kinds pass every step of the property (so a refusal is the change's)."""
    for name in ("s.duckdb", "folder"):
        target = tmp_path / name
        if name == "folder":
            shutil.copytree(pristine["base"] / name, target)
        else:
            shutil.copy(pristine["base"] / name, target)
        _read(target, pristine["rows"][name])
        assert run_cli("analyze", "--store", target, "--quiet", "--n-boot", "0", "--json",
                       tmp_path / f"{name}.json").exit_code == 0
        assert _write(target, pristine["extra"], pristine["rows"][name])


@FAST
@given(data=st.data())
def test_a_hostile_duckdb_file_reads_as_its_data_or_is_refused_cleanly(
    pristine: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz_duckdb(pristine, tmp_path_factory.mktemp("duck"), data)


@FAST_FOLDERS
@given(data=st.data())
def test_a_hostile_folder_store_reads_as_its_data_or_is_refused_cleanly(
    pristine: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz_folder(pristine, tmp_path_factory.mktemp("folder"), data)


@pytest.mark.slow
@SLOW
@given(data=st.data())
def test_a_hostile_duckdb_file_reads_as_its_data_or_is_refused_cleanly_many(
    pristine: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz_duckdb(pristine, tmp_path_factory.mktemp("duck"), data)


@pytest.mark.slow
@SLOW
@given(data=st.data())
def test_a_hostile_folder_store_reads_as_its_data_or_is_refused_cleanly_many(
    pristine: dict[str, Any], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz_folder(pristine, tmp_path_factory.mktemp("folder"), data)
