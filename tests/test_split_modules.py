"""The report, Pass@(K,T), the graph drawing and the trajectory record are rooms of one idea:
each module under MAX_LINES lines, with a docstring saying what it holds, and no function of
more than MAX_PARAMS settings (more take an options dataclass)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 500
MAX_PARAMS = 6

ROOMS = (
    "analyses/report/build.py", "analyses/report/plan.py", "analyses/report/known_frames.py",
    "analyses/report/measures.py", "analyses/report/run_numbers.py",
    "analyses/report/comparisons.py", "analyses/report/notes.py", "analyses/report/steps.py",
    "analyses/report/grouped.py", "analyses/report/records.py", "analyses/report/options.py",
    "analyses/report/run_records.py", "analyses/report/comparison_records.py",
    "analyses/report/plots.py", "analyses/report/plot_axes.py",
    "analyses/report/plot_layout.py", "analyses/report/heatmap_plots.py",
    "analyses/report/budget_plots.py", "analyses/report/decomposition_plots.py",
    "analyses/report/hazard_plots.py", "analyses/passkt.py", "analyses/task_counts.py",
    "analyses/task_bootstrap.py", "analyses/grid_defaults.py", "analyses/modes.py",
    "recovery/graph/draw.py", "recovery/graph/canvas.py", "recovery/graph/turn_drawing.py",
    "recovery/graph/state_selection.py", "recovery/graph/state_drawing.py",
    "recovery/graph/timeline_drawing.py", "recovery/schema.py", "recovery/fields.py",
    "recovery/canonical_records.py",
)


def room_problems(root: Path, relative: str) -> list[str]:
    """What keeps ``relative`` (under ``root``) from being a room: too long, no docstring, a
    function of too many settings (``self``/``cls`` and ``*args``/``**kwargs`` not counted)."""
    text = (root / relative).read_text(encoding="utf-8")
    tree = ast.parse(text)
    problems = []
    if len(text.splitlines()) > MAX_LINES:
        problems.append(f"{relative}: {len(text.splitlines())} lines")
    if not (ast.get_docstring(tree) or "").strip():
        problems.append(f"{relative}: no module docstring")
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
            if names and names[0] in ("self", "cls"):
                names = names[1:]
            if len(names) > MAX_PARAMS:
                problems.append(f"{relative}:{node.lineno} {node.name}: {len(names)} settings")
    return problems


@pytest.mark.parametrize("relative", ROOMS)
def test_each_module_is_a_room(relative: str) -> None:
    assert room_problems(ROOT, relative) == []


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text('"""Doc."""\n' + "x = 1\n" * MAX_LINES)
    (tmp_path / "bare.py").write_text("def f(a, b, c, d, e, f, g):\n    pass\n")
    (tmp_path / "fine.py").write_text('"""Doc."""\n\n\ndef f(self, a, b, c, d, e, f, *g):\n'
                                      "    pass\n")
    assert room_problems(tmp_path, "long.py") == [f"long.py: {MAX_LINES + 1} lines"]
    assert room_problems(tmp_path, "bare.py") == ["bare.py: no module docstring",
                                                  "bare.py:1 f: 7 settings"]
    assert room_problems(tmp_path, "fine.py") == []
