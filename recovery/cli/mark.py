"""``recovery mark --store PATH [--rules FILE]``: re-mark errors and spells in a store.

Error kinds come from the input (an ``error`` string) and from rule files: they are printed with
their control characters escaped (:func:`recovery.display.printable`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from recovery.cli.options import command_options, opt
from recovery.display import printable


@dataclass
class MarkConfig:
    """Options of ``recovery mark``."""

    store: Path | None = opt(
        None, "Store to re-mark (changed in place): a DuckDB file or a folder store.",
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
    """Re-mark the store of ``config`` in one transaction; print and return counts per kind."""
    from recovery.marking import RuleError, load_rules, mark_store
    from recovery.store import connect, in_transaction
    from recovery.store.folder import folder_root, mark_folder

    try:
        rules = load_rules(config.rules) if config.rules else None
    except RuleError as err:
        raise click.UsageError(printable(err, keep_newlines=True)) from None
    if not Path(config.store).exists():
        raise click.UsageError(f"store {printable(config.store)} does not exist")
    con = connect(config.store)
    try:
        traj_ids = None
        if config.run:
            marks = ", ".join("?" for _ in config.run)
            traj_ids = [
                row[0]
                for row in con.execute(
                    f"SELECT traj_id FROM trajectories WHERE run IN ({marks})", config.run
                ).fetchall()
            ]
        if folder_root(con) is not None:
            # each ingested file's partitions are rewritten re-marked, one file at a time
            counts = mark_folder(
                con, rules=rules, runs=config.run,
                prm_model=config.prm_model, prm_threshold=config.prm_threshold,
            )
        else:
            counts = in_transaction(con, lambda: mark_store(
                con, rules=rules, traj_ids=traj_ids,
                prm_model=config.prm_model, prm_threshold=config.prm_threshold,
            ))
        scope = "TRUE" if traj_ids is None else "tr.run IN (" + ", ".join(
            "?" for _ in config.run) + ")"
        n_traj, n_turns = con.execute(
            f"SELECT count(*), coalesce(sum(n_turns), 0) FROM trajectories tr WHERE {scope}",
            config.run,
        ).fetchall()[0]
        n_spells, n_recovered, n_fatal = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE s.recovered), count(*) FILTER (WHERE s.fatal) "
            f"FROM error_spells s JOIN trajectories tr USING (traj_id) WHERE {scope}",
            config.run,
        ).fetchall()[0]
    finally:
        con.close()
    echo(f"marked {n_traj} trajectories, {n_turns} turns")
    kinds = {printable(kind): n for kind, n in counts.items()}
    width = max((len(k) for k in kinds), default=0)
    for kind, n in kinds.items():
        echo(f"  {kind:<{width}}  {n} turns")
    if not counts:
        echo("  no error turns")
    echo(f"spells: {n_spells} ({n_recovered} recovered, {n_fatal} fatal)")
    return counts


@click.command()
@command_options(MarkConfig)
def mark(config: MarkConfig) -> None:
    """Re-mark error turns, recoveries and error spells in a store (after rules change).

    Applies explicit marks, labels, the user rules of --rules and the built-in rule sets (see
    docs/errors.md), replacing the previous marks, and prints the error turns per kind.
    """
    run_mark(config)
