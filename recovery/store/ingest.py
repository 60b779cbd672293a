"""Atomic, idempotent ingest: one transaction per file, rows in as Arrow batches.

A file that fails leaves the store exactly as it was; a file whose sha256 is already recorded is
skipped. Plainly valid canonical JSONL is parsed by DuckDB itself
(:mod:`recovery.store.fast_canonical`); every other input goes through its reader
(:mod:`recovery.formats`) and :class:`_BatchWriter`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.formats import (
    ReadOptions,
    detect_format,
    get_reader,
    read_file,
)
from recovery.formats.files import special_kind
from recovery.schema import (
    RecordError,
    Trajectory,
    compact_json,
    text_problem,
)
from recovery.store.columns import TRAJECTORY_COLUMNS, TURN_COLUMNS, arrow_schema
from recovery.store.digest import FileDigest, directory_digest, file_digest, make_traj_id
from recovery.store.errors import IngestError

if TYPE_CHECKING:
    import duckdb

    from recovery.marking import RuleSet
    from recovery.store.fast_canonical import FastIngest
    from recovery.store.fast_probe import SchemaProbe

@dataclass(frozen=True, slots=True)
class IngestOptions(ReadOptions):
    """Options of one ingest (the Python face of ``recovery ingest``): what every reader is
    told (:class:`recovery.formats.ReadOptions`: ``run``, ``success_threshold``,
    ``max_record_bytes``, ``inspect_success``, ``inspect_scorer``, ``results``), and what the
    store does with what they read. Checked when made, so that Python callers get the same
    refusals as the command line.

    Attributes:
        format: Format name; ``None`` detects it per file.
        skip_bad: Store the good records of a file with bad ones, and count the skipped.
        batch_turns: Turns per Arrow batch; bounds memory.
        rules: Error rules for marking; ``None`` = the built-in rules only.
        mark: Run error marking on the new trajectories inside the same transaction.
        fast: Let DuckDB parse plainly valid canonical JSONL itself (see
            :mod:`recovery.store.fast_canonical`); the Python reader handles everything else and
            is used for all files when false.

    Raises:
        UnknownFormatError: for a format no reader has.
        UsageProblem: for a size that is not positive, or a threshold that is not a number.
    """

    format: str | None = None
    skip_bad: bool = False
    batch_turns: int = 200_000
    rules: RuleSet | None = None
    mark: bool = True
    fast: bool = True

    def __post_init__(self) -> None:
        import math

        from recovery.errors import UsageProblem

        if self.format is not None:
            get_reader(self.format)  # an unknown name lists the known ones
        if self.max_record_bytes <= 0:
            raise UsageProblem(f"the largest record must be > 0 bytes, not {self.max_record_bytes}")
        if self.batch_turns <= 0:
            raise UsageProblem(f"turns per batch must be > 0, not {self.batch_turns}")
        if not math.isfinite(self.success_threshold):
            raise UsageProblem(f"the success threshold must be a number, not "
                               f"{self.success_threshold}")

    def read_options(self) -> ReadOptions:
        """What the readers are told (this options' :class:`ReadOptions` fields)."""
        return ReadOptions(**{f.name: getattr(self, f.name) for f in fields(ReadOptions)})


@dataclass(slots=True)
class IngestResult:
    """What happened to one file.

    Attributes:
        file: The input path.
        format: Format used (empty when it could not be told).
        status: ``"ingested"``, ``"skipped"`` (already in the store) or ``"failed"``
            (nothing from it was stored; see ``error``).
        n_trajectories: Trajectories stored.
        n_turns: Turns stored.
        skipped: Bad records skipped (with ``skip_bad``), each naming file and line.
        error: Why the file failed, naming file and line.
        sha256: The input's digest (of a file, or of a directory's files).
    """

    file: str
    format: str
    status: str
    n_trajectories: int = 0
    n_turns: int = 0
    skipped: list[RecordError] = field(default_factory=list)
    error: str | None = None
    sha256: str | None = None

    def summary(self) -> str:
        """One line for the terminal (file names and messages with control characters
        escaped: they come from the input)."""
        from recovery.display import printable

        if self.status == "failed":
            return f"error: {printable(self.error, keep_newlines=True)}"
        if self.status == "skipped":
            return f"{printable(self.file)}: already ingested (same sha256), skipped"
        line = (
            f"{printable(self.file)}: {self.n_trajectories} trajectories, {self.n_turns} turns "
            f"[{self.format}]"
        )
        if self.skipped:
            line += f", {len(self.skipped)} bad records skipped"
        return line


def _json_or_none(value: Any) -> str | None:
    if value is None or value == {}:
        return None
    try:
        return compact_json(value)
    except ValueError:
        raise RecordError("a JSON field holds NaN or an infinity, which JSON cannot") from None
    except RecursionError:
        raise RecordError("a JSON field is nested too deeply") from None


class _BatchWriter:
    """Collects trajectories into columns and appends them to the store as Arrow tables."""

    def __init__(self, con: duckdb.DuckDBPyConnection, fmt: str, batch_turns: int,
                 file: str | None = None):
        self.con = con
        self.fmt = fmt
        self.file = file  # the source_file of a trajectory whose reader named none
        self.batch_turns = batch_turns
        self.sample_counters: dict[tuple[str, str, int | None], int] = {}
        self.traj_ids: list[str] = []
        self.n_turns = 0
        self._reset()

    def _reset(self) -> None:
        self.traj_cols: dict[str, list[Any]] = {c: [] for c in TRAJECTORY_COLUMNS}
        self.turn_cols: dict[str, list[Any]] = {c: [] for c in TURN_COLUMNS}
        self.locations: dict[str, tuple[str | None, int | None]] = {}

    def add(self, traj: Trajectory) -> None:
        """Queue one trajectory (flushed every ``batch_turns`` turns).

        Raises:
            RecordError: naming the trajectory's file and line, for text that is not
                Unicode, a JSON field JSON cannot hold, or a duplicate trajectory.
        """
        if traj.source_file is None and self.file is not None:
            # a reader of one document per file may name no file; the input is the file
            # (Store.runs_of finds an input's runs by it)
            traj = replace(traj, source_file=self.file)
        try:
            self._add(traj)
        except RecordError as err:
            raise err.located(traj.source_file, traj.source_line) from None

    def _add(self, traj: Trajectory) -> None:
        problem = text_problem(traj)
        if problem is not None:
            raise RecordError(
                f"field '{problem}': text holds a lone UTF-16 surrogate, which is not Unicode",
                file=traj.source_file, line=traj.source_line,
            )
        # Checked before the sample counter moves: a bad record skipped with --skip-bad
        # takes no sample number, as with any other bad record.
        meta = _json_or_none(traj.meta)
        turn_json = [
            (_json_or_none(turn.action_json), _json_or_none(turn.observation_json),
             _json_or_none(turn.meta))
            for turn in traj.turns
        ]
        key = (traj.run, traj.task_id, traj.budget)
        seen = self.sample_counters.get(key, 0)
        self.sample_counters[key] = seen + 1
        sample = seen if traj.sample is None else traj.sample
        traj_id = make_traj_id(traj.run, traj.task_id, traj.budget, sample)
        if traj_id in self.locations:
            first = self.locations[traj_id]
            raise RecordError(
                f"duplicate trajectory (run={traj.run!r}, task_id={traj.task_id!r}, "
                f"budget={traj.budget}, sample={sample}); first seen at line {first[1]}",
                file=traj.source_file,
                line=traj.source_line,
            )
        self.locations[traj_id] = (traj.source_file, traj.source_line)
        tc = self.traj_cols
        tc["traj_id"].append(traj_id)
        tc["run"].append(traj.run)
        tc["task_id"].append(traj.task_id)
        tc["sample"].append(sample)
        tc["budget"].append(traj.budget)
        tc["success"].append(traj.success)
        tc["reward"].append(traj.reward)
        tc["n_turns"].append(traj.n_turns)
        tc["success_turn"].append(traj.success_turn)
        tc["end_reason"].append(traj.resolved_end_reason)
        tc["format"].append(self.fmt)
        tc["prompt"].append(traj.prompt or None)
        tc["source_file"].append(traj.source_file)
        tc["source_line"].append(traj.source_line)
        tc["meta"].append(meta)
        uc = self.turn_cols
        for t, (turn, (action_json, observation_json, turn_meta)) in enumerate(
            zip(traj.turns, turn_json, strict=True), start=1
        ):
            uc["traj_id"].append(traj_id)
            uc["t"].append(t)
            uc["action"].append(turn.action)
            uc["action_json"].append(action_json)
            uc["observation"].append(turn.observation)
            uc["observation_json"].append(observation_json)
            uc["reward"].append(turn.reward)
            uc["explicit_error"].append(turn.error)
            uc["label"].append(turn.label)
            uc["done"].append(turn.done)
            uc["meta"].append(turn_meta)
        self.traj_ids.append(traj_id)
        self.n_turns += traj.n_turns
        if len(uc["t"]) >= self.batch_turns:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        if not self.traj_cols["traj_id"]:
            return
        trajectories = pa.table(self.traj_cols)
        turns = pa.table(self.turn_cols, schema=arrow_schema("turns", TURN_COLUMNS))
        self.con.register("_batch_trajectories", trajectories)
        self.con.register("_batch_turns", turns)
        try:
            existing = self.con.execute(
                "SELECT b.traj_id, t.run, t.task_id, t.source_file, t.source_line "
                "FROM _batch_trajectories b JOIN trajectories t USING (traj_id) LIMIT 1"
            ).fetchall()
            if existing:
                existing = existing[0]
                file, line = self.locations[existing[0]]
                raise RecordError(
                    f"trajectory (run={existing[1]!r}, task_id={existing[2]!r}) with the same "
                    f"sample is already in the store (from {existing[3]}:{existing[4]}); give "
                    "samples distinct 'sample' values, or give this file a run label of its "
                    "own (`recovery ingest FILE --run NAME --store S`, then analyse the store)",
                    file=file,
                    line=line,
                )
            self.con.execute("INSERT INTO trajectories BY NAME SELECT * FROM _batch_trajectories")
            self.con.execute("INSERT INTO turns BY NAME SELECT * FROM _batch_turns")
        finally:
            self.con.unregister("_batch_trajectories")
            self.con.unregister("_batch_turns")
        self._reset()


def _write_trajectories(
    con: duckdb.DuckDBPyConnection,
    items: Iterable[Trajectory | RecordError],
    *,
    fmt: str,
    options: IngestOptions,
    file: str,
) -> tuple[_BatchWriter, list[RecordError]]:
    writer = _BatchWriter(con, fmt, options.batch_turns, file)
    skipped: list[RecordError] = []
    for item in items:
        if isinstance(item, RecordError):
            if not options.skip_bad:
                raise item
            skipped.append(item)
            continue
        try:
            writer.add(item)
        except RecordError as err:
            if not options.skip_bad:
                raise
            skipped.append(err)
    writer.flush()
    return writer, skipped


def in_transaction(con: duckdb.DuckDBPyConnection, body: Callable[[], Any]) -> Any:
    """Run ``body()`` in one transaction: committed when it returns, rolled back if it raises."""
    con.execute("BEGIN TRANSACTION")
    try:
        result = body()
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return result


def ingest_into(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    options: IngestOptions,
    *,
    seen_in: duckdb.DuckDBPyConnection | None = None,
) -> IngestResult:
    """:meth:`recovery.store.Store.ingest_file` into a DuckDB store's connection, in a
    transaction of its own; a file whose sha256 is in the ``ingests`` of ``seen_in``
    (default: this store) is skipped."""
    if not path.exists():
        raise IngestError(f"{path}: no such file")
    if not (path.is_file() or path.is_dir()):
        raise IngestError(f"{path}: is {special_kind(path.stat().st_mode)}, not a file; give a "
                          "regular file")
    fmt = options.format or detect_format(path)
    folder = get_reader(fmt).directory
    if path.is_dir() != folder:
        what = "a directory" if path.is_dir() else "a file"
        raise IngestError(
            f"{path}: is {what}, but format {fmt!r} reads "
            + ("directories" if folder else "files")
        )
    probe = _start_probe(con, path, fmt, options)
    try:
        return _ingest_file(con, path, fmt, options, probe, seen_in or con)
    finally:
        if probe is not None:
            probe.close()


def _start_probe(
    con: duckdb.DuckDBPyConnection, path: Path, fmt: str, options: IngestOptions
) -> SchemaProbe | None:
    """The fast path's schema detection, started before the file is hashed (it runs on a
    thread of its own while the file is read for its digest), when the fast path may apply."""
    from recovery.formats import head_bytes
    from recovery.store.fast_probe import SchemaProbe, eligible

    if fmt != "canonical" or not options.fast or not path.is_file():
        return None
    try:
        if not eligible(path, head_bytes(path, 4)):
            return None
    except OSError:
        return None
    warm = None
    if options.mark:
        from recovery.marking import builtin_rules

        warm = builtin_rules  # read once per process; loaded while DuckDB reads the file
    return SchemaProbe(con, path, warm=warm)


def _ingest_file(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fmt: str,
    options: IngestOptions,
    probe: SchemaProbe | None,
    seen_in: duckdb.DuckDBPyConnection,
) -> IngestResult:
    """Hash the file (or folder) ``path`` of format ``fmt``, skip it when ``seen_in`` has its
    sha256, else store it in a transaction of its own (the fast path first, when ``probe``)."""
    try:
        digest = directory_digest(path) if get_reader(fmt).directory else file_digest(path)
    except OSError as err:
        raise IngestError(f"{err.filename or path}: cannot read: {err.strerror or err}") from None
    sha = digest.sha256
    if seen_in.execute("SELECT 1 FROM ingests WHERE sha256 = ?", [sha]).fetchall():
        return IngestResult(file=str(path), format=fmt, status="skipped", sha256=sha)
    read_options = options.read_options()

    def body(fast: bool) -> IngestResult:
        if fast:  # marks the turns before they go in
            stored = _ingest_canonical_fast(con, path, digest, options, probe)
            n_trajectories, n_turns, skipped = stored.n_trajectories, stored.n_turns, []
        else:
            writer, skipped = _write_trajectories(
                con, read_file(path, fmt, read_options), fmt=fmt, options=options,
                file=str(path))
            n_trajectories, n_turns = len(writer.traj_ids), writer.n_turns
            if options.mark and writer.traj_ids:
                from recovery.store.marks import write_marks

                write_marks(con, rules=options.rules, traj_ids=writer.traj_ids)
        con.execute(
            "INSERT INTO ingests VALUES (?, ?, ?, ?, ?, ?, now()::TIMESTAMP)",
            [str(path), sha, fmt, n_trajectories, n_turns, len(skipped)],
        )
        return IngestResult(
            file=str(path),
            format=fmt,
            status="ingested",
            n_trajectories=n_trajectories,
            n_turns=n_turns,
            skipped=skipped,
            sha256=sha,
        )

    # The probe is started only for a plain canonical file with the fast path on; a line over
    # the record limit goes to the reader, which names it.
    if probe is not None and digest.longest_line <= options.max_record_bytes:
        from recovery.store.fast_probe import Declined

        try:
            return in_transaction(con, lambda: body(fast=True))
        except Declined:
            pass  # rolled back; the Python reader stores the file or says what is wrong
    try:
        return in_transaction(con, lambda: body(fast=False))
    except RecordError as err:
        raise IngestError(f"{err}; nothing from this file was stored") from None


def _ingest_canonical_fast(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    digest: FileDigest,
    options: IngestOptions,
    probe: SchemaProbe,
) -> FastIngest:
    """DuckDB-native ingest of a plainly valid canonical file (raises Declined otherwise)."""
    from recovery.formats import stem
    from recovery.store.fast_canonical import FastOptions, ingest_canonical

    return ingest_canonical(con, path, probe, FastOptions(
        n_lines=digest.n_lines,
        longest_line=digest.longest_line,
        default_run=stem(path),
        success_threshold=options.success_threshold,
        run_override=options.run,
        mark=options.mark,
        rules=options.rules,
    ))


def store_trajectories(
    con: duckdb.DuckDBPyConnection,
    trajectories: Iterable[Trajectory],
    *,
    source: str,
    options: IngestOptions,
) -> IngestResult:
    """:meth:`recovery.store.Store.ingest_trajectories` into a DuckDB store's connection, in a
    transaction of its own."""

    def body() -> IngestResult:
        writer, skipped = _write_trajectories(con, trajectories, fmt="python", options=options,
                                              file=source)
        if options.mark and writer.traj_ids:
            from recovery.store.marks import write_marks

            write_marks(con, rules=options.rules, traj_ids=writer.traj_ids)
        return IngestResult(
            file=source,
            format="python",
            status="ingested",
            n_trajectories=len(writer.traj_ids),
            n_turns=writer.n_turns,
            skipped=skipped,
        )

    try:
        return in_transaction(con, body)
    except RecordError as err:
        raise IngestError(f"{err}; nothing was stored") from None
