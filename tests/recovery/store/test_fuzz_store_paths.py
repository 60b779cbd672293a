"""Fuzz the folder store's paths and contents: a hostile name or a planted entry is read
exactly or refused by name, never a traceback, never a change outside the store.

Hypothesis builds a folder store whose name is drawn from glob and space characters (``[``,
``]``, ``*``, ``?``, ``{``, ``}``, space), next to a sibling folder a glob of the name would
match, holding another store. Into the store it plants one of: nothing, a symbolic link to a
folder outside (in a random place of the tree), a copy of a committed Parquet file in a
committed partition, a garbage file, an unknown folder, a damaged ``_store.json``, or a
leftover partition of an unfinished write. Then it reads the store, ingests one more file
through ``recovery ingest`` and reads it again. The only outcomes allowed: the command works
exactly (the totals are those of the files ingested into this store, whatever the sibling
holds), or it exits 1 with one line naming the planted path; and nothing outside the store
changes (the link's target, the sibling store).

The default suite runs a few examples; ``make test-slow`` runs many more.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_recovery_cli.recovery import main
from recovery.errors import InputProblem
from recovery.store import open_store
from recovery.store.folder import MARKER

PLANTS = ("nothing", "link", "copy", "garbage", "folder", "manifest", "leftover")
NAME_CHARS = "ab[]*?{} "
FAKE_SHA = "cd" * 32


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Two simulated files, a template store holding the first, a sibling store holding
    both, and the expected totals."""
    out = tmp_path_factory.mktemp("fuzz_store")
    result = CliRunner().invoke(
        main, ["simulate", "--out", str(out / "sim"), "--tasks", "3", "--samples", "2",
               "--seed", "11"]
    )
    assert result.exit_code == 0, result.output
    files = sorted((out / "sim").glob("*.jsonl"))
    for name, held in (("template", files[:1]), ("sibling", files)):
        con = open_store(f"{out / name}/")
        for file in held:
            con.ingest_file(file)
        con.close()
    expected = []
    for held in (files[:1], files):
        duck = open_store(None)
        for file in held:
            duck.ingest_file(file)
        expected.append(totals(duck.con))
    return {"files": files, "template": out / "template", "sibling": out / "sibling",
            "one": expected[0], "both": expected[1]}


def totals(con) -> tuple[int, int, int]:
    return con.execute(
        "SELECT (SELECT count(*) FROM ingests), (SELECT count(*) FROM trajectories), "
        "(SELECT count(*) FROM turns)"
    ).fetchone()


def tree(folder: Path) -> dict[str, object]:
    """Every entry under ``folder``, links not followed."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(folder))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            else:
                out[rel] = path.read_bytes() if path.is_file() else "dir"
    return out


def glob_match(name: str) -> str:
    """A name that a glob of ``name`` matches and that differs from it, if one is easy."""
    out, i = [], 0
    while i < len(name):
        c = name[i]
        if c == "[" and "]" in name[i + 2:]:
            end = name.index("]", i + 2)
            out.append(name[i + 1])
            i = end + 1
            continue
        out.append("x" if c in "*?" else c)
        i += 1
    return "".join(out)


def store_dirs(root: Path) -> list[Path]:
    """Every folder of the store's tree, the root included."""
    return [root, *sorted(Path(d) / n for d, ns, _ in os.walk(root) for n in ns)]


def plant(root: Path, kind: str, data: st.DataObject, outside: Path) -> Path | None:
    """Plant ``kind`` somewhere in the store; return the path a refusal must name."""
    committed = sorted(root.glob("*/*/*/*/data_0.parquet")) + sorted(
        root.glob("ingests/*/*/data_0.parquet"))
    committed = [p for p in committed if "gen=-1" not in str(p)]
    if kind == "nothing":
        return None
    if kind == "link":
        where = data.draw(st.sampled_from(store_dirs(root)), label="link in")
        link = where / data.draw(st.sampled_from([f"sha256={FAKE_SHA}", "gen=3", "x",
                                                  "data_9.parquet"]), label="link name")
        if link.exists() or link.is_symlink():
            return None
        link.symlink_to(outside, target_is_directory=True)
        return link
    if kind == "copy":
        source = data.draw(st.sampled_from(committed), label="copied")
        planted = source.with_name("data_1.parquet")
        shutil.copy(source, planted)
        return planted
    if kind == "garbage":
        where = data.draw(st.sampled_from(store_dirs(root)), label="garbage in")
        planted = where / data.draw(st.sampled_from(["zz.parquet", "notes.txt", "data_5.parquet"]),
                                    label="garbage name")
        if planted.exists():
            return None
        planted.write_bytes(data.draw(st.binary(max_size=40), label="garbage"))
        return planted
    if kind == "folder":
        where = data.draw(st.sampled_from(store_dirs(root)), label="folder in")
        planted = where / "unknown"
        planted.mkdir()
        return planted
    if kind == "manifest":
        text = (root / MARKER).read_text()
        cut = data.draw(st.integers(0, len(text) - 2), label="cut at")
        (root / MARKER).write_text(text[:cut])
        return root / MARKER
    leftover = root / "turns" / "run=base" / f"sha256={FAKE_SHA}" / "gen=0"
    leftover.mkdir(parents=True)
    shutil.copy(committed[0], leftover / "data_0.parquet")
    return None  # an unfinished write's partition: not read, removed by the next write


def check(result, planted: Path | None) -> bool:
    """The command worked (True) or was refused by name (False); never a traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        return True
    assert result.exit_code == 1, result.output
    assert planted is not None, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and str(planted) in errors[0], result.output
    return False


def _fuzz(base: dict, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    name = data.draw(st.text(NAME_CHARS, min_size=1, max_size=6).filter(
        lambda s: s.strip(" ") and s not in (".", "..")), label="name")
    kind = data.draw(st.sampled_from(PLANTS), label="plant")
    top = tmp_path_factory.mktemp("paths")
    root = top / name
    shutil.copytree(base["template"], root)
    sibling = top / glob_match(name)
    if sibling != root:
        shutil.copytree(base["sibling"], sibling)
    outside = top / "outside!"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "precious.txt").write_text("mine")
    planted = plant(root, kind, data, outside)
    watched = {p: tree(p) for p in (outside, sibling) if p != root}

    try:
        con = open_store(root, read_only=True)
    except InputProblem as err:
        assert planted is not None and str(planted) in str(err), (kind, str(err))
        read = False
    else:
        assert totals(con.con) == base["one"]
        con.close()
        read = True
    ingest = CliRunner().invoke(main, ["ingest", str(base["files"][1]), "--store", str(root)])
    stored = check(ingest, planted)
    assert stored == read, (kind, ingest.output)
    if stored:
        assert totals(open_store(root, read_only=True).con) == base["both"]
        assert not (root / "turns" / "run=base" / f"sha256={FAKE_SHA}").exists()
    if not any(c in name for c in "*?["):  # recovery sql: see test_folder_hardening
        query = CliRunner().invoke(main, ["sql", "SELECT count(*) AS n FROM turns",
                                          "--store", str(root), "--format", "json"])
        if check(query, planted):
            assert json.loads(query.stdout) == [{"n": (base["both"] if stored
                                                       else base["one"])[2]}]
    for path, before in watched.items():
        assert tree(path) == before, path


FAST = settings(max_examples=4, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
SLOW = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@FAST
@given(data=st.data())
def test_a_hostile_store_is_read_exactly_or_refused_by_name(
    base: dict, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz(base, tmp_path_factory, data)


@pytest.mark.slow
@SLOW
@given(data=st.data())
def test_a_hostile_store_is_read_exactly_or_refused_by_name_many(
    base: dict, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    _fuzz(base, tmp_path_factory, data)
