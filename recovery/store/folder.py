"""A store that outgrows one file: a folder of Hive-partitioned zstd Parquet files.

The same tables and columns as the DuckDB store, one Parquet file per (table, run, ingested
file), read through DuckDB views. Layout under the store's folder ``ROOT``::

    _store.json                                         the manifest: what is committed
    ingests/sha256=<hex>/gen=<n>/data_0.parquet         one row per ingested file
    trajectories/run=<run>/sha256=<hex>/gen=<n>/data_0.parquet
    turns/run=<run>/sha256=<hex>/gen=<n>/data_0.parquet
    error_spells/run=<run>/sha256=<hex>/gen=<n>/data_0.parquet
    step_scores/model=<model>/data.parquet              one file per PRM model
    _tmp/                                               writes in progress
    .lock                                               held by the one writer at a time

``sha256`` is the ingested file's digest; ``gen`` counts how often its rows were rewritten
(0 at ingest, one more per ``recovery mark``). ``_store.json`` lists every committed Parquet
file with its partition values (run, sha256, gen, model). A write goes under ``_tmp`` first,
is renamed into place (the ``ingests`` partition last), and is committed by replacing
``_store.json`` (one rename). The views read exactly the files the manifest lists, each by its
literal path, so a write killed midway leaves the store reading exactly as before; the next
write removes what it left, and the generations a re-mark replaced.

Opening a local store first walks its tree without following links and refuses (an
:class:`~recovery.errors.InputProblem` naming the path) a symbolic link anywhere in it, or a
file or folder it did not write (an extra file in a committed partition, a stray folder, a
damaged manifest): nothing is read, written or removed then.

Everything here is DuckDB reading Parquet: any DuckDB client reads the store with the SQL of
:func:`views_sql`, locally or on object storage (``s3://...`` through DuckDB's ``httpfs``).
Writing needs a local folder (renames are atomic there, not on object storage).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.display import printable
from recovery.errors import InputProblem
from recovery.store.base import Store, relation_of
from recovery.store.ingest import IngestOptions, IngestResult

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    import duckdb

    from recovery.marking import RuleSet
    from recovery.schema import Trajectory

MARKER = "_store.json"
"""The store's manifest: the file that makes a folder a store and lists what is committed."""

LOCK = ".lock"
"""The file the one writer at a time holds a lock on."""

DATA_TABLES = ("trajectories", "turns", "error_spells")
"""Tables partitioned by run, then by ingested file."""

TABLES = ("ingests", *DATA_TABLES, "step_scores")

_KEYS = {"ingests": ("sha256", "gen"), "step_scores": ("model",)}
"""Each table's partition keys (the others: run, sha256, gen)."""
_KEY_TYPES = {"run": "VARCHAR", "sha256": "VARCHAR", "gen": "INTEGER", "model": "VARCHAR"}

_SHA = re.compile(r"[0-9a-f]{64}")
_GEN = re.compile(r"-1|0|[1-9][0-9]*")
_PARQUET = re.compile(r"[A-Za-z0-9_-]+\.parquet")
_PENDING_MARKER = re.compile(r"\._store\.json\.[0-9a-f]{32}")
"""A manifest being written (or left by a write killed before its rename)."""
_GLOB = "*?["
"""The characters DuckDB expands in a path it reads."""


def _keys(table: str) -> tuple[str, ...]:
    return _KEYS.get(table, ("run", "sha256", "gen"))


_EMPTY = {"run": "", "sha256": "", "gen": "-1", "model": ""}
"""Partition values of the empty file each table holds, so that a view always has a file to
read (its rows: none)."""


def _empty_path(table: str) -> str:
    """The empty file of ``table``, relative to the store's folder."""
    folders = "/".join(f"{key}={_EMPTY[key]}" for key in _keys(table))
    name = "data.parquet" if table == "step_scores" else "data_0.parquet"
    return f"{table}/{folders}/{name}"


_URL_SCHEMES = ("s3://", "s3a://", "gs://", "gcs://", "r2://", "az://", "azure://", "abfss://",
                "http://", "https://", "hf://")


def is_folder_store(path: str | Path | None) -> bool:
    """Whether ``path`` names a folder store rather than a DuckDB file.

    A folder store is: an existing directory; a path written with a trailing ``/`` (a folder
    to create); or an object-storage URL (``s3://bucket/runs``). Anything else is a DuckDB file
    (``runs.duckdb``, or ``runs`` when no such directory exists).
    """
    if path is None:
        return False
    text = str(path)
    if text == ":memory:":
        return False
    return text.startswith(_URL_SCHEMES) or text.endswith(("/", os.sep)) or Path(text).is_dir()


def _is_url(root: str) -> bool:
    return root.startswith(_URL_SCHEMES)


def _sql(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _encode(value: str) -> str:
    """A partition value as DuckDB writes it in a folder name (percent-encoded)."""
    from urllib.parse import quote

    text = quote(value, safe="")
    return "%5F" + text[1:] if text == "__HIVE_DEFAULT_PARTITION__" else text


def _literal(path: str) -> str:
    """``path`` written so that DuckDB reads that one file: it expands ``*``, ``?`` and
    ``[`` in a path it reads (``[*]`` matches only a ``*``).

    Raises:
        InputProblem: for a path holding both a backslash and one of those characters (DuckDB
            cannot match a backslash in a pattern).
    """
    if not any(c in path for c in _GLOB):
        return path
    if "\\" in path:
        raise InputProblem(
            f"store {printable(path)}: a path holding a backslash and one of * ? [ cannot be "
            "read exactly by DuckDB; give the store a folder name without them"
        )
    return "".join(f"[{c}]" if c in _GLOB else c for c in path)


def _columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """The columns of every table of the store, with their types (the column registry)."""
    from recovery.store.columns import TABLES as COLUMNS

    return {table: tuple((c.name, c.sql_type) for c in COLUMNS[table]) for table in TABLES}


# --------------------------------------------------------------------------------------------
# The manifest


@dataclass(frozen=True)
class Part:
    """One committed Parquet file of a folder store."""

    table: str
    path: str
    """Relative to the store's folder, ``/``-separated."""
    key: str = ""
    """The file's run (data tables) or model (``step_scores``); empty for ``ingests``."""


@dataclass(frozen=True)
class Manifest:
    """What ``_store.json`` commits: per ingested file (sha256) its generation and files, and
    each PRM model's scores file."""

    files: dict[str, tuple[int, tuple[Part, ...]]] = field(default_factory=dict)
    step_scores: dict[str, str] = field(default_factory=dict)

    def with_file(self, sha: str, gen: int, parts: Sequence[Part]) -> Manifest:
        """This manifest with ``sha``'s files replaced by ``parts`` of generation ``gen``."""
        return replace(self, files={**self.files, sha: (gen, tuple(parts))})

    def with_scores(self, model: str, path: str | None) -> Manifest:
        """This manifest with ``model``'s scores file set (``None``: removed)."""
        scores = {k: v for k, v in self.step_scores.items() if k != model}
        if path is not None:
            scores[model] = path
        return replace(self, step_scores=dict(sorted(scores.items())))

    def parts(self, table: str) -> list[tuple[Part, str, int]]:
        """Every committed file of ``table`` with its sha256 and generation."""
        if table == "step_scores":
            return [(Part(table, path, model), "", 0)
                    for model, path in sorted(self.step_scores.items())]
        return [(part, sha, gen) for sha, (gen, parts) in sorted(self.files.items())
                for part in parts if part.table == table]

    def paths(self) -> set[str]:
        """The relative path of every committed file."""
        return ({part.path for _, parts in self.files.values() for part in parts}
                | set(self.step_scores.values()))

    def to_text(self) -> str:
        """The manifest as ``_store.json`` holds it."""
        from recovery.store.ddl import SCHEMA_VERSION

        files = {
            sha: {"gen": gen, "parts": [
                {"table": p.table, "path": p.path, **({"run": p.key} if p.key or
                                                       p.table in DATA_TABLES else {})}
                for p in parts
            ]}
            for sha, (gen, parts) in sorted(self.files.items())
        }
        return json.dumps({"store": "agent-recovery", "layout": "parquet",
                           "schema_version": SCHEMA_VERSION, "files": files,
                           "step_scores": self.step_scores}, indent=1) + "\n"


def _data_folder(table: str, sha: str, gen: int, run: str = "") -> str:
    """A data table's (or ``ingests``') partition folder, relative to the store's folder."""
    if table == "ingests":
        return f"ingests/sha256={sha}/gen={gen}"
    return f"{table}/run={_encode(run)}/sha256={sha}/gen={gen}"


def _scores_path(model: str) -> str:
    return f"step_scores/model={_encode(model)}/data.parquet"


def parse_manifest(text: str, where: str | Path) -> Manifest:
    """Read the text of a ``_store.json``.

    Raises:
        InputProblem: naming ``where`` when it is not a manifest this toolkit wrote (not
            JSON, keys missing or of the wrong type, a path that is not the store's own) or
            was written for another schema version.
    """
    from recovery.store.ddl import SCHEMA_VERSION

    where = printable(where)

    def damaged(why: str) -> InputProblem:
        return InputProblem(
            f"store manifest {where} is damaged ({why}); the store cannot be read as it is: "
            "ingest its source files into a new folder store"
        )

    try:
        data = json.loads(text)
    except ValueError as err:
        raise damaged(f"not JSON: {err}") from None
    if not isinstance(data, dict):
        raise damaged("not a JSON object")
    if data.get("store") != "agent-recovery" or data.get("layout") != "parquet":
        raise damaged("not the manifest of a folder store of this toolkit")
    version = data.get("schema_version")
    if type(version) is not int:
        raise damaged("schema_version is not a whole number")
    if version > SCHEMA_VERSION:
        raise InputProblem(
            f"store manifest {where} has schema version {version}, written by a newer version "
            f"of this toolkit (this one reads version {SCHEMA_VERSION}): upgrade the toolkit "
            "to read this store"
        )
    # Version 2 folder stores already have this layout and these ids (the manifest and the
    # length-prefixed ids came in the same round): they read as they are.
    if version not in (2, SCHEMA_VERSION):
        raise InputProblem(
            f"store {where} has schema version {version}; this toolkit reads version "
            f"{SCHEMA_VERSION}: ingest its source files into a new folder store"
        )
    missing = [key for key in ("files", "step_scores") if key not in data]
    if missing:
        raise damaged("no " + " and no ".join(repr(k) for k in missing) + " key: it lists no "
                      "committed files (an earlier version of this toolkit wrote it, or it was "
                      "cut)")
    if not isinstance(data["files"], dict) or not isinstance(data["step_scores"], dict):
        raise damaged("'files' and 'step_scores' must be objects")
    files: dict[str, tuple[int, tuple[Part, ...]]] = {}
    for sha, entry in data["files"].items():
        if not _SHA.fullmatch(sha):
            raise damaged(f"{sha!r} is not a sha256")
        if (not isinstance(entry, dict) or type(entry.get("gen")) is not int
                or entry["gen"] < 0 or not isinstance(entry.get("parts"), list)):
            raise damaged(f"the entry of {sha} is not {{'gen': N, 'parts': [...]}}")
        gen, parts = entry["gen"], []
        for item in entry["parts"]:
            table = item.get("table") if isinstance(item, dict) else None
            if table not in ("ingests", *DATA_TABLES):
                raise damaged(f"a part of {sha} names no table of the store")
            run = item.get("run", "")
            path = item.get("path")
            if not isinstance(run, str) or not isinstance(path, str):
                raise damaged(f"a part of {sha} has no path or a run that is not text")
            folder, _, name = path.rpartition("/")
            if folder != _data_folder(table, sha, gen, run) or not _PARQUET.fullmatch(name):
                raise damaged(f"{printable(path)!r} is not a file of {sha}'s partition "
                              f"of {table}")
            parts.append(Part(table, path, run if table != "ingests" else ""))
        if not any(p.table == "ingests" for p in parts):
            raise damaged(f"{sha} has no ingests file")
        files[sha] = (gen, tuple(parts))
    scores: dict[str, str] = {}
    for model, path in data["step_scores"].items():
        if not model or path != _scores_path(model):
            raise damaged(f"{printable(str(path))!r} is not the scores file of model "
                          f"{printable(model)!r}")
        scores[model] = path
    return Manifest(files, scores)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _link_refused(root: Path | str, path: Path | str) -> InputProblem:
    return InputProblem(
        f"store {printable(root)} is refused: {printable(path)} is a symbolic link (a store "
        "holds none: through a link it would read or remove what lies outside it); remove "
        "the link"
    )


def _read_marker(root: Path) -> str:
    """The manifest's text, never through a link.

    Raises:
        InputProblem: when it is missing, a link, unreadable or not UTF-8.
    """
    path = root / MARKER
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputProblem(
            f"{printable(root)} is not a store of this toolkit: it has no {MARKER} (create one "
            f"with `recovery ingest FILES --store {printable(str(root).rstrip('/'))}/`)"
        ) from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _link_refused(root, path) from None
        raise InputProblem(f"store manifest {printable(path)} cannot be read: "
                           f"{err.strerror}") from None
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read()
    except OSError as err:  # e.g. a folder of that name
        raise InputProblem(f"store manifest {printable(path)} cannot be read: "
                           f"{err.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputProblem(
            f"store manifest {printable(path)} is damaged (not UTF-8 text); the store cannot "
            "be read as it is: ingest its source files into a new folder store"
        ) from None


def _write_manifest(root: Path, manifest: Manifest) -> None:
    """Commit ``manifest``: written beside ``_store.json``, then renamed over it."""
    tmp = root / f".{MARKER}.{uuid.uuid4().hex}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(manifest.to_text().encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, root / MARKER)
    _fsync_dir(root)


# --------------------------------------------------------------------------------------------
# The store's tree: every entry is one it wrote, none is a link


@dataclass
class _Survey:
    """What a walk of the store's tree found besides the committed files."""

    leftovers: list[Path] = field(default_factory=list)
    """Partition folders no committed file is in: an unfinished or replaced write."""
    folders: list[Path] = field(default_factory=list)
    """Folders above partitions (removed by the clean-up when empty), deepest last."""
    pending: list[Path] = field(default_factory=list)
    """Manifests left by a write killed before its rename."""


def _entries(folder: Path) -> list[os.DirEntry]:
    """The entries of ``folder``; none when it is gone (a leftover another writer removed)."""
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _survey(root: Path, manifest: Manifest) -> _Survey:
    """Walk the store's tree, links never followed.

    Raises:
        InputProblem: naming the path, for a symbolic link anywhere in the tree, a file or
            folder the store did not write (an unknown name, a non-Parquet file, a file in a
            committed partition that the manifest does not list), or a committed file that is
            missing.
    """
    expected = manifest.paths()
    empties = {_empty_path(table) for table in TABLES}
    wanted = expected | empties
    committed_folders = {path.rpartition("/")[0] for path in wanted}
    seen: set[str] = set()
    out = _Survey()

    def refuse(path: Path, why: str) -> InputProblem:
        return InputProblem(
            f"store {printable(root)} is damaged: {printable(path)} {why}; nothing was read "
            "or changed (move it out of the store, or ingest the source files into a new "
            "folder store)"
        )

    def kind(entry: os.DirEntry) -> str:
        if entry.is_symlink():
            raise _link_refused(root, entry.path)
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        if entry.is_file(follow_symlinks=False):
            return "file"
        raise refuse(Path(entry.path), "is neither a file nor a folder")

    def anything(folder: Path) -> None:  # _tmp: writes in progress, whatever their files
        for entry in _entries(folder):
            if kind(entry) == "dir":
                anything(Path(entry.path))

    def partitions(folder: Path, rel: str, keys: tuple[str, ...]) -> None:
        if not keys:
            for entry in _entries(folder):
                path = f"{rel}/{entry.name}"
                if kind(entry) != "file" or not _PARQUET.fullmatch(entry.name):
                    raise refuse(Path(entry.path), "is not a Parquet file of the store")
                if path in wanted:
                    seen.add(path)
                elif rel in committed_folders:
                    raise refuse(Path(entry.path), f"is in a committed partition but not "
                                 f"listed in {MARKER}, so it is not the store's")
            if rel not in committed_folders:
                out.leftovers.append(folder)
            return
        key = keys[0]
        for entry in _entries(folder):
            value = entry.name[len(key) + 1:]
            if kind(entry) != "dir" or not entry.name.startswith(key + "=") or (
                (key == "sha256" and value and not _SHA.fullmatch(value))
                or (key == "gen" and not _GEN.fullmatch(value))
            ):
                raise refuse(Path(entry.path), "is not a partition of the store")
            partitions(Path(entry.path), f"{rel}/{entry.name}", keys[1:])
        if "/" in rel:  # not the table's own folder
            out.folders.append(folder)

    for entry in _entries(root):
        name, path = entry.name, Path(entry.path)
        found = kind(entry)
        if name in (MARKER, LOCK) and found == "file":
            continue
        if _PENDING_MARKER.fullmatch(name) and found == "file":
            out.pending.append(path)
        elif name == "_tmp" and found == "dir":
            anything(path)
        elif name in TABLES and found == "dir":
            partitions(path, name, _keys(name))
        else:
            raise refuse(path, "is not one of the store's files or folders")
    for missing in sorted(wanted - seen):
        raise refuse(root / missing, f"is listed in {MARKER} (or is one of the store's own "
                     "empty files) but missing")
    return out


def _open(root: Path) -> tuple[Manifest, _Survey]:
    """The store's manifest, once its tree has been checked against it (read again when a
    writer committed meanwhile)."""
    for _ in range(10):
        text = _read_marker(root)
        manifest = parse_manifest(text, root / MARKER)
        try:
            survey = _survey(root, manifest)
        except InputProblem:
            if _read_marker(root) != text:
                continue  # a writer committed and cleaned up while the tree was walked
            raise
        return manifest, survey
    return manifest, _survey(root, manifest)


def _cleanup(root: Path, survey: _Survey) -> None:
    """Remove what the survey found unfinished or replaced (the writer's lock held)."""
    tmp = root / "_tmp"
    found = _lstat(tmp)
    if found is not None and not os.path.islink(tmp) and _is_dir(found):
        shutil.rmtree(tmp, ignore_errors=True)
    for folder in survey.leftovers:
        found = _lstat(folder)
        if found is not None and _is_dir(found):  # a real folder, never a link
            shutil.rmtree(folder, ignore_errors=True)
    for folder in sorted(survey.folders, key=lambda p: -len(p.parts)):
        _remove_if_empty(folder)
    for pending in survey.pending:
        pending.unlink(missing_ok=True)


def _is_dir(found: os.stat_result) -> bool:
    import stat

    return stat.S_ISDIR(found.st_mode)


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):
        folder.rmdir()


# --------------------------------------------------------------------------------------------
# The views


def _source(root: str, table: str, parts: Sequence[tuple[Part, str, int]]) -> str:
    """A ``SELECT`` of ``table``'s columns from exactly the files ``parts`` (each read by its
    literal path), with their partition values from the manifest, not from the paths."""
    keys = _keys(table)
    base = root.rstrip("/")
    files = ", ".join(_sql(_literal(f"{base}/{part.path}")) for part, _, _ in parts)
    rows = []
    for i, (part, sha, gen) in enumerate(parts):
        values = {"run": part.key, "model": part.key, "sha256": sha, "gen": str(gen)}
        if part.path == _empty_path(table):
            values = {**_EMPTY}
        rows.append("(" + ", ".join([str(i), *(
            values[key] if key == "gen" else _sql(values[key]) for key in keys)]) + ")")
    select = ", ".join(
        f"CAST({'k' if name in keys else 'f'}.{_quoted(name)} AS {kind}) AS {_quoted(name)}"
        for name, kind in _columns()[table]
    )
    return (
        f"SELECT {select}\nFROM read_parquet([{files}], hive_partitioning = false) AS f\n"
        f"JOIN (VALUES {', '.join(rows)}) AS k(file_index, {', '.join(keys)}) "
        "ON f.file_index = k.file_index"
    )


def _views_sql(root: str, manifest: Manifest, schema: str = "main") -> str:
    out = []
    for table in TABLES:
        empty = (Part(table, _empty_path(table)), "", -1)
        out.append(f"CREATE OR REPLACE VIEW {schema}.{table} AS\n"
                   f"{_source(root, table, [empty, *manifest.parts(table)])};")
    return "\n".join(out)


def _read_url_manifest(root: str, con: duckdb.DuckDBPyConnection | None) -> Manifest:
    import duckdb

    where = f"{root.rstrip('/')}/{MARKER}"
    reader = con if con is not None else duckdb.connect()
    try:
        (text,) = reader.execute("SELECT content FROM read_text(?)", [_literal(where)]).fetchone()
    except duckdb.Error as err:
        raise InputProblem(f"store {printable(root)} cannot be read: {err}") from None
    return parse_manifest(text, where)


def views_sql(root: str | Path, schema: str = "main", *,
              con: duckdb.DuckDBPyConnection | None = None) -> str:
    """The views that read a folder store, as SQL any DuckDB client can run.

    Each table's view reads exactly the Parquet files the store's ``_store.json`` commits
    (the latest generation of each ingested file, each model's scores), by their literal
    paths; the SQL is of the store as it is now (build it again to see later writes).

    Args:
        root: The store's folder or URL.
        schema: The schema the views go in.
        con: For a URL: the connection (with its ``httpfs`` secrets) to read the manifest
            through; by default a new one.

    Raises:
        InputProblem: when the folder is not a store, or holds a link or a file it did not
            write.
    """
    root = str(root)
    if _is_url(root):
        return _views_sql(root, _read_url_manifest(root, con), schema)
    resolved = str(Path(root).resolve())
    _literal(resolved + "/")
    return _views_sql(resolved, _open(Path(resolved))[0], schema)


def _refresh(con: duckdb.DuckDBPyConnection, root: Path, manifest: Manifest) -> None:
    """Point ``con``'s views at the files ``manifest`` commits."""
    con.execute(_views_sql(str(root), manifest))


# --------------------------------------------------------------------------------------------
# Opening


def open_folder(path: str | Path, *, read_only: bool = False) -> FolderStore:
    """The folder store ``path``: a DuckDB connection (in memory) whose tables are views over
    its Parquet files.

    The views read the store as it was when it was opened (and after each write made through
    this connection); open it again to see another process's later writes.

    Args:
        path: The folder (created with its layout when missing, unless ``read_only``), or an
            object-storage URL (read-only; DuckDB's ``httpfs`` extension reads it).
        read_only: Do not create anything; the folder must be a store.

    Raises:
        InputProblem: when the folder is not a store, its manifest is damaged, it holds a link
            or a file it did not write, or a URL is opened for writing.
    """
    import duckdb

    from recovery.store.ddl import SCHEMA_VERSION, VIEWS_DDL

    root = str(path).rstrip("/") or "/"
    con = duckdb.connect(":memory:")
    try:
        if _is_url(root):
            if not read_only:
                raise InputProblem(
                    f"store {printable(path)} is on object storage, which this toolkit only "
                    "reads (a rename there is not atomic): ingest into a local folder store, "
                    "then copy the folder"
                )
            manifest = _read_url_manifest(root, con)
        else:
            root = str(Path(root).resolve())
            _literal(root + "/")
            if not read_only:
                create_folder(root)
            manifest, _ = _open(Path(root))
        try:
            con.execute(_views_sql(root, manifest))
        except duckdb.Error as err:
            raise InputProblem(f"store {printable(path)} cannot be read: {err}") from None
    except BaseException:
        con.close()
        raise
    con.execute(
        "CREATE OR REPLACE VIEW store_info AS SELECT * FROM (VALUES "
        f"('schema_version', '{SCHEMA_VERSION}'), ('layout', 'parquet')) AS info(key, value)"
    )
    con.execute(VIEWS_DDL)
    return FolderStore(con, str(path), root=root, read_only=read_only)


class FolderStore(Store):
    """A folder of Parquet files read through views: each write stages its rows in an
    in-memory DuckDB store, writes them as new Parquet files, and commits them by replacing
    the manifest.

    Attributes:
        root: The store's folder (resolved), or its object-storage URL.
    """

    kind = "folder"

    def __init__(self, con: duckdb.DuckDBPyConnection, location: str, *, root: str,
                 read_only: bool = False) -> None:
        super().__init__(con, location, read_only=read_only)
        self.root = root

    def _writable_root(self, what: str) -> Path:
        self._check_writable(what)
        return Path(self.root)

    def ingest_file(self, path: str | Path, options: IngestOptions | None = None) -> IngestResult:
        """See :meth:`recovery.store.Store.ingest_file`: the file is staged in an in-memory
        DuckDB store (the same code as a DuckDB store), then its partitions are written and
        committed."""
        return _ingest_into_folder(self.con, self._writable_root("ingest"), Path(path),
                                   options or IngestOptions())

    def _ingest_trajectories(self, trajectories: Iterable[Trajectory], source: str,
                             options: IngestOptions) -> IngestResult:
        """Refused: a folder store is partitioned by ingested file (write the trajectories as
        canonical JSONL with :func:`recovery.schema.trajectory_to_dict` and ingest the file).

        Raises:
            IngestError: always.
        """
        from recovery.store.errors import IngestError

        raise IngestError(
            f"{source}: trajectories built in Python go into a DuckDB store; a folder store "
            "takes files (write them as canonical JSONL, then ingest the file)"
        )

    def _mark(self, rules: RuleSet | None, traj_ids: Sequence[str] | None,
              prm_model: str | None, prm_threshold: float) -> dict[str, int]:
        """Every ingested file holding some of the trajectories gets its partitions rewritten,
        re-marked, as a new generation, committed file by file (a mark stopped midway leaves
        each file marked the old way or the new way, never a mix; running it again finishes
        it)."""
        return _mark_folder(self.con, Path(self.root), rules=rules, traj_ids=traj_ids,
                            prm_model=prm_model, prm_threshold=prm_threshold)

    def replace_step_scores(self, scores: Any, model: str) -> None:
        """See :meth:`recovery.store.Store.replace_step_scores`: the model's file is
        rewritten whole, then renamed over the old one (a new model's file is committed in
        ``_store.json``)."""
        root = self._writable_root("write step scores")
        name, done = relation_of(self.con, scores)
        try:
            _replace_folder_step_scores(self.con, root, name, model)
        finally:
            done()

    def remove_if_unused(self) -> bool:
        """See :meth:`recovery.store.Store.remove_if_unused`: the folder goes only when,
        under its writer's lock (not waited for), it still holds nothing but its empty
        layout."""
        self.close()
        return remove_unused_folder(self.root)


def _check_new_folder(root: Path) -> None:
    found = _lstat(root)
    if found is not None and not _is_dir(found):
        raise InputProblem(f"store {printable(root)}: a file of that name exists (a folder "
                           "store is a folder)")
    if found is not None and any(e.name != LOCK for e in _entries(root)):
        raise InputProblem(
            f"{printable(root)} is a folder that is not empty and not a store: give an empty "
            "or new folder for a folder store"
        )


def create_folder(root: str | Path) -> None:
    """Make ``root`` a folder store (idempotent): the manifest and each table's empty file,
    made under the writer's lock."""
    root = Path(root)
    if _lstat(root / MARKER) is not None:
        return
    _check_new_folder(root)
    with _locked(root):
        if _lstat(root / MARKER) is None:
            _make_layout(root)


def _make_layout(root: Path) -> None:
    """Write a new store's empty files and manifest (the lock held, no manifest there)."""
    import duckdb

    from recovery.store.ddl import TABLES_DDL

    _check_new_folder(root)
    tables = _columns()
    with duckdb.connect() as con:
        con.execute(TABLES_DDL)
        for table in TABLES:
            keys = _keys(table)
            target = root / _empty_path(table)
            target.parent.mkdir(parents=True, exist_ok=True)
            columns = ", ".join(_quoted(name) for name, _ in tables[table] if name not in keys)
            con.execute(
                f"COPY (SELECT {columns} FROM {table} WHERE false) TO {_sql(str(target))} "
                "(FORMAT parquet, COMPRESSION zstd)"
            )
    _write_manifest(root, Manifest())


# --------------------------------------------------------------------------------------------
# The writer's lock, and what a killed write leaves behind


def _read_only(root: Path, err: OSError) -> InputProblem:
    return InputProblem(
        f"store {printable(root)} is read-only (its lock file {LOCK} cannot be opened for "
        f"writing: {err.strerror}); commands that only read it (analyze, sql) work, writing "
        "needs write access to the folder"
    )


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold the store's lock file (created when missing, never through a link)."""
    import fcntl

    lock = root / LOCK
    for _ in range(10):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # the folder is missing: made (again)
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise InputProblem(f"store {printable(root)} cannot be created: "
                                   f"{err.strerror}") from None
            continue
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise _link_refused(root, lock) from None
            if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise _read_only(root, err) from None
            raise InputProblem(f"store {printable(root)}: {LOCK} cannot be opened: "
                               f"{err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held, now = os.fstat(fd), _lstat(lock)
            if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                continue  # the store was removed (or made again) while this waited
            yield
            return
        finally:
            os.close(fd)
    raise InputProblem(f"store {printable(root)}: its lock file kept being replaced while "
                       "this command waited for it; run it again")


@contextlib.contextmanager
def writer_lock(root: str | Path) -> Iterator[Manifest]:
    """Hold the folder's write lock (one writer at a time; readers never wait), check the
    store's tree, first remove what earlier writes left (unfinished writes, replaced
    generations), and give the committed manifest.

    A store removed meanwhile (by a failed ingest that had made it) is made again.

    Raises:
        InputProblem: when the store is read-only, damaged, or holds a link (nothing is
            removed then).
    """
    root = Path(root)
    with _locked(root):
        if _lstat(root / MARKER) is None:
            _make_layout(root)
        manifest, survey = _open(root)
        _cleanup(root, survey)
        yield manifest


def remove_unused_folder(root: str | Path) -> bool:
    """Remove the folder store ``root`` if it holds nothing but what :func:`create_folder`
    made: no committed file, no scores, no write of another process in progress (checked and
    removed under the writer's lock, without waiting for it).

    Returns:
        Whether it was removed (otherwise it is left exactly as it was).
    """
    import fcntl

    root = Path(root).resolve()
    lock = root / LOCK
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # another writer holds it
        held, now = os.fstat(fd), _lstat(lock)
        if now is None or (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            return False
        try:
            manifest, survey = _open(root)
        except InputProblem:
            return False
        if manifest.files or manifest.step_scores or survey.leftovers or survey.pending:
            return False
        if _entries(root / "_tmp"):
            return False
        made = [root / _empty_path(table) for table in TABLES]
        try:
            (root / MARKER).unlink()
            for file in made:
                file.unlink()
                for folder in file.relative_to(root).parents[:-1]:
                    _remove_if_empty(root / folder)
            _remove_if_empty(root / "_tmp")
            lock.unlink()
            root.rmdir()
        except OSError:
            return not root.exists()
        return True
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Writing one ingested file's rows


STAGE_MEMORY = "1GB"
"""DuckDB's memory limit for the in-memory store a write is staged in (beyond it, DuckDB
spills to the store's ``_tmp`` folder): what bounds a folder store's memory, whatever the
size of the file."""


def _stage_connection(root: Path, work: Path, manifest: Manifest) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB store for one write, spilling to ``work`` beyond its memory limit."""
    import duckdb

    from recovery.store.ddl import ensure_schema

    spill = work / "spill"
    spill.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(
        ":memory:", config={"temp_directory": str(spill), "memory_limit": STAGE_MEMORY}
    )
    con.execute("SET enable_progress_bar = false")
    ensure_schema(con)
    # The store's own rows, for what a write must check against (a trajectory already there).
    con.execute("CREATE SCHEMA store")
    con.execute(_views_sql(str(root), manifest, schema="store"))
    return con


def _written(folder: Path, names: dict[str, str]) -> list[tuple[Path, str]]:
    """The partition folders DuckDB wrote under ``folder`` (``key=<encoded>``), each with the
    value it holds, from ``names`` (folder name -> value)."""
    out = []
    for entry in _entries(folder):
        if entry.name not in names:  # DuckDB encoded a value differently: a bug to report
            raise RuntimeError(f"unexpected partition {entry.path} written by DuckDB")
        out.append((Path(entry.path), names[entry.name]))
    return out


def _write_partitions(
    stage: duckdb.DuckDBPyConnection, work: Path, sha: str, gen: int
) -> tuple[list[tuple[Path, str]], list[Part]]:
    """Write the stage's rows as partitions under ``work``; return the (written folder,
    final relative folder) pairs to rename, the ``ingests`` one last, and the files."""
    renames: list[tuple[Path, str]] = []
    parts: list[Part] = []
    work.mkdir(parents=True, exist_ok=True)
    tables = _columns()
    runs = [row[0] for row in stage.execute("SELECT DISTINCT run FROM trajectories").fetchall()]
    run_names = {f"run={_encode(run)}": run for run in runs}
    for table in (*DATA_TABLES, "ingests"):
        columns = ", ".join(f"x.{_quoted(name)}" for name, _ in tables[table])
        if table == "ingests":
            source = f"SELECT {columns}, {gen} AS gen FROM ingests x"
            keys = "sha256, gen"
        elif table == "trajectories":
            source = f"SELECT {columns}, {_sql(sha)} AS sha256, {gen} AS gen FROM trajectories x"
            keys = "run, sha256, gen"
        else:
            source = (
                f"SELECT {columns}, tr.run, {_sql(sha)} AS sha256, {gen} AS gen "
                f"FROM {table} x JOIN trajectories tr USING (traj_id)"
            )
            keys = "run, sha256, gen"
        target = work / table
        stage.execute(
            f"COPY ({source}) TO {_sql(str(target))} "
            f"(FORMAT parquet, COMPRESSION zstd, PARTITION_BY ({keys}))"
        )
        leaves = (
            [(target / f"sha256={sha}" / f"gen={gen}", "")] if table == "ingests"
            else [(folder / f"sha256={sha}" / f"gen={gen}", run)
                  for folder, run in _written(target, run_names)]
        )
        for leaf, run in leaves:
            if not leaf.is_dir():
                continue
            final = _data_folder(table, sha, gen, run)
            renames.append((leaf, final))
            parts.extend(Part(table, f"{final}/{e.name}", run) for e in _entries(leaf))
    return renames, parts


def _commit(root: Path, renames: Sequence[tuple[Path, str]], manifest: Manifest) -> None:
    """Rename the written partitions into the store, the ``ingests`` one last, once the
    others are on disk; then commit them: ``manifest`` replaces ``_store.json``."""
    for written, final in renames:
        target = root / final
        target.parent.mkdir(parents=True, exist_ok=True)
        _fsync_tree(written)
        os.rename(written, target)
        _fsync_dir(target.parent)
    _write_manifest(root, manifest)


def _fsync_tree(folder: Path) -> None:
    for entry in _entries(folder):
        if entry.is_file(follow_symlinks=False):
            with open(entry.path, "rb") as fh:
                os.fsync(fh.fileno())


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _ingest_into_folder(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    path: Path,
    options: IngestOptions,
) -> IngestResult:
    """Ingest one file into the folder store ``root``: stage it in an in-memory DuckDB store
    (the same code as a DuckDB store), then write its partitions and commit them.

    Args:
        con: The folder store's connection (its views are brought up to date).
        root: The store's folder.
        path: The input.
        options: Ingest options.

    Raises:
        IngestError: as for a DuckDB store; nothing is written then.
        InputProblem: when the store is read-only, damaged or holds a link.
    """
    import duckdb

    from recovery.store.errors import IngestError
    from recovery.store.ingest import ingest_into

    with writer_lock(root) as manifest:
        _refresh(con, root, manifest)  # what other writers committed since it was opened
        work = root / "_tmp" / uuid.uuid4().hex
        work.mkdir(parents=True)
        stage = _stage_connection(root, work, manifest)
        try:
            result = ingest_into(stage, path, options, seen_in=con)
            if result.status != "ingested":
                return result
            clash = stage.execute(
                """
                SELECT n.run, n.task_id, n.source_file, n.source_line, o.source_file,
                       o.source_line
                FROM trajectories n JOIN store.trajectories o USING (traj_id)
                ORDER BY n.source_line LIMIT 1
                """
            ).fetchall()
            if clash:
                run, task, file, line, first_file, first_line = clash[0]
                raise IngestError(
                    f"{file}:{line}: trajectory (run={run!r}, task_id={task!r}) with the same "
                    f"sample is already in the store (from {first_file}:{first_line}); give "
                    "samples distinct 'sample' values, or give this file a run label of its "
                    "own (`recovery ingest FILE --run NAME --store S`, then analyse the store);"
                    " nothing from this file was stored"
                )
            try:
                renames, parts = _write_partitions(stage, work / "new", result.sha256, 0)
            except duckdb.Error as err:
                if "File name too long" in str(err):
                    raise IngestError(
                        f"{path}: a run label is too long for a folder name of the store "
                        "(at most 255 bytes, once percent-encoded: 251 ASCII letters and "
                        "digits, fewer otherwise); give the file a shorter one with --run; "
                        "nothing from this file was stored"
                    ) from None
                raise
            manifest = manifest.with_file(result.sha256, 0, parts)
            _commit(root, renames, manifest)
            _refresh(con, root, manifest)
            return result
        finally:
            stage.close()
            shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Re-marking: each ingested file's partitions rewritten as a new generation


def _mark_folder(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    *,
    rules: RuleSet | None,
    traj_ids: Sequence[str] | None,
    prm_model: str | None,
    prm_threshold: float,
) -> dict[str, int]:
    """:meth:`FolderStore.mark`: each ingested file's rows are staged, marked by the DuckDB
    store's code (:func:`recovery.store.marks.write_marks`), and written as a new generation.

    Returns:
        Error turns per kind among the re-marked trajectories.
    """
    from recovery.store.ingest import in_transaction
    from recovery.store.marks import write_marks

    counts: dict[str, int] = {}
    with writer_lock(root) as manifest:
        for sha, (gen, parts) in sorted(manifest.files.items()):
            work = root / "_tmp" / uuid.uuid4().hex
            work.mkdir(parents=True)
            stage = _stage_connection(root, work, manifest)
            try:
                if not _load_file(stage, root, sha, gen, parts, traj_ids,
                                  scores=prm_model is not None):
                    continue
                for kind, n in in_transaction(stage, lambda stage=stage: write_marks(
                    stage, rules, traj_ids, prm_model=prm_model, prm_threshold=prm_threshold,
                )).items():
                    counts[kind] = counts.get(kind, 0) + n
                renames, new_parts = _write_partitions(stage, work / "new", sha, gen + 1)
                manifest = manifest.with_file(sha, gen + 1, new_parts)
                _commit(root, renames, manifest)
            finally:
                stage.close()
                shutil.rmtree(work, ignore_errors=True)
        _refresh(con, root, manifest)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _load_file(
    stage: duckdb.DuckDBPyConnection, root: Path, sha: str, gen: int, parts: Sequence[Part],
    traj_ids: Sequence[str] | None, *, scores: bool,
) -> bool:
    """Copy one ingested file's committed rows from the store into the stage; ``False`` (and
    nothing copied) when ``traj_ids`` are given and the file holds none of them."""
    for table in ("ingests", *DATA_TABLES):
        files = [(part, sha, gen) for part in parts if part.table == table]
        if files:
            stage.execute(f"INSERT INTO {table} {_source(str(root), table, files)}")
        if table == "trajectories" and traj_ids is not None:
            (n,) = stage.execute(
                "SELECT count(*) FROM trajectories WHERE list_contains(?, traj_id)",
                [list(traj_ids)],
            ).fetchone()
            if not n:
                return False
    if scores:
        stage.execute(
            "INSERT INTO step_scores SELECT * FROM store.step_scores "
            "WHERE traj_id IN (SELECT traj_id FROM trajectories)"
        )
    return True


# --------------------------------------------------------------------------------------------
# Step scores: one file per model, replaced whole


def _replace_folder_step_scores(
    con: duckdb.DuckDBPyConnection, root: Path, scores: str, model: str
) -> None:
    """:meth:`FolderStore.replace_step_scores` of the relation ``scores`` (``traj_id, t,
    score`` on ``con``)."""
    if not model:
        raise InputProblem("a PRM model of a folder store needs a name (got an empty one)")
    with writer_lock(root) as manifest:
        _refresh(con, root, manifest)
        work = root / "_tmp" / uuid.uuid4().hex
        work.mkdir(parents=True)
        try:
            con.execute(
                f"""
                COPY (
                    SELECT traj_id, t, score, model FROM step_scores
                    WHERE model = $model
                      AND traj_id NOT IN (SELECT DISTINCT traj_id FROM {scores})
                    UNION ALL
                    SELECT traj_id::VARCHAR, t::INTEGER, score::DOUBLE, $model::VARCHAR
                    FROM {scores}
                ) TO {_sql(str(work / "step_scores"))}
                (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (model))
                """,
                {"model": model},
            )
            name = f"model={_encode(model)}"
            written_dirs = _written(work / "step_scores", {name: model})
            target = root / _scores_path(model)
            if not written_dirs:  # no score left for the model: its file goes
                if model in manifest.step_scores:
                    manifest = manifest.with_scores(model, None)
                    _write_manifest(root, manifest)
                    target.unlink(missing_ok=True)
                    _remove_if_empty(target.parent)
                _refresh(con, root, manifest)
                return
            ((written, _),) = written_dirs
            target.parent.mkdir(parents=True, exist_ok=True)
            files = sorted(Path(e.path) for e in _entries(written))
            if len(files) == 1:
                _fsync_tree(written)
                os.replace(files[0], target)
            else:  # DuckDB wrote several files: merge them into one first
                merged = work / "merged.parquet"
                listed = ", ".join(_sql(_literal(str(f))) for f in files)
                con.execute(
                    f"COPY (SELECT * FROM read_parquet([{listed}])) "
                    f"TO {_sql(str(merged))} (FORMAT parquet, COMPRESSION zstd)"
                )
                os.replace(merged, target)
            _fsync_dir(target.parent)
            if manifest.step_scores.get(model) != _scores_path(model):
                manifest = manifest.with_scores(model, _scores_path(model))
                _write_manifest(root, manifest)
            _refresh(con, root, manifest)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def readable_folders(root: str | Path) -> list[str]:
    """The folders a sandboxed connection to the folder store ``root`` must be allowed to read
    (DuckDB's ``allowed_directories``): the folder, and the same path as the views write it
    (DuckDB checks both the pattern and the file it matches)."""
    folder = str(Path(root).resolve()).rstrip("/") + "/"
    return list(dict.fromkeys([folder, _literal(folder)]))
