"""``recovery mark --store PATH [--rules FILE]``: re-mark errors and spells in a store.

Error kinds come from the input (an ``error`` string) and from rule files: they are printed with
their control characters escaped (:func:`recovery.display.printable`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from agent_recovery_cli.recovery.options import command_options, opt
from recovery.display import printable


@dataclass
class MarkConfig:
    """Options of ``recovery mark``."""

    store: Path | None = opt(
        None, "Store to re-mark (DuckDB file or Parquet folder; changed in place).",
        required=True,
    )
    rules: Path | None = opt(None, "TOML file of extra error rules (see docs/errors.md).")
    run: list[str] = opt(
        default_factory=list, help="Only the trajectories of these runs (comma-separated)."
    )
    prm_model: str | None = opt(
        None, "Also mark 'prm' errors: turns this model (step_scores.model) scored low."
    )
    prm_threshold: float = opt(0.5, "Score below which --prm-model marks a turn 'prm'.")


def run_mark(config: MarkConfig, *, echo=click.echo) -> dict[str, int]:
    """Re-mark the store of ``config`` atomically; print and return counts per kind."""
    from recovery.marking import RuleError, load_rules
    from recovery.marking.mark import mark_summary
    from recovery.store import open_store

    try:
        rules = load_rules(config.rules) if config.rules else None
    except RuleError as err:
        raise click.UsageError(printable(err, keep_newlines=True)) from None
    with open_store(config.store, must_exist=True) as store:
        traj_ids = store.trajectories_of_runs(config.run) if config.run else None
        counts = store.mark(rules=rules, traj_ids=traj_ids, prm_model=config.prm_model,
                            prm_threshold=config.prm_threshold)
        summary = mark_summary(store.con, traj_ids)
    echo(f"marked {summary.n_trajectories} trajectories, {summary.n_turns} turns")
    kinds = {printable(kind): n for kind, n in counts.items()}
    width = max((len(k) for k in kinds), default=0)
    for kind, n in kinds.items():
        echo(f"  {kind:<{width}}  {n} turns")
    if not counts:
        echo("  no error turns")
    echo(f"spells: {summary.n_spells} ({summary.n_recovered} recovered, "
         f"{summary.n_fatal} fatal)")
    return counts


@click.command()
@command_options(MarkConfig)
def mark(config: MarkConfig) -> None:
    """Re-mark error turns, recoveries and error spells in a store (after rules change).

    Applies explicit marks, labels, the user rules of --rules and the built-in rule sets (see
    docs/errors.md), replacing the previous marks, and prints the error turns per kind.
    """
    run_mark(config)
