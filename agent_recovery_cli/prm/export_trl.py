"""``prm export-trl --store S --out FILE``: the step dataset in TRL's stepwise form (JSONL)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from agent_recovery_cli.recovery.options import command_options
from prm.data.labels import DEFAULT_LABELS, LABEL_SOURCES, RECOVERY_BASES
from recovery.config import CheckedOptions, opt


@dataclass
class ExportTrlConfig(CheckedOptions):
    """Options of ``prm export-trl``."""

    store: Path | None = opt(None, "Store (DuckDB file or Parquet folder; must exist).", required=True)
    out: Path | None = opt(None, "Output JSONL file.", required=True)
    labels: str = opt(DEFAULT_LABELS, "Label source.", choices=LABEL_SOURCES)
    label_base: str = opt(
        "mc", "Base of the recovery labels for other turns.", choices=RECOVERY_BASES
    )
    soft: bool = opt(False, "Write float labels instead of booleans (PRMTrainer needs booleans).")


@click.command(name="export-trl")
@command_options(ExportTrlConfig)
def export_trl(config: ExportTrlConfig) -> None:
    """Write prompt / completions / labels rows that trl's PRMTrainer reads.

    One row per trajectory; a step's boolean label is target >= 0.5. Trajectories with a step
    whose label is unknown are left out and counted.
    """
    from prm.data.examples import export_trl as run_export
    from recovery.outputs import atomic_output, check_output_path
    from recovery.store import open_store

    check_output_path(config.out, "--out")
    store = open_store(config.store, read_only=True, must_exist=True)
    con = store.con
    try:
        with atomic_output(config.out) as temp:
            written, left_out = run_export(
                con, temp, config.labels, soft=config.soft, base=config.label_base
            )
    finally:
        store.close()
    click.echo(f"{config.out}: {written} trajectories" + (
        f" ({left_out} left out: a step with an unknown label)" if left_out else ""))
