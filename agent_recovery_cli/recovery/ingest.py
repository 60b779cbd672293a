"""``recovery ingest FILES... --store PATH``: read rollouts into the store (a DuckDB file or a
folder of Parquet files)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from agent_recovery_cli.recovery.options import command_options
from recovery.display import printable
from recovery.store.command import IngestConfig


def run_ingest(config: IngestConfig, *, echo=click.echo) -> int:
    """Ingest every file of ``config`` into its store; print; return the number of failed
    files."""
    from tqdm import tqdm

    from recovery.store import IngestResult
    from recovery.store.command import ingest_command, names_line

    def report(result: IngestResult) -> None:
        if result.status == "failed":
            tqdm.write(result.summary(), file=sys.stderr)
            return
        tqdm.write(result.summary(), file=sys.stdout)
        for bad in result.skipped[:5]:
            tqdm.write(f"  skipped {printable(bad, keep_newlines=True)}", file=sys.stderr)
        if len(result.skipped) > 5:
            tqdm.write(f"  ... and {len(result.skipped) - 5} more", file=sys.stderr)

    def progress(files: list[Path]) -> tqdm:
        return tqdm(files, desc="ingest", unit="file", file=sys.stderr,
                    disable=len(files) < 3, leave=False)

    # an unknown --format is a UsageProblem, which command_options reports (exit 2)
    outcome = ingest_command(
        config, on_result=report, progress=progress,
        on_names=lambda names: echo(printable(names_line(names)), err=True))
    if outcome.removed:
        echo(f"store {config.store} not created: no file could be ingested", err=True)
    else:
        echo(f"store {config.store or ':memory:'}: {outcome.n_trajectories} trajectories, "
             f"{outcome.n_turns} turns")
        for line in outcome.quality_lines:  # stderr: stdout keeps one line per file, the total
            echo(printable(line, keep_newlines=True), err=True)
    if outcome.n_failed:
        echo(f"{outcome.n_failed} of {len(outcome.results)} files failed (nothing from them "
             "was stored)", err=True)
    return outcome.n_failed


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
