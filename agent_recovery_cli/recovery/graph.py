"""``recovery graph``: write a trajectory's turn graph or a task's state graph.

``recovery graph TRAJ_ID --store S --out FILE`` writes the turn graph of one trajectory;
``recovery graph --task TASK_ID --store S --out FILE [--run R] [--view V]`` a view of a task:
its state graph (``--view states``), its timeline (``--view timeline``: one row per sample,
one cell per turn, coloured by error kind, recovery turns marked, the end reason after each
row), or (``--view auto``, the default) the timeline when the state graph would merge little
(fewer than a third of the turns after the first reach a state that another sample reaches:
:func:`recovery.graph.choose_view`), the state graph otherwise.
The file's suffix picks the form: ``.graphml``, ``.json`` (node-link) or ``.png``, ``.svg``,
``.pdf`` (a drawing). A task, run or trajectory that is not in the store is refused with the
closest ids that are. Ids, runs and file names are quoted with their control characters
escaped (:func:`recovery.display.printable`), so no escape sequence from the store reaches the
terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from agent_recovery_cli.recovery.options import command_options, opt
from recovery.config import CheckedOptions
from recovery.display import printable
from recovery.outputs import atomic_output, check_output_path

SUFFIXES = (".graphml", ".json", ".png", ".svg", ".pdf")


@dataclass
class GraphConfig(CheckedOptions):
    """Options of ``recovery graph``."""

    traj_id: str | None = opt(argument=True, help="Trajectory whose turn graph to write.")
    store: Path | None = opt(None, "Store to read (DuckDB file or Parquet folder; opened read-only).", required=True)
    out: Path | None = opt(
        None, "Output file: .graphml, .json (node-link), or .png, .svg, .pdf (drawing).",
        short="-o",
        required=True,
    )
    task: str | None = opt(None, "Write the state graph of this task instead.")
    run: list[str] = opt(
        default_factory=list, help="State graph: only these runs (comma-separated)."
    )
    view: str = opt(
        "auto", "--task: 'states' (state graph), 'timeline' (one row per sample, one cell per "
        "turn), or 'auto': the timeline when fewer than a third of the turns after the first "
        "reach a state another sample reaches, else the state graph.",
        choices=("auto", "timeline", "states"),
    )
    normalise: str = opt(
        "mask", "State graph: how observations are normalised into states.",
        choices=("mask", "lower", "exact"),
    )
    score_model: str | None = opt(
        None, "Turn graph: the PRM model whose step score becomes the node's 'score'."
    )
    max_turns: list[str] | None = opt(
        None, "Step cap, RUN=N, ENV=N or RUN/ENV=N, as `recovery analyze --max-turns` takes it: "
        "an unsuccessful episode that reached it ran out of turns (shown as such, not failed).",
    )

    def caps(self) -> dict[str, int] | None:
        """``--max-turns`` parsed (names are resolved against the data later)."""
        from recovery.caps_given import parse_max_turns

        return parse_max_turns(self.max_turns) if self.max_turns else None


def close_matches(wanted: str, candidates: list[str], n: int = 5) -> list[str]:
    """Up to ``n`` candidates like ``wanted``: its last ``/`` part exactly (``airline/17``
    -> ``17``), then :func:`difflib.get_close_matches` of it and of that part."""
    import difflib

    tail = wanted.rstrip("/").rsplit("/", 1)[-1]
    found = [c for c in candidates if c == tail or c.rsplit("/", 1)[-1] == tail]
    found += difflib.get_close_matches(wanted, candidates, n, cutoff=0.6)
    if tail != wanted:
        found += difflib.get_close_matches(tail, candidates, n, cutoff=0.6)
    return list(dict.fromkeys(c for c in found if c != wanted))[:n]


def _listing(values: list[str], n: int = 8) -> str:
    shown = ", ".join(printable(v) for v in values[:n])
    return shown + (f", ... ({len(values)} in all)" if len(values) > n else "")


def _unknown_task(con, task: str, runs: list[str]) -> str | None:
    """Why ``task`` (in ``runs``) has no state graph, with close matches; ``None`` if it has."""
    known_runs = [r for (r,) in con.execute(
        "SELECT DISTINCT run FROM trajectories ORDER BY run").fetchall()]
    missing = [r for r in runs if r not in known_runs]
    if missing:
        hints = [m for r in missing for m in close_matches(r, known_runs, 3)]
        return (f"run {', '.join(printable(repr(r)) for r in missing)} is not in the store"
                + (f"; did you mean {_listing(list(dict.fromkeys(hints)))}?" if hints else "")
                + f" (runs: {_listing(known_runs)})")
    where = f"WHERE run IN ({', '.join('?' for _ in runs)})" if runs else ""
    tasks = [str(t) for (t,) in con.execute(
        f"SELECT DISTINCT task_id FROM trajectories {where} ORDER BY task_id", runs).fetchall()]
    if task in tasks:
        return None
    scope = f" in runs {_listing(runs)}" if runs else ""
    hints = close_matches(task, tasks)
    return (f"task {printable(repr(task))} is not in the store{scope}"
            + (f"; did you mean {_listing(hints)}?" if hints else "")
            + f" (task ids: {_listing(tasks)})")


def _unknown_trajectory(con, traj_id: str) -> str:
    """The message for a trajectory id not in the store, with close matches."""
    prefix = traj_id[:4]
    near = [t for (t,) in con.execute(
        "SELECT traj_id FROM trajectories WHERE starts_with(traj_id, ?) ORDER BY traj_id "
        "LIMIT 5000", [prefix]).fetchall()]
    hints = close_matches(traj_id, near)
    if not hints:
        tasks = [str(t) for (t,) in con.execute(
            "SELECT DISTINCT task_id FROM trajectories ORDER BY task_id").fetchall()]
        if traj_id in tasks:
            return (f"{printable(repr(traj_id))} is a task id, not a trajectory id: use --task "
                    f"{printable(traj_id)} for its state graph")
    return (f"trajectory {printable(repr(traj_id))} is not in the store"
            + (f"; did you mean {_listing(hints)}?" if hints else "")
            + " (list trajectory ids with: recovery sql \"SELECT traj_id, run, task_id FROM "
            "trajectories LIMIT 10\" --store STORE)")


def run_graph(config: GraphConfig, *, echo=click.echo) -> None:
    """Build the graph asked for by ``config`` and write it.

    Raises:
        click.UsageError: for a wrong combination of arguments or an unknown file type.
        click.ClickException: for a task, run or trajectory not in the store (with close
            matches).
    """
    from recovery.graph import turn_graph, write_graph
    from recovery.store import open_store

    if (config.traj_id is None) == (config.task is None):
        raise click.UsageError("give either a TRAJ_ID or --task TASK_ID (not both)")
    if config.out.suffix.lower() not in SUFFIXES:
        raise click.UsageError(
            f"--out {printable(config.out)}: use one of {', '.join(SUFFIXES)}"
        )
    check_output_path(config.out, "--out")
    con = open_store(config.store, read_only=True).con
    if config.task is None and config.view != "auto":
        raise click.UsageError("--view applies to a task (--task TASK_ID), not to a trajectory")
    try:
        if config.task is not None:
            problem = _unknown_task(con, config.task, list(config.run))
            if problem:
                raise click.ClickException(problem)
            _write_task_view(con, config, echo)
            return
        try:
            graph = turn_graph(con, config.traj_id, score_model=config.score_model,
                               max_turns=config.caps())
        except KeyError:
            raise click.ClickException(_unknown_trajectory(con, config.traj_id)) from None
    except KeyError as err:
        raise click.ClickException(printable(err.args[0])) from None
    finally:
        con.close()
    with atomic_output(config.out) as temp:
        write_graph(graph, str(temp))
    echo(
        f"turn graph of trajectory {printable(config.traj_id)}: {graph.number_of_nodes()} "
        f"nodes, {graph.number_of_edges()} edges -> {printable(config.out)}"
    )


def _write_task_view(con, config: GraphConfig, echo) -> None:
    """Write the view of ``config.task`` that ``config.view`` asks for (module docs)."""
    from recovery.graph import choose_view, shared_share, state_graph, task_timeline, write_graph
    from recovery.graph.timeline_drawing import write_timeline

    runs = config.run or None
    view = config.view
    share = float("nan")
    if view == "auto":
        share = shared_share(con, config.task, runs, config.normalise)
        view = choose_view(share)
    why = (f" (auto: {100 * share:.0f}% of the turns after the first reach a shared state)"
           if share == share else "")
    task = printable(config.task)
    if view == "timeline":
        timeline = task_timeline(con, config.task, runs, config.normalise, config.caps())
        with atomic_output(config.out) as temp:
            write_timeline(timeline, str(temp))
        echo(f"timeline of task {task}{why}: {len(timeline.rows)} rows, {timeline.n_turns} "
             f"turns -> {printable(config.out)}")
        return
    graph = state_graph(con, config.task, runs=runs, normalise=config.normalise)
    with atomic_output(config.out) as temp:
        write_graph(graph, str(temp))
    echo(f"state graph of task {task}{why}: {graph.number_of_nodes()} nodes, "
         f"{graph.number_of_edges()} edges -> {printable(config.out)}")


@click.command()
@command_options(GraphConfig)
def graph(config: GraphConfig) -> None:
    """Write a trajectory's turn graph, or (--task) a task's state graph or timeline.

    Turn graph: one node per turn, 'next' edges, and 'recovers' edges from an error spell's
    first turn to its recovery turn. State graph: the prefix tree of normalised observation
    histories over every sample of the task, with per-run counts and Monte Carlo success rates.
    Timeline: one row per sample, one cell per turn coloured by error kind, recovery turns
    marked, the end reason (success, failure, budget, crash) after each row; --view auto picks
    it when the samples' states rarely repeat.
    """
    run_graph(config)
