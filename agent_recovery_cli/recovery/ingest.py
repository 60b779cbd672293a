"""``recovery ingest FILES... --store PATH``: read rollouts into the store (a DuckDB file or a
folder of Parquet files)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import click

from agent_recovery_cli.recovery.options import command_options, opt
from recovery.display import printable
from recovery.errors import UsageProblem
from recovery.store.command import IngestConfig


@dataclass
class IngestCommandConfig(IngestConfig):
    """Options of ``recovery ingest``: the library's, and the engine that runs it."""

    engine: str = opt(
        "local", "local: this process ingests the files one after the other; ray: each file "
        "is parsed in a Ray task (pip install 'agent-recovery[ray]'; RAY_ADDRESS names the "
        "cluster, else a local one is started), all committed at once; needs a folder store "
        "(--store runs/) on a folder every node sees.",
        choices=("local", "ray"),
    )
    workers: int | None = opt(
        None, "With --engine ray: files parsed at once (default: the cluster's CPUs)."
    )


def run_ingest(config: IngestCommandConfig, *, echo=click.echo) -> int:
    """Ingest every file of ``config`` into its store (with the engine it names, local by
    default); print; return the number of failed files."""
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

    def on_names(names: dict[Path, str]) -> None:
        echo(printable(names_line(names)), err=True)

    # an unknown --format is a UsageProblem, which command_options reports (exit 2)
    if config.engine != "ray" and config.workers is not None:
        raise UsageProblem("--workers is for --engine ray (the local engine is one process)")
    if config.engine == "ray":
        from recovery.store.ray_ingest import ray_ingest_command

        outcome = ray_ingest_command(config, config.workers, on_result=report,
                                     on_names=on_names)
    else:
        outcome = ingest_command(config, on_result=report, progress=progress,
                                 on_names=on_names)
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
@command_options(IngestCommandConfig)
def ingest(config: IngestCommandConfig) -> None:
    """Read rollouts (any known format) into the store, one transaction per file.

    A file already ingested (same sha256) is skipped. A bad record stops its file, names the
    file and line, and leaves the store as it was, unless --skip-bad is given. With
    --store DIR/ the store is a folder of Parquet files, partitioned by run and file.
    With --engine ray (a folder store) the files are parsed on a Ray cluster and committed
    at once.
    """
    failed = run_ingest(config)
    if failed:
        raise click.exceptions.Exit(1)
