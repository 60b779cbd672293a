"""``recovery analyze --series KEY``: runs that are checkpoints of one training, in step order.

KEY says each run's training step:

- ``run``: the last integer in the run's name (``ckpt-100`` -> 100, ``qwen7b-rl-400`` -> 400);
  a name without one, or two runs with the same number, are refused.
- ``meta.NAME``: the number in the trajectories' ``meta.NAME``; every trajectory of a run must
  hold the same one (a run holding several values is refused, not split: each checkpoint is
  one run, so that every point of the series is a comparison ``recovery analyze --runs`` can
  repeat). Two runs with the same value are refused too.

The report is built with the first checkpoint as its baseline, so the series entry of
checkpoint ``i`` holds exactly that report's comparison (first, ``i``): the same rows
``recovery analyze --baseline FIRST --runs FIRST,i`` gives with the same T grid. Pass@(1,T) of
each checkpoint is its run's K = 1 cells, with the report's bootstrap intervals.

Example:
    >>> order = series_order(con, "run", ["ckpt-200", "ckpt-100"])
    >>> [c.run for c in order]
    ['ckpt-100', 'ckpt-200']
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from recovery.errors import UsageProblem

if TYPE_CHECKING:
    from collections.abc import Sequence

    import duckdb

    from analyses.report.comparison_records import ComparisonRow
    from analyses.report.records import Report
    from analyses.report.run_records import PassCell


@dataclass(slots=True)
class Checkpoint:
    """One run of the series and its training step (an int when it is whole)."""

    run: str
    step: float | int


@dataclass(slots=True)
class SeriesPoint:
    """One checkpoint of ``--series``.

    Attributes:
        run: The run.
        key: What gave the step (``run`` or ``meta.NAME``).
        step: The training step.
        pass_at_1: Pass@(1,T) at each T of the report, with its interval.
        components: The comparison of this checkpoint with the first, one row per T (the
            report's :class:`ComparisonRow`: change, single-step and recovery parts with
            intervals); empty for the first checkpoint, or when it shares no task with it.
        note: Why ``components`` is empty (``None`` when it is not).
    """

    run: str
    key: str
    step: float | int
    pass_at_1: list[PassCell] = field(default_factory=list)
    components: list[ComparisonRow] = field(default_factory=list)
    note: str | None = None


def _listed(names: Sequence[str]) -> str:
    from recovery.display import printable

    return ", ".join(repr(printable(n)) for n in names)


def _run_number(name: str) -> int:
    """The last integer in a run name.

    Raises:
        UsageProblem: when the name holds no digit.
    """
    numbers = re.findall(r"\d+", name)
    if not numbers:
        from recovery.display import printable

        raise UsageProblem(
            f"--series run: run {printable(name)!r} has no number in its name; name each "
            "checkpoint with its step (e.g. ckpt-100), or order by a meta field "
            "(--series meta.step)")
    return int(numbers[-1])


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _meta_steps(con: duckdb.DuckDBPyConnection, key: str,
                runs: Sequence[str]) -> dict[str, float]:
    """Each run's one value of ``meta.NAME`` (``key``), as a number.

    Raises:
        UsageProblem: for a run whose trajectories lack the field, hold a value that is not a
            number, or hold several values.
    """
    from analyses.frames import group_expression

    expression, params = group_expression(con, key)
    marks = ", ".join("?" for _ in runs)
    rows = con.execute(
        f"SELECT run, {expression} AS v, count(*) FROM trajectories WHERE run IN ({marks}) "
        "GROUP BY run, v ORDER BY run, v", [*params, *runs]).fetchall()
    values: dict[str, list[str | None]] = {}
    for run, value, _ in rows:
        values.setdefault(str(run), []).append(value)
    steps = {}
    for run in runs:
        found = values.get(run, [])
        if len(found) > 1:
            shown = ", ".join(str(v) for v in found[:5])
            raise UsageProblem(
                f"--series {key}: run {_listed([run])} holds several values ({shown}); each "
                "checkpoint must be a run of its own (e.g. one file per checkpoint)")
        if not found or found[0] is None:
            raise UsageProblem(f"--series {key}: run {_listed([run])} has no {key}")
        step = _number(found[0])
        if step is None:
            raise UsageProblem(f"--series {key}: run {_listed([run])} has {key} = "
                               f"{_listed([found[0]])}, not a number")
        steps[run] = step
    return steps


def series_order(con: duckdb.DuckDBPyConnection, key: str,
                 runs: Sequence[str] | None) -> list[Checkpoint]:
    """The runs (``None`` or empty = every run of the store) as checkpoints, in step order.

    Raises:
        UsageProblem: for a KEY that is neither ``run`` nor ``meta.NAME``, a run without a
            step, or two runs with the same step.
    """
    if not runs:
        runs = [row[0] for row in con.execute(
            "SELECT DISTINCT run FROM trajectories ORDER BY run").fetchall()]
    if key == "run":
        steps = {run: float(_run_number(run)) for run in runs}
    elif key.startswith("meta.") and key != "meta.":
        steps = _meta_steps(con, key, runs)
    else:
        raise UsageProblem(f"--series: give run (the number in each run's name) or meta.NAME "
                           f"(a field of the trajectories' meta), not {key!r}")
    by_step: dict[float, list[str]] = {}
    for run, step in steps.items():
        by_step.setdefault(step, []).append(run)
    shared = {s: r for s, r in by_step.items() if len(r) > 1}
    if shared:
        step, names = min(shared.items())
        raise UsageProblem(f"--series {key}: runs {_listed(names)} have the same step "
                           f"{_step_text(step)}; each checkpoint needs a step of its own")
    return [Checkpoint(run, int(step) if step.is_integer() else step)
            for run, step in sorted(steps.items(), key=lambda i: i[1])]


def plan_series(con: duckdb.DuckDBPyConnection, key: str, runs: Sequence[str] | None,
                baseline: str | None, by: str | None) -> list[Checkpoint]:
    """The checkpoints of ``--series KEY`` in step order (the first is the report's baseline).

    Raises:
        UsageProblem: with ``--by``, with a ``--baseline`` other than the first checkpoint,
            or when the runs cannot be ordered (:func:`series_order`).
    """
    if by:
        raise UsageProblem("--series and --by cannot be combined: give one of them")
    order = series_order(con, key, runs)
    series_baseline(order, baseline)
    return order


def series_baseline(order: list[Checkpoint], baseline: str | None) -> str:
    """The baseline of a series report: its first checkpoint.

    Raises:
        UsageProblem: when ``--baseline`` names another run.
    """
    first = order[0].run
    if baseline is not None and baseline != first:
        raise UsageProblem(f"--series compares every checkpoint with the first ("
                           f"{_listed([first])}); leave out --baseline {_listed([baseline])}")
    return first


def series_points(report: Report, order: list[Checkpoint], key: str) -> list[SeriesPoint]:
    """The series of ``report`` (built with ``order[0]`` as its baseline), in step order."""
    comparisons = {c.candidate: c for c in report.comparisons}
    points = []
    for i, checkpoint in enumerate(order):
        run = report.runs.get(checkpoint.run)
        cells = [] if run is None else [c for c in run.pass_at_kt if c.k == 1]
        point = SeriesPoint(checkpoint.run, key, checkpoint.step, pass_at_1=cells)
        comparison = comparisons.get(checkpoint.run)
        if comparison is not None and not comparison.shares_no_task():
            point.components = list(comparison.by_t)
        elif i > 0:
            point.note = f"no comparison with {order[0].run}: the runs share no task"
        points.append(point)
    return points


def _step_text(step: float) -> str:
    return str(int(step)) if float(step).is_integer() else f"{step:g}"


def step_label(point: SeriesPoint) -> str:
    """The step as it is shown: ``100``, or ``0.5`` for a step that is not whole."""
    return _step_text(point.step)


def _cell_text(value: float, lo: float, hi: float, signed: bool = False) -> str:
    from analyses.report.text import interval, number

    band = interval(lo, hi, signed=signed)
    return f"{number(value, signed=signed)} {band}".strip()


def _component_cells(point: SeriesPoint, t: int | None) -> list[str]:
    """Change, single-step and recovery at ``t`` against the first checkpoint, with intervals."""
    row = next((r for r in point.components if r.t == t), None)
    if row is None:
        return ["", "", ""]
    return [_cell_text(getattr(row, name), row.lo.get(name, math.nan),
                       row.hi.get(name, math.nan), signed=True)
            for name in ("delta", "single_step", "recovery")]


def print_series(report: Report, console: object) -> None:
    """The series as one table: a row per checkpoint, Pass@(1,T) at each T, then the change
    against the first checkpoint and its single-step and recovery parts at the report's
    reference T (no limit, or the largest budget)."""
    from rich import box
    from rich.table import Table

    from analyses.report.terminal import shown
    from analyses.report.text import t_header, t_label

    points = report.series or []
    key = points[0].key if points else "run"
    ref = report.reference_t
    table = Table(title=f"Checkpoints by {shown(key)}: Pass@(1,T), and the change from "
                  f"{shown(points[0].run) if points else ''} at {t_label(ref)}",
                  box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    for header in ["checkpoint", "step", *(t_header(t) for t in report.ts),
                   "change", "single-step", "recovery"]:
        table.add_column(header, overflow="fold", justify="left" if header == "checkpoint"
                         else "right")
    for point in points:
        cells = {c.t: c for c in point.pass_at_1}
        table.add_row(shown(point.run), step_label(point),
                      *(_cell_text(cells[t].value, cells[t].lo, cells[t].hi) if t in cells
                        else "" for t in report.ts),
                      *_component_cells(point, ref))
    console.print(table)
    console.print(f"change = Pass@(1,{t_label(ref)}) minus the first checkpoint's, split into "
                  "single-step quality and recovery (intervals: bootstrap over tasks); "
                  "every T is in the JSON (key series).", markup=False, soft_wrap=True)
