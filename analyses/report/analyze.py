"""``recovery analyze`` as a library call: ingest the inputs, build the report, write it.

Example:
    >>> from analyses.report.analyze import AnalyzeConfig, analyze
    >>> report = analyze(AnalyzeConfig(files=[Path("runs/base.jsonl"), Path("runs/rl.jsonl")],
    ...                                baseline="base", json_out=Path("report.json")))
    >>> report.comparisons[0].by_t[-1].recovery
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from recovery.config import CheckedOptions, opt
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    import duckdb

    from analyses.report.records import GroupedReport, Report
    from analyses.task_stats import StatisticsSource
    from recovery.store import IngestOptions, Store

Echo = Callable[[str], None]
"""Where progress lines go (ingest results, files written)."""


@dataclass
class AnalyzeConfig(CheckedOptions):
    """Options of ``recovery analyze`` (and of :func:`analyze`)."""

    files: list[Path] = opt(
        argument=True, default_factory=list,
        help="Input files (any known format); none = every run of --store.",
    )
    store: str | None = opt(
        None,
        "Store to ingest into and read from (files already there, by sha256, are not read "
        "again): a DuckDB file, or a folder of Parquet files (an existing directory, or a path "
        "ending in '/'); in memory when omitted.",
    )
    baseline: str | None = opt(
        None, "Run the others are compared with (default: the first run alphabetically)."
    )
    k: list[int] | None = opt(
        None,
        "Sampling widths K, e.g. 1,2,4,8 (default: 1..n when tasks have n <= 4 samples, else "
        "1,2,4,... up to n).",
    )
    t: list[str] | None = opt(
        None,
        "Turn limits T, e.g. 5,10,20,40; 'none' = no limit, which truncation mode always adds "
        "(default: quantiles of the observed turn counts; budgeted: the shared budgets).",
    )
    mode: str = opt(
        "auto",
        "truncation: cut every trajectory at each T; budgeted: at each T use the runs made "
        "with budget T; auto: budgeted when a run holds trajectories made at several budgets "
        "that every run has, else truncation (the report says which and why).",
        choices=("auto", "truncation", "budgeted"),
    )
    strata: int = opt(5, "Task difficulty strata of the hazard model (1 = pooled).")
    strata_by: str = opt(
        "clean_success",
        "What orders tasks into strata: successes per clean turn (default), or the success "
        "rate, which credits part of a recovery gain to single steps.",
        choices=("clean_success", "success"),
    )
    n_boot: int = opt(200, "Bootstrap resamples of tasks for every interval (0 = none).")
    seed: int = opt(0, "Seed of the bootstrap.")
    ci: float = opt(0.95, "Coverage of the intervals.")
    json_out: Path | None = opt(None, "Write the numbers as JSON to this file.", flag="--json")
    html_out: Path | None = opt(
        None, "Write a self-contained HTML report (plots and tables) to this file.",
        flag="--html",
    )
    format: str | None = opt(None, "Input format (default: detected per file).")
    rules: Path | None = opt(None, "TOML file of extra error rules (see docs/errors.md).")
    results: Path | None = opt(
        None, "A results file that decides success where trajectories carry none (e.g. the "
        "resolved-instance list of a SWE-bench harness for SWE-agent trajectories).",
    )
    quiet: bool = opt(False, "Print no tables (only write --json / --html).")
    by: str | None = opt(
        None,
        "Report each group apart, in one report with a summary across groups: env (the task "
        "id up to its first '/'; ids without one form the group '(none)'), meta.KEY (a field "
        "of the trajectory's meta), or a column of the trajectories table (e.g. budget).",
    )
    max_groups: int = opt(
        20,
        "With --by: above this many groups, only the largest (by trajectories) get a full "
        "report; every group keeps its row of the summary table. 0 = report every group.",
    )
    runs: list[str] | None = opt(
        None, "Analyse only these runs of the inputs or the store, e.g. base,rl.",
    )
    where: str | None = opt(
        None,
        "Analyse only the trajectories that meet this SQL condition on the columns of the "
        "trajectories table, e.g. \"task_id LIKE 'babaisai/%' AND budget = 100\"; every "
        "number of the report is of them.",
    )
    series: str | None = opt(
        None,
        "The runs are checkpoints of one training: run (ordered by the last number in each "
        "run's name, e.g. ckpt-100) or meta.NAME (by that number in the trajectories' meta). "
        "Each is compared with the first: Pass@(1,T) and the single-step and recovery parts "
        "over the steps (JSON key series).",
    )
    max_turns: list[str] | None = opt(
        None,
        "Step cap, RUN=N, ENV=N (an environment: the task id up to '/') or RUN/ENV=N (several: "
        "a=100,babyai=64): unsuccessful episodes there of N turns ran out of turns and are "
        "censored, not failed. Without it a task's cap comes from the data (a budget the "
        "format wrote for some of its episodes) or is detected over the runs; the data-quality "
        "section says which.",
    )
    engine: str = opt(
        "local",
        "local: the per-task statistics are computed in this process; ray: on a Ray cluster, "
        "one task per shard of a folder store's files, merged here (pip install "
        "'agent-recovery[ray]'; RAY_ADDRESS names the cluster, else a local one is started); "
        "needs --store DIR/ on a folder every node sees, and no --by or --where.",
        choices=("local", "ray"),
    )
    workers: int | None = opt(
        None, "With --engine ray: tasks at once (default: the cluster's CPUs)."
    )
    memory_limit: str = opt(
        "2GB",
        "Memory DuckDB may use for a folder store's queries; past it, they spill to a "
        "temporary folder (removed after). Raise it if a query runs out. (A DuckDB file "
        "store keeps DuckDB's own limit, 80% of the memory.)",
    )


def engine_statistics(config: AnalyzeConfig) -> dict[str, StatisticsSource]:
    """:func:`analyses.report.build.build_report`'s keyword for ``config.engine``: none for
    the local engine; for ``ray``, ``statistics`` computed on a Ray cluster.

    Raises:
        UsageProblem: with ``ray``, for a store that is not a local folder store, --by or
            --where, Ray not installed, or workers below 1; locally, for workers given.
    """
    if config.engine != "ray":
        if config.workers is not None:
            raise UsageProblem("--workers is for --engine ray (the local engine is one "
                               "process)")
        return {}
    from analyses.task_stats_ray import ray_statistics_source
    from recovery.store.ray_cluster import check_folder_store

    for flag, value in (("--by", config.by), ("--where", config.where)):
        if value is not None:
            raise UsageProblem(f"analyze --engine ray does not take {flag}: use --engine local")
    check_folder_store(config.store, "analyze")
    return {"statistics": ray_statistics_source(config.store, config.workers)}


def _max_turns(values: list[str] | None) -> dict[str, int] | None:
    from recovery.caps import parse_max_turns

    return parse_max_turns(values) if values else None


def parse_turn_limits(values: list[str] | None) -> list[int | None] | None:
    """``["5", "10", "none"]`` -> ``[5, 10, None]``; ``None`` stays ``None``.

    Raises:
        UsageProblem: for anything but positive integers and none/inf/no-limit.
    """
    if not values:
        return None
    out: list[int | None] = []
    for value in values:
        text = str(value).strip().lower()
        if text in ("none", "inf", "no-limit", "nolimit"):
            out.append(None)
            continue
        try:
            number = int(text)
        except ValueError:
            raise UsageProblem(
                f"--t: {value!r} is not a turn limit (a positive integer or 'none')"
            ) from None
        if number < 1:
            raise UsageProblem(f"--t: turn limits must be >= 1, got {number}")
        out.append(number)
    return out


def select_runs(con: duckdb.DuckDBPyConnection, wanted: list[str] | None,
                ingested: list[str]) -> list[str]:
    """The runs to analyse: ``wanted`` (``--runs``) among the known ones (those the inputs
    hold, else every run of the store), or those the inputs hold (empty = the whole store).

    Raises:
        UsageProblem: for a wanted run that is not known, listing the known ones.
    """
    if not wanted:
        return ingested
    known = ingested or [row[0] for row in con.execute(
        "SELECT DISTINCT run FROM trajectories ORDER BY run").fetchall()]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise UsageProblem(f"--runs: no run {', '.join(map(repr, unknown))} (runs: "
                           f"{', '.join(known)})")
    return list(dict.fromkeys(wanted))


def select_where(con: duckdb.DuckDBPyConnection, condition: str,
                 runs: list[str] | None = None) -> list[str]:
    """The trajectories of ``runs`` that meet an SQL condition on the ``trajectories`` table.

    The condition becomes ``SELECT traj_id FROM trajectories WHERE (<condition>)``, which
    must be exactly one ``SELECT`` statement by DuckDB's own parser. It runs on a connection of
    its own that holds a copy of the runs' trajectory rows and nothing else, sandboxed as
    ``recovery sql`` sandboxes a store (no file access, no extension, settings locked, no
    spilling), and is interrupted after :data:`recovery.query.DEFAULT_TIMEOUT` seconds.

    Raises:
        UsageProblem: for an empty condition, one that does not parse, holds another
            statement, or fails on the table (its first line said).
    """
    import threading

    import duckdb

    from recovery.query import DEFAULT_TIMEOUT, lock_down

    text = condition.strip()
    if not text:
        raise UsageProblem("--where: give a condition on the trajectories table, e.g. "
                           "\"task_id LIKE 'babaisai/%'\"")
    query = f"SELECT traj_id FROM trajectories WHERE ({text})"
    params: list[object] = list(runs or [])
    where = f"run IN ({', '.join('?' for _ in params)})" if params else "TRUE"
    rows = con.execute(f"SELECT * FROM trajectories WHERE {where}", params).df()
    side = duckdb.connect()
    try:
        side.register("copied_rows", rows)
        side.execute("CREATE TABLE trajectories AS SELECT * FROM copied_rows")
        side.unregister("copied_rows")
        lock_down(side)
        try:
            statements = side.extract_statements(query)
        except duckdb.Error as err:
            raise UsageProblem(f"--where: the condition does not parse: "
                               f"{str(err).splitlines()[0]}") from None
        if len(statements) != 1 or statements[0].type.name != "SELECT":
            raise UsageProblem("--where: give one condition on the trajectories table, no "
                               "other statement (no ';')")
        timer = threading.Timer(DEFAULT_TIMEOUT, side.interrupt)
        timer.start()
        try:
            return [row[0] for row in side.execute(query).fetchall()]
        except duckdb.Error as err:
            raise UsageProblem(f"--where: the condition fails on the trajectories table: "
                               f"{str(err).splitlines()[0]}") from None
        finally:
            timer.cancel()
    finally:
        side.close()


def ingest_inputs(
    store: Store,
    files: list[Path],
    options: IngestOptions,
    *,
    echo: Echo | None = None,
) -> list[str]:
    """Ingest ``files`` into ``store`` and return the runs they hold.

    Every file is tried (each in its own transaction) and reported, before any failure stops
    the analysis. A file whose digest is already in the store is not read again; its runs are
    those of the trajectories the store recorded for it. Inputs whose default run names
    collide and whose data names no run are given distinct names
    (:func:`recovery.store.command.run_names_for`), which ``echo`` is told.

    Raises:
        InputProblem: when a file cannot be ingested (the store keeps the others).
        UsageProblem: when colliding run names cannot be told apart by their folders.
    """
    from recovery.store.command import ingest_named, names_line

    def report(result) -> None:
        if echo is not None:
            echo(result.summary())

    results, _ = ingest_named(store, files, options, on_result=report,
                              on_names=None if echo is None else (
                                  lambda names: echo(names_line(names))))
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise InputProblem(
            f"{len(failed)} of {len(results)} input files could not be ingested (each is "
            "named above); fix or leave them out, nothing was analysed"
        )
    return store.runs_of(results)


def analyze(
    config: AnalyzeConfig,
    *,
    echo: Echo | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report | GroupedReport:
    """Everything ``recovery analyze`` does but printing the tables.

    Ingests ``config.files`` (into ``config.store``, or an in-memory store), builds the report
    of their runs (every run of the store when no file is given), and writes ``--json`` and
    ``--html`` when asked.

    Long because it is the command's one sequence (options, ingest, selection, the report, the
    files written), most of it inside the store connection's try/finally, where each problem
    becomes a UsageProblem or an InputProblem in place.

    Args:
        config: The options.
        echo: Called with each ingest result and each file written.
        progress: Called before each step of the analysis.

    Returns:
        The report (a :class:`GroupedReport` with ``--by``); its ``timings`` and ``cpu_timings`` hold the seconds per step, ingest and
        writing included.

    Raises:
        UsageProblem: for options that do not fit the data (unknown baseline, budgeted mode
            without shared budgets, no input).
        InputProblem: when a file cannot be ingested or the store cannot be opened.
    """
    from analyses.report.build import build_report
    from analyses.report.grouped import Grouping, build_grouped_report
    from analyses.report.options import ReportOptions
    from analyses.report.records import write_json
    from recovery.marking import load_rules
    from recovery.store import IngestOptions, open_store
    from recovery.store.memory_cap import check_limit, memory_capped

    if not config.files and config.store is None:
        raise UsageProblem("give input FILES, or --store to analyse a store's runs")
    if not config.files and not Path(config.store).exists():
        raise UsageProblem(f"store {config.store} does not exist")
    if config.max_groups < 0:
        raise UsageProblem(f"--max-groups: give 0 (every group) or more, got {config.max_groups}")
    options = ReportOptions(
        ks=config.k or None,
        ts=parse_turn_limits(config.t),
        mode=config.mode,
        baseline=config.baseline,
        strata=config.strata,
        strata_by=config.strata_by,
        n_boot=config.n_boot,
        seed=config.seed,
        ci=config.ci,
        max_turns=_max_turns(config.max_turns),
    )
    check_limit(config.memory_limit)
    statistics = engine_statistics(config)
    ingest_options = IngestOptions(
        format=config.format, rules=load_rules(config.rules) if config.rules else None,
        results=config.results,
    )
    store = open_store(config.store)
    con = store.con
    try:
        started, cpu_started = time.perf_counter(), time.process_time()
        runs = (ingest_inputs(store, config.files, ingest_options, echo=echo)
                if config.files else [])
        ingest_seconds = time.perf_counter() - started
        ingest_cpu = time.process_time() - cpu_started
        if config.files and not runs:
            raise UsageProblem("the input files hold no trajectories")
        runs = select_runs(con, config.runs, runs)
        traj_ids = None
        if config.where is not None:
            traj_ids = select_where(con, config.where, runs or None)
            if not traj_ids:
                from recovery.scope import null_columns_note

                raise UsageProblem("--where: no trajectory of the runs meets the condition"
                                   + null_columns_note(con, config.where, runs or None))
        import duckdb

        order = None
        if config.series:
            from analyses.report.series import plan_series

            order = plan_series(con, config.series, runs, config.baseline, config.by)
            options.baseline = order[0].run
        if config.by:
            from analyses.frames import group_expression

            try:
                group_expression(con, config.by)
            except UsageProblem as err:
                raise UsageProblem(f"--by: {err}") from None
        try:
            with memory_capped(con, config.memory_limit):
                if config.by:
                    report = build_grouped_report(con, Grouping(config.by, config.max_groups),
                                                  runs or None, options, progress=progress,
                                                  traj_ids=traj_ids)
                    if echo is not None and report.notes:
                        echo(f"note: {report.notes[0]}")
                else:
                    report = build_report(con, runs or None, options, progress=progress,
                                          traj_ids=traj_ids, **statistics)
                    if order:
                        from analyses.report.series import series_points

                        report.series = series_points(report, order, config.series)
        except duckdb.Error as err:  # damage that only shows when the data is read
            raise InputProblem(f"store {config.store or ':memory:'} cannot be read: "
                               f"{str(err).splitlines()[0]}") from None
    finally:
        con.close()
    report.timings = {"ingest": ingest_seconds, **report.timings}
    report.cpu_timings = {"ingest": ingest_cpu, **report.cpu_timings}
    report.sources = [str(path) for path in config.files]
    if config.json_out is not None:
        began = time.perf_counter()
        write_json(report, config.json_out)
        report.timings["write json"] = time.perf_counter() - began
        if echo is not None:
            echo(f"wrote {config.json_out}")
    if config.html_out is not None:
        from analyses.report.page import write_html

        began = time.perf_counter()
        if progress is not None:
            progress("drawing the HTML report")
        from analyses.report.names import runs_title

        write_html(report, config.html_out, title=runs_title(list(report.runs), config.by))
        report.timings["write html"] = time.perf_counter() - began
        if echo is not None:
            echo(f"wrote {config.html_out}")
    return report
