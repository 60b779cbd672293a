"""Turn graphs, task state graphs and Monte Carlo turn values (DESIGN 4)."""

from __future__ import annotations

import json
import re
from collections import defaultdict

import networkx as nx
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from recovery.graph import state_graph, turn_graph, turn_values, write_graph
from recovery.schema import Trajectory, Turn
from recovery.store import open_store as connect_store
from tests.conftest import simulated_store

# --------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def sim_con():
    """Two simulator policies on shared tasks (common random numbers: many shared states)."""
    from recovery.simulate import PRESETS, SimConfig

    store = simulated_store(SimConfig(
        policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
        n_tasks=8, n_samples=10, budgets=[20], seed=11,
    ))
    yield store.con
    store.close()


def _mask(text: str) -> str:
    """The default normalisation, written independently of the SQL one."""
    return re.sub(r"\b\w*\d\w*\b", "#", text or "", flags=re.ASCII)


def _raw(con) -> pd.DataFrame:
    return con.execute(
        "SELECT u.traj_id, u.t, u.action, u.observation, tr.task_id, tr.run, tr.success "
        "FROM turns u JOIN trajectories tr USING (traj_id) ORDER BY u.traj_id, u.t"
    ).df()


def _brute_force(raw: pd.DataFrame, by_run: bool = False):
    """Per turn: (n, value) of its state and of its (state, action), by explicit prefixes."""
    histories: dict[str, list[str]] = defaultdict(list)
    keys = []
    for row in raw.itertuples():
        owner = (row.task_id, row.run) if by_run else (row.task_id,)
        state = (*owner, tuple(histories[row.traj_id]))
        keys.append((row.traj_id, row.t, state, _mask(row.action)))
        histories[row.traj_id].append(_mask(row.observation))
    outcome = dict(zip(raw["traj_id"], raw["success"], strict=False))
    owners = raw.drop_duplicates("traj_id").set_index("traj_id")
    at_state: dict[tuple, set] = defaultdict(set)
    at_action: dict[tuple, set] = defaultdict(set)
    for traj_id, _, state, action in keys:
        at_state[state].add(traj_id)
        at_action[(state, action)].add(traj_id)
    for traj_id, history in histories.items():  # where each sample ended
        row = owners.loc[traj_id]
        owner = (row.task_id, row.run) if by_run else (row.task_id,)
        at_state[(*owner, tuple(history))].add(traj_id)

    def stats(trajs: set) -> tuple[int, float]:
        known = [outcome[x] for x in trajs if outcome[x] is not None]
        return len(known), (float(np.mean(known)) if known else float("nan"))

    per_turn = {}
    for traj_id, t, state, action in keys:
        per_turn[(traj_id, t)] = (stats(at_state[state]), stats(at_action[(state, action)]), state)
    return per_turn, at_state, at_action, histories, outcome


# --------------------------------------------------------------------------------------------
# turn_values


def test_turn_values_equal_a_brute_force_count(sim_con):
    values = turn_values(sim_con)
    assert list(values.columns) == [
        "traj_id", "t", "state_id", "n_state", "state_value", "n_action", "action_value",
    ]
    per_turn, *_ = _brute_force(_raw(sim_con))
    assert len(values) == len(per_turn)
    for row in values.itertuples():
        (n_s, v_s), (n_a, v_a), _ = per_turn[(row.traj_id, row.t)]
        assert (row.n_state, row.n_action) == (n_s, n_a)
        assert row.state_value == pytest.approx(v_s)
        assert row.action_value == pytest.approx(v_a)
    # Same state, same id; different states, different ids.
    pairs = {(per_turn[(r.traj_id, r.t)][2], r.state_id) for r in values.itertuples()}
    assert len({s for s, _ in pairs}) == len({i for _, i in pairs}) == len(pairs)


def test_turn_values_by_run_count_only_the_runs_own_samples(sim_con):
    values = turn_values(sim_con, by_run=True)
    per_turn, *_ = _brute_force(_raw(sim_con), by_run=True)
    for row in values.itertuples():
        (n_s, v_s), (n_a, v_a), _ = per_turn[(row.traj_id, row.t)]
        assert (row.n_state, row.n_action) == (n_s, n_a)
        assert row.state_value == pytest.approx(v_s)
        assert row.action_value == pytest.approx(v_a)
    pooled = turn_values(sim_con)
    assert (pooled["n_state"].to_numpy() >= values["n_state"].to_numpy()).all()
    assert (pooled["n_state"] > values["n_state"]).any()


def test_turn_values_for_some_trajectories_use_every_sample_of_their_tasks(sim_con):
    everything = turn_values(sim_con)
    some = everything["traj_id"].drop_duplicates().iloc[[0, 7, 30]].tolist()
    subset = turn_values(sim_con, traj_ids=some)
    assert set(subset["traj_id"]) == set(some)
    expected = everything[everything["traj_id"].isin(some)].reset_index(drop=True)
    pd.testing.assert_frame_equal(subset.reset_index(drop=True), expected)


def test_normalisation_presets_and_functions(sim_con):
    masked = turn_values(sim_con)
    exact = turn_values(sim_con, normalise="exact")
    assert exact["state_id"].nunique() >= masked["state_id"].nunique()
    same_as_mask = turn_values(sim_con, normalise=lambda s: s.map(_mask))
    # Equal partitions of turns into states (ids differ: hashed differently).
    left = masked.groupby("state_id")["t"].transform("size")
    right = same_as_mask.groupby("state_id")["t"].transform("size")
    assert (left.to_numpy() == right.to_numpy()).all()
    assert (masked["n_state"].to_numpy() == same_as_mask["n_state"].to_numpy()).all()
    with pytest.raises(ValueError, match="unknown normalisation"):
        turn_values(sim_con, normalise="fuzzy")


def test_mask_keeps_words_and_merges_numbers_and_ids(con, memory_store):
    turns_a = [Turn(action="get(id=HAT229)", observation="Flight HAT229 has 3 seats left")]
    turns_b = [Turn(action="get(id=HAT300)", observation="Flight HAT300 has 7 seats left")]
    turns_c = [Turn(action="get(id=HAT229)", observation="Flight HAT229 is full")]
    memory_store.ingest_trajectories([
        Trajectory(run="r", task_id="k", turns=[*turns_a, Turn(action="x", observation="")],
                   success=True, sample=0),
        Trajectory(run="r", task_id="k", turns=[*turns_b, Turn(action="x", observation="")],
                   success=False, sample=1),
        Trajectory(run="r", task_id="k", turns=[*turns_c, Turn(action="x", observation="")],
                   success=False, sample=2),
    ])
    values = turn_values(con).sort_values(["traj_id", "t"])
    second = values[values["t"] == 2].set_index("traj_id")
    ids = con.execute("SELECT sample, traj_id FROM trajectories ORDER BY sample").fetchall()
    a, b, c = (second.loc[traj_id] for _, traj_id in ids)
    assert a["state_id"] == b["state_id"] != c["state_id"]
    assert (a["n_state"], a["state_value"]) == (2, 0.5)
    assert (c["n_state"], c["state_value"]) == (1, 0.0)
    first = values[values["t"] == 1]
    assert first["state_id"].nunique() == 1 and (first["n_state"] == 3).all()
    assert (first["n_action"] == 3).all()  # the action ids are masked too


def test_unknown_outcomes_are_not_counted(con, memory_store):
    trajs = [
        Trajectory(run="r", task_id="k", turns=[Turn(action="a", observation="o")],
                   success=s, sample=i)
        for i, s in enumerate([True, None, False, True])
    ]
    memory_store.ingest_trajectories(trajs)
    values = turn_values(con)
    assert (values["n_state"] == 3).all()
    assert values["state_value"].iloc[0] == pytest.approx(2 / 3)


# --------------------------------------------------------------------------------------------
# State graph


def test_state_graph_merges_shared_states_and_its_values_are_monte_carlo(sim_con):
    task = "task0003"
    graph = state_graph(sim_con, task, excerpt=100_000)
    raw = _raw(sim_con)
    raw = raw[raw["task_id"] == task]
    per_turn, at_state, at_action, _, outcome = _brute_force(raw)
    samples = raw["traj_id"].nunique()
    run_of = dict(zip(raw["traj_id"], raw["run"], strict=False))
    root = graph.nodes[graph.graph["root"]]
    # Every sample of both runs starts at the root.
    assert root["type"] == "state" and root["depth"] == 0
    assert root["n"] == samples == 20
    assert root["n:base"] == root["n:rl"] == 10
    # Samples merge beyond the root: fewer depth-1 states than samples reaching depth 1.
    depth1 = [n for n, d in graph.nodes(data=True) if d["type"] == "state" and d["depth"] == 1]
    assert 1 < len(depth1) < samples
    assert sum(graph.nodes[n]["n"] for n in depth1) == samples
    # Every state node equals the brute-force count over raw prefixes, including leaves.
    values = turn_values(sim_con)
    node_of = {
        (r.traj_id, r.t): f"s{int(r.state_id) & ((1 << 64) - 1):016x}"
        for r in values.itertuples()
    }
    checked = set()
    for (traj_id, t), ((n_s, v_s), _, state) in per_turn.items():
        node = graph.nodes[node_of[(traj_id, t)]]
        trajs = at_state[state]
        assert node["n"] == n_s == len(trajs)
        assert node["value"] == pytest.approx(v_s)
        for run in ("base", "rl"):
            assert node[f"n:{run}"] == sum(run_of[x] == run for x in trajs)
        # Out-edges: one action node per distinct normalised action, with its counts.
        expected = {}
        for (s, action), group in at_action.items():
            if s == state:
                won = [outcome[x] for x in group]
                expected[action] = (len(group), float(np.mean(won)))
        got = {}
        for _, action_node, data in graph.out_edges(node_of[(traj_id, t)], data=True):
            assert data["kind"] == "action"
            got[data["action"]] = (data["n"], data["value"])
            assert graph.nodes[action_node]["type"] == "action"
        assert got.keys() == expected.keys()
        for action, (n, v) in expected.items():
            assert got[action][0] == n and got[action][1] == pytest.approx(v)
        checked.add(node_of[(traj_id, t)])
    # Leaves: the states after each sample's last turn; together they hold every sample once.
    ends = sum(d["n_end"] for _, d in graph.nodes(data=True) if d["type"] == "state")
    assert ends == samples
    # A state node is one distinct observation history: as many as brute force found, plus
    # the end states not otherwise reached.
    state_nodes = [n for n, d in graph.nodes(data=True) if d["type"] == "state"]
    assert len(state_nodes) == len(at_state)
    assert checked <= set(state_nodes)
    # Action -> state edges split each action's samples by what came back.
    for node, data in graph.nodes(data=True):
        if data["type"] == "action":
            out = [d["n"] for *_, d in graph.out_edges(node, data=True)]
            assert sum(out) == data["n"]


def test_state_graph_of_some_runs_and_errors(sim_con):
    graph = state_graph(sim_con, "task0003", runs=["rl"])
    assert graph.nodes[graph.graph["root"]]["n"] == 10
    assert "n:base" not in graph.nodes[graph.graph["root"]]
    with pytest.raises(KeyError):
        state_graph(sim_con, "no-such-task")


# --------------------------------------------------------------------------------------------
# Turn graph


@pytest.fixture
def marked_con(con, memory_store):
    turns = [
        Turn(action="a1", observation="ok 1"),
        Turn(action="a2", observation="Error: bad id", label=-1.0),
        Turn(action="a3", observation="Error: bad id again"),
        Turn(action="a4", observation="ok 4", label=1.0),
        Turn(action="a5", observation="Invalid action: nope"),
        Turn(action="a6", observation="ok 6"),
        Turn(action="a7", observation="Traceback (most recent call last):\n boom"),
    ]
    memory_store.ingest_trajectories([Trajectory(run="r", task_id="k", turns=turns, success=False)])
    traj_id = con.execute("SELECT traj_id FROM trajectories").fetchall()[0][0]
    con.executemany("INSERT INTO step_scores VALUES (?, ?, ?, ?)",
                    [(traj_id, t, "prm-a", t / 10) for t in range(1, 8)])
    return con, traj_id


def test_turn_graph_nodes_next_and_recovers_edges(marked_con):
    con, traj_id = marked_con
    graph = turn_graph(con, traj_id)
    assert graph.graph["traj_id"] == traj_id and graph.graph["success"] is False
    assert sorted(graph.nodes) == list(range(1, 8))
    nexts = sorted((u, v) for u, v, d in graph.edges(data=True) if d["next"])
    assert nexts == [(t, t + 1) for t in range(1, 7)]
    recovers = {(u, v): d for u, v, d in graph.edges(data=True) if d["recovers"]}
    assert set(recovers) == {(2, 4), (5, 6)}
    assert recovers[(2, 4)]["latency"] == 2 and recovers[(2, 4)]["error_kind"] == "labelled"
    assert recovers[(5, 6)]["kind"] == "recovers" and recovers[(5, 6)]["next"] is True
    assert graph.edges[2, 4]["next"] is False
    node = graph.nodes[2]
    assert node["is_error"] and node["error_kind"] == "labelled" and node["label"] == -1.0
    assert graph.nodes[4]["recovery_of"] == 2 and graph.nodes[6]["recovery_of"] == 5
    assert graph.nodes[7]["error_kind"] == "tool_error"
    assert graph.nodes[1]["error_kind"] == "" and "label" not in graph.nodes[1]
    assert graph.nodes[3]["score"] == pytest.approx(0.3)
    assert graph.nodes[3]["score:prm-a"] == pytest.approx(0.3)
    with pytest.raises(KeyError):
        turn_graph(con, "nope")


def test_write_graph_formats(marked_con, sim_con, tmp_path):
    con, traj_id = marked_con
    graphs = {"turn": turn_graph(con, traj_id), "state": state_graph(sim_con, "task0001")}
    for name, graph in graphs.items():
        write_graph(graph, str(tmp_path / f"{name}.graphml"))
        back = nx.read_graphml(tmp_path / f"{name}.graphml")
        assert back.number_of_nodes() == graph.number_of_nodes()
        assert back.number_of_edges() == graph.number_of_edges()
        write_graph(graph, str(tmp_path / f"{name}.json"))
        data = json.loads((tmp_path / f"{name}.json").read_text())
        assert len(data["nodes"]) == graph.number_of_nodes()
        assert len(data["edges"]) == graph.number_of_edges()
        write_graph(graph, str(tmp_path / f"{name}.png"))
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="unknown graph file type"):
        write_graph(graphs["turn"], str(tmp_path / "x.dot"))


def test_cli_graph(marked_con, tmp_path):
    from agent_recovery_cli.recovery import main

    con, traj_id = marked_con
    store = tmp_path / "s.duckdb"
    con.execute(f"ATTACH '{store}' AS disk")
    for table in ("trajectories", "turns", "error_spells", "step_scores"):
        con.execute(f"CREATE TABLE disk.{table} AS SELECT * FROM {table}")
    con.execute("DETACH disk")
    connect_store(store).close()  # tables copied by hand: a first open makes it a store
    runner = CliRunner()
    out = tmp_path / "g.graphml"
    result = runner.invoke(main, ["graph", traj_id, "--store", str(store), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert nx.read_graphml(out).number_of_nodes() == 7
    out = tmp_path / "task.json"
    result = runner.invoke(main, ["graph", "--task", "k", "--store", str(store), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["graph"]["task_id"] == "k"
    result = runner.invoke(main, ["graph", traj_id, "--task", "k", "--store", str(store),
                                  "--out", str(out)])
    assert result.exit_code == 2 and "either a TRAJ_ID or --task" in result.output
    result = runner.invoke(main, ["graph", "missing", "--store", str(store), "--out", str(out)])
    assert result.exit_code == 1 and "missing" in result.output


# --------------------------------------------------------------------------------------------
# Drawings a person can read


def _texts(figure) -> list[str]:
    return [t.get_text() for ax in figure.axes for t in ax.texts] + [
        t.get_text() for t in figure.texts]


def test_turn_graph_boxes_name_the_action_and_the_error_kind(marked_con):
    from recovery.graph.canvas import shorten
    from recovery.graph.draw import graph_figure
    from recovery.graph.turn_drawing import turn_label

    con, traj_id = marked_con
    graph = turn_graph(con, traj_id)
    figure = graph_figure(graph)
    texts = _texts(figure)
    for t, data in graph.nodes(data=True):
        label = turn_label(data)
        assert label in texts
        assert label.splitlines()[0] == f"t{t}"
        assert shorten(data["action"], 30) in label or "(empty action)" in label
        if data["is_error"]:
            assert f"error: {data['error_kind']}" in label
    assert "recovers the spell of t2" in turn_label(graph.nodes[4])
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert "error turn (kind named)" in legend and "clean turn" in legend
    assert shorten("a  very\nlong action text", 10) == "a very lo…"


def test_state_graph_drawing_is_page_sized_labelled_and_has_a_legend(sim_con, tmp_path):
    from PIL import Image

    from recovery.graph.draw import graph_figure
    from recovery.graph.state_drawing import PAGE_INCHES, state_label
    from recovery.graph.state_selection import select_states

    graph = state_graph(sim_con, "task0001")
    n_states = sum(d["type"] == "state" for _, d in graph.nodes(data=True))
    assert n_states > 100                       # hundreds of states: too many to draw
    selection = select_states(graph, 60)
    assert selection.n_states == n_states and selection.n_shown <= 60
    assert "both runs reached" in selection.reason
    drawn = [n for n in selection.nodes if graph.nodes[n]["type"] == "state"]
    assert all(graph.nodes[n]["n:base"] > 0 and graph.nodes[n]["n:rl"] > 0 for n in drawn)
    # Every state left out is counted in exactly one summary box.
    assert sum(k for k, _, _ in selection.summaries.values()) == n_states - len(drawn)
    figure = graph_figure(graph)
    texts = _texts(figure)
    assert f"{selection.n_shown} of {n_states} states" in figure._suptitle.get_text()
    assert state_label(graph.nodes[graph.graph["root"]]) in texts
    assert any(t.startswith("+") and "states" in t for t in texts)
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert any(t.startswith("state:") for t in legend) and any(
        t.startswith("action") for t in legend)
    path = tmp_path / "state.png"
    write_graph(graph, str(path))
    with Image.open(path) as image:
        assert image.width <= PAGE_INCHES[0] * 120 and image.height <= PAGE_INCHES[1] * 120
    small = select_states(graph, 10_000)
    assert small.nodes == set(graph) and small.reason == ""


def test_cli_graph_suggests_close_task_ids(tmp_path):
    """The README's `recovery graph --task airline/17` on a store whose task ids are plain
    numbers (as tau-bench's are) names the close matches, and `--task 17` works."""
    from agent_recovery_cli.recovery import main

    store = tmp_path / "s.duckdb"
    con = connect_store(store)
    con.ingest_trajectories([
        Trajectory(run="gpt-4o", task_id=str(i), sample=s, success=bool(s),
                   turns=[Turn("look", "a room"), Turn(f"take {s}", "ok")])
        for i in (7, 17, 23) for s in range(2)
    ])
    con.close()
    runner = CliRunner()
    out = tmp_path / "task.png"
    result = runner.invoke(main, ["graph", "--task", "airline/17", "--store", str(store),
                                  "--out", str(out)])
    assert result.exit_code == 1
    assert "task 'airline/17' is not in the store; did you mean 17" in result.output
    assert "(task ids: 17, 23, 7)" in result.output
    result = runner.invoke(main, ["graph", "--task", "17", "--store", str(store), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = runner.invoke(main, ["graph", "--task", "17", "--run", "gpt4o", "--store",
                                  str(store), "-o", str(out)])
    assert result.exit_code == 1 and "run 'gpt4o' is not in the store" in result.output
    result = runner.invoke(main, ["graph", "17", "--store", str(store), "-o", str(out)])
    assert result.exit_code == 1 and "use --task 17" in result.output
