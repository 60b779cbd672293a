"""``recovery graph``: write a trajectory's turn graph or a task's state graph.

``recovery graph TRAJ_ID --store S --out FILE`` writes the turn graph of one trajectory;
``recovery graph --task TASK_ID --store S --out FILE [--run R]`` the state graph of a task.
The file's suffix picks the form: ``.graphml``, ``.json`` (node-link) or ``.png`` (drawing).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from recovery.cli.options import command_options, opt

SUFFIXES = (".graphml", ".json", ".png", ".svg", ".pdf")


@dataclass
class GraphConfig:
    """Options of ``recovery graph``."""

    traj_id: str | None = opt(argument=True, help="Trajectory whose turn graph to write.")
    store: Path | None = opt(None, "DuckDB store to read (opened read-only).", required=True)
    out: Path | None = opt(
        None, "Output file: .graphml, .json (node-link) or .png (drawing).", short="-o",
        required=True,
    )
    task: str | None = opt(None, "Write the state graph of this task instead.")
    run: list[str] = opt(
        default_factory=list, help="State graph: only these runs (comma-separated)."
    )
    normalise: str = opt(
        "mask", "State graph: how observations are normalised into states.",
        choices=("mask", "lower", "exact"),
    )
    score_model: str | None = opt(
        None, "Turn graph: the PRM model whose step score becomes the node's 'score'."
    )


def run_graph(config: GraphConfig, *, echo=click.echo) -> None:
    """Build the graph asked for by ``config`` and write it."""
    from recovery.graph import state_graph, turn_graph, write_graph
    from recovery.store import connect

    if (config.traj_id is None) == (config.task is None):
        raise click.UsageError("give either a TRAJ_ID or --task TASK_ID (not both)")
    if config.out.suffix.lower() not in SUFFIXES:
        raise click.UsageError(
            f"--out {config.out}: use one of {', '.join(SUFFIXES)}"
        )
    try:
        con = connect(config.store, read_only=True)
    except FileNotFoundError as err:
        raise click.UsageError(str(err)) from None
    try:
        if config.task is not None:
            graph = state_graph(
                con, config.task, runs=config.run or None, normalise=config.normalise
            )
            what = f"state graph of task {config.task}"
        else:
            graph = turn_graph(con, config.traj_id, score_model=config.score_model)
            what = f"turn graph of trajectory {config.traj_id}"
    except KeyError as err:
        raise click.ClickException(str(err.args[0])) from None
    finally:
        con.close()
    config.out.parent.mkdir(parents=True, exist_ok=True)
    write_graph(graph, str(config.out))
    echo(
        f"{what}: {graph.number_of_nodes()} nodes, {graph.number_of_edges()} edges "
        f"-> {config.out}"
    )


@click.command()
@command_options(GraphConfig)
def graph(config: GraphConfig) -> None:
    """Write a trajectory's turn graph, or (--task) a task's state graph.

    Turn graph: one node per turn, 'next' edges, and 'recovers' edges from an error spell's
    first turn to its recovery turn. State graph: the prefix tree of normalised observation
    histories over every sample of the task, with per-run counts and Monte Carlo success rates.
    """
    run_graph(config)
