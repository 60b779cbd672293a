"""``recovery ingest FILES... --store PATH``: read rollouts into the store (a DuckDB file or a
folder of Parquet files)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from recovery.cli.options import command_options, opt
from recovery.display import printable
from recovery.errors import UsageProblem
from recovery.formats import ReadOptions


@dataclass
class IngestConfig:
    """Options of ``recovery ingest``."""

    files: list[Path] = opt(
        argument=True, required=True, default_factory=list, help="Input files."
    )
    store: str | None = opt(
        None, "Store to write (created when missing): a DuckDB file, or a folder of Parquet "
        "files when the path is an existing folder or ends in '/' (e.g. runs/); in memory "
        "when omitted.",
    )
    format: str | None = opt(
        None, "Input format (default: detected per file). Unknown names list the known ones."
    )
    run: str | None = opt(None, "Run label for every trajectory, replacing the data's own.")
    skip_bad: bool = opt(
        False, "Store the good records of a file with bad ones and print how many were skipped."
    )
    rules: Path | None = opt(None, "TOML file of extra error rules (see docs/errors.md).")
    max_record_mb: float = opt(512.0, "Largest record accepted, in MB of text (> 0).")
    success_threshold: float = opt(
        1.0 - 1e-6, "A final reward at or above this counts as success where no flag is given."
    )
    inspect_scorer: str | None = opt(
        None, "Inspect logs: the scorer whose value decides success (default: the first)."
    )
    results: Path | None = opt(
        None, "A results file that decides success where trajectories carry none (e.g. the "
        "resolved-instance list of a SWE-bench harness for SWE-agent trajectories).",
    )
    inspect_success: list[str] = opt(
        help="Inspect logs: score values that count as success, comma-separated.",
        default_factory=lambda: list(ReadOptions().inspect_success),
    )


def run_ingest(config: IngestConfig, *, echo=click.echo) -> int:
    """Ingest every file of ``config`` into its store; return the number of failed files.

    Long because it is the command's one sequence (options checked, the store opened, each file
    read under a progress bar and reported, a store left empty removed), with what each file's
    failure means visible in place.
    """
    from tqdm import tqdm

    from recovery.formats import UnknownFormatError, get_reader
    from recovery.marking import load_rules
    from recovery.store import IngestOptions, IngestResult, connect, ingest_files

    if config.format is not None:
        try:
            get_reader(config.format)
        except UnknownFormatError as err:
            raise click.UsageError(str(err)) from None
    if config.max_record_mb <= 0:
        raise click.BadParameter("must be > 0", param_hint="--max-record-mb")
    options = IngestOptions(
        format=config.format,
        run=config.run,
        skip_bad=config.skip_bad,
        success_threshold=config.success_threshold,
        max_record_bytes=int(config.max_record_mb * 1024 * 1024),
        rules=load_rules(config.rules) if config.rules else None,
        inspect_scorer=config.inspect_scorer,
        inspect_success=tuple(config.inspect_success),
        results=config.results,
    )
    import duckdb

    created = config.store is not None and not Path(config.store).exists()
    try:
        con = connect(config.store)
    except duckdb.Error as err:  # e.g. the store's folder does not exist, or the file is locked
        raise click.ClickException(f"cannot open store {config.store}: {err}") from None
    files = tqdm(
        config.files, desc="ingest", unit="file", file=sys.stderr,
        disable=len(config.files) < 3, leave=False,
    )

    def report(result: IngestResult) -> None:
        if result.status == "failed":
            tqdm.write(result.summary(), file=sys.stderr)
            return
        tqdm.write(result.summary(), file=sys.stdout)
        for bad in result.skipped[:5]:
            tqdm.write(f"  skipped {printable(bad, keep_newlines=True)}", file=sys.stderr)
        if len(result.skipped) > 5:
            tqdm.write(f"  ... and {len(result.skipped) - 5} more", file=sys.stderr)

    try:
        from analyses.report.analyze import run_names_for

        names = run_names_for(config.files, options)
    except UsageProblem as err:
        con.close()
        raise click.UsageError(printable(str(err))) from None
    if names:
        echo(printable("run names given to inputs of the same name: " + ", ".join(
            f"{path} -> {label}" for path, label in names.items())), err=True)
    try:
        results = []
        for path in files:
            label = names.get(Path(path).resolve())
            file_options = options if label is None else dataclasses.replace(options, run=label)
            results += ingest_files(con, [path], file_options, on_result=report)
        total = con.execute(
            "SELECT count(*), coalesce(sum(n_turns), 0) FROM trajectories"
        ).fetchone()
        from recovery.quality import run_quality, summary_lines
        from recovery.store import runs_of

        # The runs this command stored (or found already stored), not the whole store: the
        # check costs what the input costs.
        touched = runs_of(con, results)
        quality_lines = summary_lines(run_quality(con, touched)) if touched else []
    finally:
        con.close()
    failed = sum(r.status == "failed" for r in results)
    if created and total[0] == 0 and failed and _remove_made_store(config.store):
        # Nothing could be stored: leave no empty store behind for a wrong --format or path.
        echo(f"store {config.store} not created: no file could be ingested", err=True)
    else:
        echo(f"store {config.store or ':memory:'}: {total[0]} trajectories, {total[1]} turns")
        for line in quality_lines:  # on stderr: stdout keeps one line per file and the total
            echo(printable(line, keep_newlines=True), err=True)
    if failed:
        echo(f"{failed} of {len(results)} files failed (nothing from them was stored)", err=True)
    return failed


def _remove_made_store(store: str) -> bool:
    """Remove the store this command made and could store nothing in; whether it is gone.

    A folder store goes only when, under its writer's lock (not waited for), it still holds
    nothing but its empty layout: another command that is writing to it, or has committed a
    file to it, keeps it.
    """
    from recovery.store.folder import is_folder_store, remove_unused_folder

    if is_folder_store(store):
        return remove_unused_folder(store)
    for leftover in (Path(store), Path(f"{store}.wal")):
        if not leftover.is_dir():
            leftover.unlink(missing_ok=True)
    return True


@click.command()
@command_options(IngestConfig)
def ingest(config: IngestConfig) -> None:
    """Read rollouts (any known format) into the store, one transaction per file.

    A file already ingested (same sha256) is skipped. A bad record stops its file, names the
    file and line, and leaves the store as it was, unless --skip-bad is given. With
    --store DIR/ the store is a folder of Parquet files, partitioned by run and file.
    """
    failed = run_ingest(config)
    if failed:
        raise click.exceptions.Exit(1)
