"""A folder store's manifest, ``_store.json``: what is committed, and the layout it names.

The manifest is the commit: a write renames its Parquet files into the store, then replaces
``_store.json`` (one rename). It lists every committed file with its partition values and
carries a ``generation``, one more at every commit, which the store's journal
(:mod:`recovery.store.folder_journal`) compares to find a manifest older than the store's
last commit. A manifest without a generation (written before there was one) still reads.

It is parsed strictly (:func:`recovery.ownfiles.parse_own_json`: no key twice, no NaN,
nesting bounded), opened without following a link and without blocking on a FIFO; anything
wrong is one :class:`~recovery.errors.InputProblem` line naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from recovery.display import printable
from recovery.errors import InputProblem

MARKER = "_store.json"
"""The store's manifest: the file that makes a folder a store and lists what is committed."""

LOCK = ".lock"
"""The file the one writer at a time holds a lock on."""

UNFINISHED = "_store.unfinished"
"""Present while a store is being made or removed: a folder holding it (and no manifest) is
this toolkit's half-made store, which the next write finishes making."""

DATA_TABLES = ("trajectories", "turns", "error_spells")
"""Tables partitioned by run, then by ingested file."""

TABLES = ("ingests", *DATA_TABLES, "step_scores")

_KEYS = {"ingests": ("sha256", "gen"), "step_scores": ("model",)}
"""Each table's partition keys (the others: run, sha256, gen)."""

SHA = re.compile(r"[0-9a-f]{64}")
GEN = re.compile(r"-1|0|[1-9][0-9]*")
PARQUET = re.compile(r"[A-Za-z0-9_-]+\.parquet")
PENDING = re.compile(r"\.(_store|_journal)\.json\.[0-9a-f]{32}")
"""A manifest or journal being written (or left by a write killed before its rename)."""

MAX_MANIFEST_BYTES = 256 * 1024 * 1024
"""Largest manifest read (a million parts take about 200 MB)."""

EMPTY = {"run": "", "sha256": "", "gen": "-1", "model": ""}
"""Partition values of the empty file each table holds, so that a view always has a file to
read (its rows: none)."""


def keys_of(table: str) -> tuple[str, ...]:
    """The partition keys of ``table``, outermost first."""
    return _KEYS.get(table, ("run", "sha256", "gen"))


def empty_path(table: str) -> str:
    """The empty file of ``table``, relative to the store's folder."""
    folders = "/".join(f"{key}={EMPTY[key]}" for key in keys_of(table))
    name = "data.parquet" if table == "step_scores" else "data_0.parquet"
    return f"{table}/{folders}/{name}"


def encode(value: str) -> str:
    """A partition value as DuckDB writes it in a folder name (percent-encoded)."""
    from urllib.parse import quote

    text = quote(value, safe="")
    return "%5F" + text[1:] if text == "__HIVE_DEFAULT_PARTITION__" else text


def data_folder(table: str, sha: str, gen: int, run: str = "") -> str:
    """A data table's (or ``ingests``') partition folder, relative to the store's folder."""
    if table == "ingests":
        return f"ingests/sha256={sha}/gen={gen}"
    return f"{table}/run={encode(run)}/sha256={sha}/gen={gen}"


def scores_path(model: str) -> str:
    """The scores file of PRM model ``model``, relative to the store's folder."""
    return f"step_scores/model={encode(model)}/data.parquet"


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
    """What ``_store.json`` commits: per ingested file (sha256) its generation and files, each
    PRM model's scores file, and the commit's generation (``None``: a manifest written before
    generations were counted)."""

    files: dict[str, tuple[int, tuple[Part, ...]]] = field(default_factory=dict)
    step_scores: dict[str, str] = field(default_factory=dict)
    generation: int | None = 0

    def with_file(self, sha: str, gen: int, parts: Sequence[Part]) -> Manifest:
        """This manifest with ``sha``'s files replaced by ``parts`` of generation ``gen``."""
        return replace(self, files={**self.files, sha: (gen, tuple(parts))})

    def with_scores(self, model: str, path: str | None) -> Manifest:
        """This manifest with ``model``'s scores file set (``None``: removed)."""
        scores = {k: v for k, v in self.step_scores.items() if k != model}
        if path is not None:
            scores[model] = path
        return replace(self, step_scores=dict(sorted(scores.items())))

    def next_commit(self) -> Manifest:
        """This manifest as the next commit writes it (its generation one more)."""
        return replace(self, generation=(self.generation or 0) + 1)

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

    def folders(self) -> set[str]:
        """The relative folder of every committed file."""
        return {path.rpartition("/")[0] for path in self.paths()}

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
                           "schema_version": SCHEMA_VERSION,
                           "generation": self.generation or 0, "files": files,
                           "step_scores": self.step_scores}, indent=1) + "\n"


def _damaged(where: str, why: str) -> InputProblem:
    return InputProblem(
        f"store manifest {where} is damaged ({why}); the store cannot be read as it is: "
        "ingest its source files into a new folder store"
    )


def _check_header(data: Any, where: str) -> None:
    """Refuse a document that is not a manifest of a schema version this toolkit reads."""
    from recovery.store.ddl import SCHEMA_VERSION

    if not isinstance(data, dict):
        raise _damaged(where, "not a JSON object")
    if data.get("store") != "agent-recovery" or data.get("layout") != "parquet":
        raise _damaged(where, "not the manifest of a folder store of this toolkit")
    version = data.get("schema_version")
    if type(version) is not int:
        raise _damaged(where, "schema_version is not a whole number")
    if version > SCHEMA_VERSION:
        raise InputProblem(
            f"store manifest {where} has schema version {version}, written by a newer version "
            f"of this toolkit (this one reads version {SCHEMA_VERSION}): upgrade the toolkit "
            "to read this store"
        )
    # Version 2 folder stores already have this layout and these ids (the manifest and the
    # length-prefixed ids came in the same round), and version 3 differs only in views a
    # folder store builds at every open: they read as they are.
    if version not in (2, 3, SCHEMA_VERSION):
        raise InputProblem(
            f"store {where} has schema version {version}; this toolkit reads version "
            f"{SCHEMA_VERSION}: ingest its source files into a new folder store"
        )
    missing = [key for key in ("files", "step_scores") if key not in data]
    if missing:
        raise _damaged(where, "no " + " and no ".join(repr(k) for k in missing) + " key: it "
                       "lists no committed files (an earlier version of this toolkit wrote it, "
                       "or it was cut)")
    if not isinstance(data["files"], dict) or not isinstance(data["step_scores"], dict):
        raise _damaged(where, "'files' and 'step_scores' must be objects")
    generation = data.get("generation", 0)
    if type(generation) is not int or generation < 0:
        raise _damaged(where, "generation is not a whole number of at least 0")


def _file_entry(sha: str, entry: Any, where: str) -> tuple[int, tuple[Part, ...]]:
    """One ingested file's entry of ``files``: its generation and parts, each listed once."""
    if not SHA.fullmatch(sha):
        raise _damaged(where, f"{sha!r} is not a sha256")
    if (not isinstance(entry, dict) or type(entry.get("gen")) is not int
            or entry["gen"] < 0 or not isinstance(entry.get("parts"), list)):
        raise _damaged(where, f"the entry of {sha} is not {{'gen': N, 'parts': [...]}}")
    gen, parts, seen = entry["gen"], [], set()
    for item in entry["parts"]:
        table = item.get("table") if isinstance(item, dict) else None
        if table not in ("ingests", *DATA_TABLES):
            raise _damaged(where, f"a part of {sha} names no table of the store")
        run = item.get("run", "")
        path = item.get("path")
        if not isinstance(run, str) or not isinstance(path, str):
            raise _damaged(where, f"a part of {sha} has no path or a run that is not text")
        folder, _, name = path.rpartition("/")
        if folder != data_folder(table, sha, gen, run) or not PARQUET.fullmatch(name):
            raise _damaged(where, f"{printable(path)!r} is not a file of {sha}'s partition "
                           f"of {table}")
        if path in seen:  # read twice, its rows would count twice
            raise _damaged(where, f"{printable(path)!r} is listed twice")
        seen.add(path)
        parts.append(Part(table, path, run if table != "ingests" else ""))
    if not any(p.table == "ingests" for p in parts):
        raise _damaged(where, f"{sha} has no ingests file")
    return gen, tuple(parts)


def parse_manifest(text: str, where: str | Path) -> Manifest:
    """Read the text of a ``_store.json``, strictly.

    Raises:
        InputProblem: naming ``where`` when it is not a manifest this toolkit wrote (not
            JSON, a key twice, nested too deep, keys missing or of the wrong type, a path
            that is not the store's own, a file listed twice) or was written for another
            schema version.
    """
    from recovery.ownfiles import parse_own_json

    shown = printable(where)
    try:
        data = parse_own_json(text, where, "store manifest")
    except InputProblem as err:
        raise InputProblem(f"{err}; the store cannot be read as it is: ingest its source "
                           "files into a new folder store") from None
    _check_header(data, shown)
    files = {sha: _file_entry(sha, entry, shown) for sha, entry in data["files"].items()}
    scores: dict[str, str] = {}
    for model, path in data["step_scores"].items():
        if not model or path != scores_path(model):
            raise _damaged(shown, f"{printable(str(path))!r} is not the scores file of model "
                           f"{printable(model)!r}")
        scores[model] = path
    generation = data.get("generation")
    return Manifest(files, scores, generation)


def lstat(path: Path) -> os.stat_result | None:
    """``os.lstat(path)``; ``None`` when nothing is there (or a parent is not a folder)."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def link_refused(root: Path | str, path: Path | str) -> InputProblem:
    """The refusal of a symbolic link found in the store ``root``."""
    return InputProblem(
        f"store {printable(root)} is refused: {printable(path)} is a symbolic link (a store "
        "holds none: through a link it would read or remove what lies outside it); remove "
        "the link"
    )


def read_own_file(root: Path, name: str, what: str) -> str | None:
    """The text of the store's own file ``name``; ``None`` when it is missing.

    Never through a link, never blocking on a FIFO, at most :data:`MAX_MANIFEST_BYTES`.

    Raises:
        InputProblem: naming the file: a link, not a regular file, too large, unreadable,
            not UTF-8.
    """
    import stat

    path = root / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise link_refused(root, path) from None
        raise InputProblem(f"{what} {printable(path)} cannot be read: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputProblem(f"{what} {printable(path)} is not a regular file (a store "
                               "writes it as one); move it out of the store")
        if info.st_size > MAX_MANIFEST_BYTES:
            raise InputProblem(f"{what} {printable(path)} is {info.st_size} bytes; the "
                               f"limit is {MAX_MANIFEST_BYTES}")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_MANIFEST_BYTES + 1)
    except OSError as err:
        raise InputProblem(f"{what} {printable(path)} cannot be read: {err.strerror}") from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputProblem(
            f"{what} {printable(path)} is damaged (not UTF-8 text); the store cannot be read "
            "as it is: ingest its source files into a new folder store"
        ) from None


def read_marker(root: Path) -> str:
    """The manifest's text (see :func:`read_own_file`).

    Raises:
        InputProblem: as :func:`read_own_file`, and when it is missing (saying how to make
            or finish the store).
    """
    text = read_own_file(root, MARKER, "store manifest")
    if text is not None:
        return text
    folder = printable(str(root).rstrip("/"))
    if lstat(root / UNFINISHED) is not None:
        raise InputProblem(
            f"store {folder} was stopped while it was being made or removed ({UNFINISHED} "
            f"is there, {MARKER} is not); `recovery ingest FILES --store {folder}/` finishes "
            "making it"
        )
    raise InputProblem(
        f"{folder} is not a store of this toolkit: it has no {MARKER} (create one with "
        f"`recovery ingest FILES --store {folder}/`)"
    )


def write_own_file(root: Path, name: str, text: str) -> None:
    """Replace the store's file ``name`` with ``text``: written beside it (durably), then
    renamed over it."""
    tmp = root / f".{name}.{uuid.uuid4().hex}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(text.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, root / name)
    fsync_dir(root)


def write_manifest(root: Path, manifest: Manifest) -> None:
    """Commit ``manifest``: written beside ``_store.json``, then renamed over it."""
    write_own_file(root, MARKER, manifest.to_text())


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the platform allows)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
