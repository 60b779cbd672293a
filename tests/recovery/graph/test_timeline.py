"""Task timelines (`recovery graph --task T --view auto|timeline|states`): on runs whose
observations never repeat (games, long conversations) the state graph merges nothing, and the
timeline shows each sample's turns, error kinds, recoveries and end reason."""

from __future__ import annotations

import json

import networkx as nx
import pytest
from click.testing import CliRunner

from recovery.graph import (
    SHARED_SHARE_MIN,
    choose_view,
    shared_share,
    task_timeline,
    timeline_figure,
)
from recovery.schema import Trajectory, Turn
from recovery.store import open_store


def _word(n: int) -> str:
    """A word without digits, different for every n (the mask normaliser keeps it)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = letters[r] + out
    return out


# (run, pattern, end): C clean, T tool_error, I invalid_action; end "success" / "failure" /
# "budget" (the episode ran to its cap of 6 turns) / "crash" (no turn).
GAME = [
    ("agent-a", "CCTCC", "success"),
    ("agent-a", "CIICTT", "budget"),
    ("agent-a", "CTC", "failure"),
    ("agent-b", "CCCICC", "budget"),
    ("agent-b", "", "crash"),
    ("agent-b", "CCTTIC", "success"),
]
KINDS = {"T": "tool_error", "I": "invalid_action"}


def game_trajectories(task: str = "game/1") -> list[Trajectory]:
    out = []
    counter = 0
    for sample, (run, pattern, end) in enumerate(GAME):
        turns = []
        for c in pattern:
            counter += 1
            turns.append(Turn(action=f"go {_word(counter)}",
                              observation=f"you see a {_word(1000 + counter)} room",
                              error=KINDS.get(c)))
        out.append(Trajectory(run=run, task_id=task, sample=sample, turns=turns, budget=6,
                              success=end == "success",
                              end_reason=end if end == "crash" else None))
    return out


@pytest.fixture
def game_store(tmp_path):
    path = tmp_path / "game.duckdb"
    store = open_store(path)
    store.ingest_trajectories(game_trajectories())
    # a task whose samples all see the same observations: its states are shared
    store.ingest_trajectories([Trajectory(run="agent-a", task_id="maze", sample=s,
                                         success=bool(s % 2),
                                         turns=[Turn(f"step {s}", "a corridor"),
                                                Turn("look", "a door"), Turn("open", "done")])
                              for s in range(4)])
    yield store.con, path
    store.close()


def test_auto_picks_the_timeline_when_states_do_not_repeat(game_store):
    con, _ = game_store
    share = shared_share(con, "game/1")
    assert share == 0.0 and choose_view(share) == "timeline"
    shared = shared_share(con, "maze")
    assert shared >= SHARED_SHARE_MIN and choose_view(shared) == "states"
    one = shared_share(con, "game/1", runs=["agent-a"])
    assert one == 0.0
    assert choose_view(SHARED_SHARE_MIN - 0.01) == "timeline"


def test_timeline_rows_cells_and_end_reasons(game_store):
    con, _ = game_store
    timeline = task_timeline(con, "game/1")
    assert timeline.runs == ["agent-a", "agent-b"]
    assert len(timeline.rows) == len(GAME)
    for row, (run, pattern, end) in zip(timeline.rows, GAME, strict=True):
        assert row.run == run and row.end_reason == end
        kinds = "".join({"clean": "C", "recovery": "C"}.get(c.kind, "E") for c in row.cells)
        assert kinds == "".join("C" if c == "C" else "E" for c in pattern)
        assert [c.t for c in row.cells] == list(range(1, len(pattern) + 1))
        for cell, c in zip(row.cells, pattern, strict=True):
            assert cell.error_kind == KINDS.get(c, "")
    first = timeline.rows[0]
    assert first.cells[3].kind == "recovery" and first.cells[3].recovery_of == 3
    assert timeline.rows[1].end_label == "budget (cap 6)"
    assert timeline.rows[4].cells == [] and timeline.rows[4].end_label == "crash"
    assert timeline.error_kinds[0] in ("tool_error", "invalid_action")
    with pytest.raises(KeyError):
        task_timeline(con, "nope")


def test_cli_graph_task_view_auto_timeline_and_states(game_store, tmp_path):
    from agent_recovery_cli.recovery import main

    con, path = game_store
    con.close()
    runner = CliRunner()
    out = tmp_path / "game.json"
    result = runner.invoke(main, ["graph", "--task", "game/1", "--store", str(path), "-o",
                                  str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("timeline of task game/1 (auto: 0% of the turns")
    data = json.loads(out.read_text())
    assert data["view"] == "timeline" and data["task_id"] == "game/1"
    assert [r["end_reason"] for r in data["rows"]] == [end for *_, end in GAME]
    assert [len(r["cells"]) for r in data["rows"]] == [len(p) for _, p, _ in GAME]
    assert data["rows"][0]["cells"][2] == {"t": 3, "kind": "error", "error_kind": "tool_error",
                                           "recovery_of": None}
    result = runner.invoke(main, ["graph", "--task", "game/1", "--view", "states", "--store",
                                  str(path), "-o", str(out)])
    assert result.exit_code == 0 and result.output.startswith("state graph of task game/1")
    assert json.loads(out.read_text())["graph"]["task_id"] == "game/1"
    result = runner.invoke(main, ["graph", "--task", "maze", "--store", str(path), "-o",
                                  str(out)])
    assert result.exit_code == 0 and result.output.startswith("state graph of task maze (auto")
    for suffix in (".graphml", ".png", ".svg"):
        target = tmp_path / f"timeline{suffix}"
        result = runner.invoke(main, ["graph", "--task", "game/1", "--view", "timeline",
                                      "--store", str(path), "-o", str(target)])
        assert result.exit_code == 0, result.output
    graph = nx.read_graphml(tmp_path / "timeline.graphml")
    assert graph.graph["view"] == "timeline"
    assert graph.number_of_nodes() == sum(len(p) or 1 for _, p, _ in GAME)
    assert (tmp_path / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = runner.invoke(main, ["graph", "some-traj", "--view", "timeline", "--store",
                                  str(path), "-o", str(out)])
    assert result.exit_code == 2 and "--view applies to a task" in result.output


def _legend_inside(figure) -> None:
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    for legend in figure.legends:
        box = legend.get_window_extent(renderer)
        assert figure.bbox.x0 <= box.x0 and box.x1 <= figure.bbox.x1
        assert figure.bbox.y0 <= box.y0 and box.y1 <= figure.bbox.y1


def test_timeline_drawing_names_end_reasons_and_keeps_its_texts_apart(game_store):
    from analyses.report.plot_layout import layout_problems

    con, _ = game_store
    figure = timeline_figure(task_timeline(con, "game/1"))
    texts = [t.get_text() for t in figure.axes[0].texts]
    assert texts == ["success", "budget (cap 6)", "failure", "budget (cap 6)", "crash",
                     "success"]
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert "error: tool_error" in legend and "error: invalid_action" in legend
    assert any(t.startswith("recovery turn") for t in legend)
    _legend_inside(figure)
    assert layout_problems(figure) == []
    assert "0% of the turns after the first" in figure._suptitle.get_text()


def test_a_long_game_timeline_stays_legible(tmp_path):
    """25 samples of 100 turns each of two runs (a game with a 100-step cap)."""
    from analyses.report.plot_layout import layout_problems

    store = open_store(None)
    trajectories = []
    counter = 0
    for run in ("balrog-llama", "balrog-qwen"):
        for sample in range(25):
            turns = []
            for t in range(100 if sample % 3 else 40):
                counter += 1
                turns.append(Turn(f"move {_word(counter)}", f"a {_word(counter)} cave",
                                  error="invalid_action" if (t + sample) % 9 == 0 else None))
            trajectories.append(Trajectory(run=run, task_id="nle", sample=sample, turns=turns,
                                           budget=100, success=sample % 3 == 0))
    store.ingest_trajectories(trajectories)
    timeline = task_timeline(store.con, "nle")
    assert choose_view(timeline.shared_share) == "timeline"
    figure = timeline_figure(timeline)
    _legend_inside(figure)
    assert layout_problems(figure) == []
    labels = [t.get_text() for t in figure.axes[0].get_yticklabels()]
    assert "balrog-llama #0" in labels and "balrog-qwen #0" in labels
    assert sum(t.get_text() == "budget (cap 100)" for t in figure.axes[0].texts) == 32
    figure.savefig(tmp_path / "nle.png")
    store.close()
