"""The DuckDB store (DESIGN 3.3): tables, views, and atomic, idempotent ingest.

One DuckDB connection is opened with :func:`connect` and passed to every function that touches
the store. Ingest is one transaction per file: a file that fails leaves the store exactly as it
was, and a file whose sha256 is already recorded is skipped. Rows go in as Arrow batches.

Example:
    >>> from recovery.store import connect, ingest_file
    >>> con = connect("runs.duckdb")
    >>> ingest_file(con, "runs/base.jsonl")
    >>> con.sql("SELECT run, avg(success::INT) FROM trajectories GROUP BY run").fetchall()
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.errors import InputProblem
from recovery.formats import (
    DEFAULT_MAX_RECORD_BYTES,
    ReadOptions,
    detect_format,
    get_reader,
    read_file,
)
from recovery.schema import (
    SUCCESS_THRESHOLD,
    RecordError,
    Trajectory,
    compact_json,
    end_reason_sql,
    text_problem,
)

if TYPE_CHECKING:
    import duckdb

    from recovery.canonical_sql import FastIngest
    from recovery.marking import RuleSet

SCHEMA_VERSION = 2

TABLES_DDL = """
CREATE TABLE IF NOT EXISTS ingests (
    file            VARCHAR NOT NULL,
    sha256          VARCHAR NOT NULL,
    format          VARCHAR NOT NULL,
    n_trajectories  INTEGER NOT NULL,
    n_turns         BIGINT  NOT NULL,
    n_skipped       INTEGER NOT NULL,
    ingested_at     TIMESTAMP NOT NULL
);
CREATE TABLE IF NOT EXISTS trajectories (
    traj_id       VARCHAR NOT NULL,
    run           VARCHAR NOT NULL,
    task_id       VARCHAR NOT NULL,
    sample        INTEGER NOT NULL,
    budget        INTEGER,
    success       BOOLEAN,
    reward        DOUBLE,
    n_turns       INTEGER NOT NULL,
    success_turn  INTEGER,
    end_reason    VARCHAR NOT NULL,
    format        VARCHAR NOT NULL,
    prompt        VARCHAR,
    source_file   VARCHAR,
    source_line   INTEGER,
    meta          JSON
);
CREATE TABLE IF NOT EXISTS turns (
    traj_id           VARCHAR NOT NULL,
    t                 INTEGER NOT NULL,
    action            VARCHAR,
    action_json       JSON,
    observation       VARCHAR,
    observation_json  JSON,
    reward            DOUBLE,
    explicit_error    VARCHAR,
    error_kind        VARCHAR,
    is_error          BOOLEAN NOT NULL DEFAULT false,
    recovery_of       INTEGER,
    label             DOUBLE,
    done              BOOLEAN NOT NULL DEFAULT false,
    meta              JSON
);
CREATE TABLE IF NOT EXISTS error_spells (
    traj_id       VARCHAR NOT NULL,
    start_t       INTEGER NOT NULL,
    end_t         INTEGER NOT NULL,
    kind          VARCHAR,
    recovered     BOOLEAN NOT NULL,
    recovered_at  INTEGER,
    latency       INTEGER,
    fatal         BOOLEAN NOT NULL
);
CREATE TABLE IF NOT EXISTS step_scores (
    traj_id  VARCHAR NOT NULL,
    t        INTEGER NOT NULL,
    model    VARCHAR NOT NULL,
    score    DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS store_info (key VARCHAR, value VARCHAR);
"""

VIEWS_DDL = """
CREATE OR REPLACE VIEW task_outcomes AS
SELECT run, task_id, budget,
       count(*)                          AS n_samples,
       count(*) FILTER (WHERE success)   AS n_success,
       avg(success::INTEGER)             AS success_rate,
       avg(n_turns)                      AS mean_turns
FROM trajectories
GROUP BY run, task_id, budget;

CREATE OR REPLACE VIEW recovery_stats AS
SELECT tr.run,
       count(DISTINCT tr.traj_id)                              AS n_trajectories,
       count(s.traj_id)                                        AS n_spells,
       count(s.traj_id) FILTER (WHERE s.recovered)             AS n_recovered,
       count(s.traj_id) FILTER (WHERE s.fatal)                 AS n_fatal,
       avg(s.recovered::INTEGER)                               AS recovery_rate,
       avg(s.latency) FILTER (WHERE s.recovered)               AS mean_latency
FROM trajectories tr LEFT JOIN error_spells s USING (traj_id)
GROUP BY tr.run;

-- Pass@(K,T) and pass^(K,T) in truncation mode (DESIGN 5); the SQL face of analyses.passkt,
-- which adds budgeted mode and bootstrap intervals. Per (run, task): n = trajectories with a
-- known outcome, whatever their budget; c = those that succeeded by turn t (a success without
-- success_turn succeeds at its last turn). t takes every distinct success turn of the run (the
-- only turns where the surface can change: between two listed t it keeps the lower one's
-- value) and NULL = no turn limit. k runs from 1 to the most samples a task of the run has;
-- tasks with n < k are left out of value and counted in n_tasks_left_out. The ratios use the
-- product form C(n - a, k) / C(n, k) = prod(1 - k/j, j = a+1..n).
CREATE OR REPLACE VIEW pass_kt_task_counts AS
WITH outcomes AS (
    SELECT run, task_id,
           CASE WHEN success THEN coalesce(success_turn, n_turns) END AS won_at
    FROM trajectories
    WHERE success IS NOT NULL
),
limits AS (
    SELECT DISTINCT run, won_at AS t FROM outcomes WHERE won_at IS NOT NULL
    UNION ALL
    SELECT DISTINCT run, NULL::INTEGER AS t FROM outcomes
)
SELECT o.run, o.task_id, l.t,
       count(*)                                                   AS n,
       count(*) FILTER (WHERE o.won_at <= coalesce(l.t, o.won_at)) AS c
FROM outcomes o JOIN limits l USING (run)
GROUP BY o.run, o.task_id, l.t;

CREATE OR REPLACE VIEW pass_at_kt AS
WITH widths AS (
    SELECT run, unnest(range(1, max(n) + 1)) AS k FROM pass_kt_task_counts GROUP BY run
)
SELECT w.run, w.k, p.t,
       avg(CASE WHEN p.n - p.c < w.k THEN 1.0
                ELSE 1.0 - coalesce(list_product(list_transform(
                    range(p.n - p.c + 1, p.n + 1), lambda j: 1.0 - w.k / j)), 1.0)
           END) FILTER (WHERE p.n >= w.k)                          AS value,
       count(*) FILTER (WHERE p.n >= w.k)                          AS n_tasks,
       count(*) FILTER (WHERE p.n < w.k)                           AS n_tasks_left_out
FROM widths w JOIN pass_kt_task_counts p USING (run)
GROUP BY w.run, w.k, p.t;

CREATE OR REPLACE VIEW pass_hat_kt AS
WITH widths AS (
    SELECT run, unnest(range(1, max(n) + 1)) AS k FROM pass_kt_task_counts GROUP BY run
)
SELECT w.run, w.k, p.t,
       avg(CASE WHEN p.c < w.k THEN 0.0
                ELSE coalesce(list_product(list_transform(
                    range(p.c + 1, p.n + 1), lambda j: 1.0 - w.k / j)), 1.0)
           END) FILTER (WHERE p.n >= w.k)                          AS value,
       count(*) FILTER (WHERE p.n >= w.k)                          AS n_tasks,
       count(*) FILTER (WHERE p.n < w.k)                           AS n_tasks_left_out
FROM widths w JOIN pass_kt_task_counts p USING (run)
GROUP BY w.run, w.k, p.t;
"""

TRAJECTORY_COLUMNS = (
    "traj_id", "run", "task_id", "sample", "budget", "success", "reward", "n_turns",
    "success_turn", "end_reason", "format", "prompt", "source_file", "source_line", "meta",
)
TURN_COLUMNS = (
    "traj_id", "t", "action", "action_json", "observation", "observation_json", "reward",
    "explicit_error", "label", "done", "meta",
)


class IngestError(RuntimeError):
    """Ingest of a file failed; the store is unchanged. The message names file and line."""


def connect(path: str | Path | None = None, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the store (in memory when ``path`` is None) and make sure its tables exist.

    Args:
        path: The DuckDB file; ``None`` or ``":memory:"`` for an in-memory store.
        read_only: Open read-only (the file must exist; nothing is created).

    Returns:
        The connection to pass to every other function.
    """
    import duckdb

    if path is None or str(path) == ":memory:":
        con = duckdb.connect(":memory:")
    else:
        path = Path(path)
        if read_only and not path.exists():
            raise FileNotFoundError(f"store {path} does not exist")
        con = duckdb.connect(str(path), read_only=read_only)
    if read_only:
        check_schema(con, path)
    else:
        ensure_schema(con)
    return con


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the tables and views when missing, and upgrade an older store (idempotent).

    Schema 1 had no ``trajectories.end_reason``: it is added and filled by the one rule
    (:func:`recovery.schema.end_reason`) from the stored outcome and budget.
    """
    con.execute(TABLES_DDL)
    columns = {row[0] for row in con.execute("DESCRIBE trajectories").fetchall()}
    if "end_reason" not in columns:
        con.execute("ALTER TABLE trajectories ADD COLUMN end_reason VARCHAR")
        con.execute(
            "UPDATE trajectories SET end_reason = "
            + end_reason_sql("success", "n_turns", "budget")
        )
    con.execute(VIEWS_DDL)
    con.execute("DELETE FROM store_info WHERE key = 'schema_version'")
    con.execute("INSERT INTO store_info VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])


def check_schema(con: duckdb.DuckDBPyConnection, path: str | Path) -> None:
    """Refuse a file this version cannot read: not a store, or a store of an older schema.

    Raises:
        InputProblem: naming the store and what to do.
    """
    tables = {
        row[0]
        for row in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
    }
    missing = sorted({"trajectories", "turns"} - tables)
    if missing:
        raise InputProblem(
            f"{path} is not a store of this toolkit: it has no {' or '.join(missing)} table "
            "(create one with `recovery ingest FILES --store PATH`)"
        )
    columns = {row[0] for row in con.execute("DESCRIBE trajectories").fetchall()}
    if "end_reason" not in columns:
        raise InputProblem(
            f"store {path} was written by an older version of this toolkit (no "
            "trajectories.end_reason); open it once for writing to upgrade it, e.g. with "
            "`recovery mark --store PATH`"
        )


def file_sha256(path: str | Path) -> str:
    """sha256 of the file's bytes (streamed)."""
    return file_digest(path).sha256


@dataclass(frozen=True, slots=True)
class FileDigest:
    """What one streamed pass over a file's bytes tells.

    Attributes:
        sha256: Hex digest of the bytes.
        n_lines: Number of lines (a last line without a newline counts).
        longest_line: Bytes of the longest line, without its newline.
    """

    sha256: str
    n_lines: int
    longest_line: int


def directory_digest(path: str | Path) -> FileDigest:
    """sha256 of a directory input: of every regular file below it, by relative path.

    The same files with the same bytes give the same digest wherever the directory lies, so
    re-ingesting a moved copy adds nothing. Line counts are not taken (0).
    """
    root = Path(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(file.relative_to(root).as_posix().encode("utf-8", "surrogateescape"))
        digest.update(b"\0")
        digest.update(bytes.fromhex(file_digest(file).sha256))
    return FileDigest(digest.hexdigest(), 0, 0)


def file_digest(path: str | Path) -> FileDigest:
    """sha256, line count and longest line of a file, in one streamed pass."""
    import numpy as np

    digest = hashlib.sha256()
    newlines = longest = offset = 0
    last_newline = -1  # absolute position of the last newline seen
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
            ends = np.flatnonzero(np.frombuffer(chunk, np.uint8) == ord("\n")) + offset
            if len(ends):
                longest = max(longest, int(np.diff(ends, prepend=last_newline).max()) - 1)
                last_newline = int(ends[-1])
                newlines += len(ends)
            offset += len(chunk)
    tail = offset - last_newline - 1
    return FileDigest(digest.hexdigest(), newlines + (tail > 0), max(longest, tail))


def make_traj_id(run: str, task_id: str, budget: int | None, sample: int) -> str:
    """Stable trajectory id: the same (run, task, budget, sample) always gives the same id."""
    key = f"{run}\x1f{task_id}\x1f{'' if budget is None else budget}\x1f{sample}"
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


@dataclass(slots=True)
class IngestOptions:
    """Options of one ingest (the Python face of ``recovery ingest``).

    Attributes:
        format: Format name; ``None`` detects it per file.
        run: Run label that overrides the data's own.
        skip_bad: Store the good records of a file with bad ones, and count the skipped.
        success_threshold: Reward at or above which an episode counts as a success.
        max_record_bytes: Larger records are reported as oversized.
        batch_turns: Turns per Arrow batch; bounds memory.
        rules: Error rules for marking; ``None`` = the built-in rules only.
        mark: Run error marking on the new trajectories inside the same transaction.
        fast: Let DuckDB parse plainly valid canonical JSONL itself (see
            :mod:`recovery.canonical_sql`); the Python reader handles everything else and
            is used for all files when false.
        inspect_scorer: Inspect logs: the scorer that decides success (``None`` = first).
        inspect_success: Inspect logs: score values that count as success.
        results: A results file deciding success where the format has none (SWE-agent).
    """

    format: str | None = None
    run: str | None = None
    skip_bad: bool = False
    success_threshold: float = SUCCESS_THRESHOLD
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    batch_turns: int = 200_000
    rules: RuleSet | None = None
    mark: bool = True
    fast: bool = True
    inspect_scorer: str | None = None
    inspect_success: tuple[str, ...] = ReadOptions().inspect_success
    results: Path | None = None


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
    """

    file: str
    format: str
    status: str
    n_trajectories: int = 0
    n_turns: int = 0
    skipped: list[RecordError] = field(default_factory=list)
    error: str | None = None

    def summary(self) -> str:
        """One line for the terminal."""
        if self.status == "failed":
            return f"error: {self.error}"
        if self.status == "skipped":
            return f"{self.file}: already ingested (same sha256), skipped"
        line = (
            f"{self.file}: {self.n_trajectories} trajectories, {self.n_turns} turns "
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

    def __init__(self, con: duckdb.DuckDBPyConnection, fmt: str, batch_turns: int):
        self.con = con
        self.fmt = fmt
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
        turns = pa.table(self.turn_cols, schema=_turn_arrow_schema())
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


def _turn_arrow_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("traj_id", pa.string()),
            ("t", pa.int32()),
            ("action", pa.string()),
            ("action_json", pa.string()),
            ("observation", pa.string()),
            ("observation_json", pa.string()),
            ("reward", pa.float64()),
            ("explicit_error", pa.string()),
            ("label", pa.float64()),
            ("done", pa.bool_()),
            ("meta", pa.string()),
        ]
    )


def _write_trajectories(
    con: duckdb.DuckDBPyConnection,
    items: Iterable[Trajectory | RecordError],
    *,
    fmt: str,
    options: IngestOptions,
) -> tuple[_BatchWriter, list[RecordError]]:
    writer = _BatchWriter(con, fmt, options.batch_turns)
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


def ingest_file(
    con: duckdb.DuckDBPyConnection,
    path: str | Path,
    options: IngestOptions | None = None,
) -> IngestResult:
    """Ingest one file atomically and idempotently.

    Args:
        con: The store.
        path: Input file in any registered format.
        options: Ingest options; defaults when ``None``.

    Returns:
        What was stored, or that the file was skipped because its sha256 is already recorded.

    Raises:
        IngestError: for a bad record (unless ``skip_bad``), naming file and line; the store
            is left exactly as it was.
        recovery.formats.UnknownFormatError: when the format is unknown or cannot be detected.
    """
    options = options or IngestOptions()
    path = Path(path)
    if not path.exists():
        raise IngestError(f"{path}: no such file")
    if not (path.is_file() or path.is_dir()):
        raise IngestError(f"{path}: is {_special_file_kind(path)}, not a file; give a regular file")
    fmt = options.format or detect_format(path)
    folder = get_reader(fmt).directory
    if path.is_dir() != folder:
        what = "a directory" if path.is_dir() else "a file"
        raise IngestError(
            f"{path}: is {what}, but format {fmt!r} reads "
            + ("directories" if folder else "files")
        )
    try:
        digest = directory_digest(path) if folder else file_digest(path)
    except OSError as err:
        raise IngestError(f"{path}: cannot read: {err.strerror or err}") from None
    sha = digest.sha256
    if con.execute("SELECT 1 FROM ingests WHERE sha256 = ?", [sha]).fetchall():
        return IngestResult(file=str(path), format=fmt, status="skipped")
    read_options = ReadOptions(
        run=options.run,
        success_threshold=options.success_threshold,
        max_record_bytes=options.max_record_bytes,
        inspect_success=options.inspect_success,
        inspect_scorer=options.inspect_scorer,
        results=options.results,
    )

    def body(fast: bool) -> IngestResult:
        if fast:
            stored = _ingest_canonical_fast(con, path, digest, options)
            traj_ids, n_turns, skipped = stored.traj_ids, stored.n_turns, []
        else:
            writer, skipped = _write_trajectories(
                con, read_file(path, fmt, read_options), fmt=fmt, options=options
            )
            traj_ids, n_turns = writer.traj_ids, writer.n_turns
        if options.mark and traj_ids:
            from recovery.marking import mark_store

            mark_store(con, rules=options.rules, traj_ids=traj_ids)
        con.execute(
            "INSERT INTO ingests VALUES (?, ?, ?, ?, ?, ?, now()::TIMESTAMP)",
            [str(path), sha, fmt, len(traj_ids), n_turns, len(skipped)],
        )
        return IngestResult(
            file=str(path),
            format=fmt,
            status="ingested",
            n_trajectories=len(traj_ids),
            n_turns=n_turns,
            skipped=skipped,
        )

    if _fast_path_applies(path, fmt, digest, options):
        from recovery.canonical_sql import Declined

        try:
            return in_transaction(con, lambda: body(fast=True))
        except Declined:
            pass  # rolled back; the Python reader stores the file or says what is wrong
    try:
        return in_transaction(con, lambda: body(fast=False))
    except RecordError as err:
        raise IngestError(f"{err}; nothing from this file was stored") from None


def _special_file_kind(path: Path) -> str:
    """What a path that is neither a regular file nor a directory is, for messages."""
    import stat

    mode = path.stat().st_mode
    for test, name in (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def ingest_files(
    con: duckdb.DuckDBPyConnection,
    paths: Iterable[str | Path],
    options: IngestOptions | None = None,
    *,
    on_result: Callable[[IngestResult], Any] | None = None,
) -> list[IngestResult]:
    """Ingest several files, each in its own transaction; one failing file stops none.

    Args:
        con: The store.
        paths: Input files (or directories, for formats that read one).
        options: Ingest options for every file.
        on_result: Called with each file's result as soon as it is known (for progress).

    Returns:
        One result per path, in order; a failed file has ``status == "failed"`` and its
        ``error``, and left the store as it was.
    """
    import duckdb

    from recovery.formats import UnknownFormatError

    results = []
    for path in paths:
        try:
            result = ingest_file(con, path, options)
        except (IngestError, UnknownFormatError) as err:
            result = IngestResult(file=str(path), format="", status="failed", error=str(err))
        except duckdb.Error as err:  # the transaction was rolled back
            result = IngestResult(
                file=str(path), format="", status="failed",
                error=f"{path}: the store refused the file: {err}; nothing from it was stored",
            )
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _fast_path_applies(
    path: Path, fmt: str, digest: FileDigest, options: IngestOptions
) -> bool:
    """Canonical, plain, and no line over the record limit (the reader names those)."""
    from recovery.canonical_sql import eligible
    from recovery.formats import head_bytes

    return (
        fmt == "canonical"
        and options.fast
        and digest.longest_line <= options.max_record_bytes
        and eligible(path, head_bytes(path, 4))
    )


def _ingest_canonical_fast(
    con: duckdb.DuckDBPyConnection, path: Path, digest: FileDigest, options: IngestOptions
) -> FastIngest:
    """DuckDB-native ingest of a plainly valid canonical file (raises Declined otherwise)."""
    from recovery.canonical_sql import ingest_canonical
    from recovery.formats import stem

    return ingest_canonical(
        con,
        path,
        n_lines=digest.n_lines,
        default_run=stem(path),
        run_override=options.run,
        success_threshold=options.success_threshold,
        max_record_bytes=options.max_record_bytes,
    )


def ingest_trajectories(
    con: duckdb.DuckDBPyConnection,
    trajectories: Iterable[Trajectory],
    *,
    source: str = "<python>",
    options: IngestOptions | None = None,
) -> IngestResult:
    """Ingest trajectories built in Python (e.g. by the simulator), atomically.

    Unlike :func:`ingest_file` there is no sha256 to make this idempotent; a trajectory whose
    (run, task, budget, sample) is already stored is an error.
    """
    options = options or IngestOptions()

    def body() -> IngestResult:
        writer, skipped = _write_trajectories(con, trajectories, fmt="python", options=options)
        if options.mark and writer.traj_ids:
            from recovery.marking import mark_store

            mark_store(con, rules=options.rules, traj_ids=writer.traj_ids)
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


def export_parquet(con: duckdb.DuckDBPyConnection, out_dir: str | Path) -> list[Path]:
    """Write every table of the store to ``out_dir/<table>.parquet``.

    Returns:
        The files written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for table in ("ingests", "trajectories", "turns", "error_spells", "step_scores"):
        target = out / f"{table}.parquet"
        con.execute(f"COPY {table} TO '{_sql_path(target)}' (FORMAT parquet)")
        written.append(target)
    return written


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")
