"""``recovery analyze [FILES...]``: Pass@(K,T), errors, recoveries and the gain decomposition.

Ingests the files (into ``--store``, or an in-memory store), analyses their runs (every run of
the store when no file is given) with :mod:`analyses.report`, prints rich tables, and writes
``--json`` and ``--html`` reports.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from recovery.cli.options import command_options, opt

if TYPE_CHECKING:
    import duckdb
    from rich.console import Console

    from analyses.report import Report
    from recovery.store import IngestResult


@dataclass
class AnalyzeConfig:
    """Options of ``recovery analyze``."""

    files: list[Path] = opt(
        argument=True, default_factory=list,
        help="Input files (any known format); none = every run of --store.",
    )
    store: Path | None = opt(
        None,
        "DuckDB store to ingest into and read from (files already there, by sha256, are not "
        "read again); in memory when omitted.",
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
        "truncation",
        "truncation: cut every trajectory at each T; budgeted: at each T use the runs made "
        "with budget T.",
        choices=("truncation", "budgeted"),
    )
    strata: int = opt(5, "Task difficulty strata of the hazard model (1 = pooled).")
    strata_by: str = opt(
        "clean_success",
        "What orders tasks into strata: successes per clean turn, or the success rate "
        "(DESIGN 6 as written; see docs/concepts.md).",
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


def parse_turn_limits(values: list[str] | None) -> list[int | None] | None:
    """``["5", "10", "none"]`` -> ``[5, 10, None]``; ``None`` stays ``None``.

    Raises:
        click.BadParameter: for anything but positive integers and none/inf/no-limit.
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
            raise click.BadParameter(
                f"{value!r} is not a turn limit (a positive integer or 'none')", param_hint="--t"
            ) from None
        if number < 1:
            raise click.BadParameter(f"turn limits must be >= 1, got {number}", param_hint="--t")
        out.append(number)
    return out


def ingest_inputs(
    con: duckdb.DuckDBPyConnection, config: AnalyzeConfig, *, log: Console | None = None
) -> list[str]:
    """Ingest ``config.files`` into ``con`` and return the runs they hold.

    A file whose sha256 is already in the store is not read again; its runs are those of the
    trajectories the store recorded for it.

    Every file is tried (each in its own transaction) and reported, before any failure
    stops the analysis.

    Raises:
        click.ClickException: when a file cannot be ingested (the store keeps the others).
    """
    from recovery.marking import load_rules
    from recovery.store import IngestOptions, ingest_files

    options = IngestOptions(
        format=config.format, rules=load_rules(config.rules) if config.rules else None,
        results=config.results,
    )
    runs: set[str] = set()

    def report(result: IngestResult) -> None:
        if log is not None:
            click.echo(result.summary(), err=True)

    results = ingest_files(con, config.files, options, on_result=report)
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise click.ClickException(
            f"{len(failed)} of {len(results)} input files could not be ingested (each is "
            "named above); fix or leave them out, nothing was analysed"
        )
    for result in results:
        sources = [result.file]
        if result.status == "skipped":
            sources = [
                row[0] for row in con.execute(
                    "SELECT file FROM ingests WHERE sha256 = ?", [result.sha256]
                ).fetchall()
            ]
        found = con.execute(
            f"SELECT DISTINCT run FROM trajectories WHERE source_file IN "
            f"({', '.join('?' for _ in sources)})",
            sources,
        ).fetchall()
        runs.update(row[0] for row in found)
    return sorted(runs)


def run_analyze(config: AnalyzeConfig, *, console: Console | None = None) -> Report:
    """Everything ``recovery analyze`` does, as a library call.

    Args:
        config: The options.
        console: Where the tables go (default: standard output); progress and ingest lines
            go to standard error.

    Returns:
        The :class:`analyses.report.Report` (its ``timings`` and ``cpu_timings`` hold the
        wall-clock and CPU seconds per step, ``ingest`` included).

    Raises:
        click.UsageError: for options that do not fit the data (unknown baseline, budgeted
            mode without shared budgets, no input).
        click.ClickException: when a file cannot be ingested.
    """
    from rich.console import Console

    from analyses.report import ReportOptions, build_report, print_report, write_json
    from recovery.store import connect

    if not config.files and config.store is None:
        raise click.UsageError("give input FILES, or --store to analyse a store's runs")
    if not config.files and not Path(config.store).exists():
        raise click.UsageError(f"store {config.store} does not exist")
    log = Console(stderr=True)
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
    )
    con = connect(config.store)
    try:
        started, cpu_started = time.perf_counter(), time.process_time()
        runs = ingest_inputs(con, config, log=log) if config.files else []
        ingest_seconds = time.perf_counter() - started
        ingest_cpu = time.process_time() - cpu_started
        if config.files and not runs:
            raise click.UsageError("the input files hold no trajectories")
        with log.status("analyzing") as status:
            try:
                report = build_report(
                    con, runs or None, options,
                    progress=lambda step: status.update(f"{step} ..."),
                )
            except ValueError as err:
                raise click.UsageError(str(err)) from None
    finally:
        con.close()
    report.timings = {"ingest": ingest_seconds, **report.timings}
    report.cpu_timings = {"ingest": ingest_cpu, **report.cpu_timings}
    report.sources = [str(path) for path in config.files]
    if not config.quiet:
        print_report(report, console or Console())
    if config.json_out is not None:
        began = time.perf_counter()
        write_json(report, config.json_out)
        report.timings["write json"] = time.perf_counter() - began
        log.print(f"wrote {config.json_out}", highlight=False, soft_wrap=True)
    if config.html_out is not None:
        from analyses.html import write_html

        began = time.perf_counter()
        with log.status("drawing the HTML report"):
            write_html(report, config.html_out,
                       title=f"recovery analyze: {', '.join(report.runs)}")
        report.timings["write html"] = time.perf_counter() - began
        log.print(f"wrote {config.html_out}", highlight=False, soft_wrap=True)
    return report


@click.command()
@command_options(AnalyzeConfig)
def analyze(config: AnalyzeConfig) -> None:
    """Report Pass@(K,T), errors, recoveries and the gain decomposition of runs.

    FILES are ingested (into --store, else into memory) and their runs analysed; with no
    FILES, every run of --store is. With two or more runs, each is compared with the
    baseline: its change of S(T) split into single-step quality and recovery, per T.
    """
    run_analyze(config)
    sys.stdout.flush()
