"""What `recovery analyze` (and graph, mark) show a person is safe, and runs that share no task.

Run labels, task ids and error kinds come from input files. An escape sequence in one of them
must reach the terminal, the HTML page and the plots escaped (``\\x1b[2J``), never as the
bytes that clear a screen, retitle a window or plant a link; a ``$`` pair must not be parsed as
matplotlib mathtext. The JSON report keeps the exact text.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agent_recovery_cli.recovery import main

# Clear screen, an OSC 8 link, a window title, a bare CR, a one-byte CSI, a bidi override and
# a label that matplotlib would read as mathtext with an unknown macro.
EVIL_RUN = ("ev\x1b[2J\x1b]8;;http://x\x1b\\L\x1b]0;T\x07\r\x9b\u202e"
            "$\\undefinedmacro$")
EVIL_TASK = "t\x1b[2J\x1b]0;w\x07\u202e"
EVIL_KIND = "k\x1b]0;T\x07ind"
SHOWN_KIND = "k\\x1b]0;T\\x07ind"
SHOWN_RUN = "ev\\x1b[2J\\x1b]8;;http://x\\x1b\\L\\x1b]0;T\\x07\\r\\x9b\\u202e$\\undefinedmacro$"
SHOWN_TASK = "t\\x1b[2J\\x1b]0;w\\x07\\u202e"

RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Any raw control character a terminal or browser could act on (tab and newline allowed)."""


def invoke(*args: object) -> Result:
    """``recovery ARGS...`` on a wide terminal (so no escaped text is folded across lines)."""
    result = CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "400"})
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    assert "Traceback" not in result.output
    return result


def trajectory(run: str, task: str, sample: int, success: bool, error: bool) -> dict:
    turns = [{"action": "look", "observation": "a room"}]
    if error:
        turns.append({"action": "open", "observation": "Error: locked", "error": EVIL_KIND})
    turns.append({"action": "go", "observation": "done"})
    return {"run": run, "task_id": task, "sample": sample, "success": success, "turns": turns}


def write_run(path: Path, run: str, tasks: list[str], offset: int = 0) -> Path:
    rows = [trajectory(run, task, s, (i + s + offset) % 2 == 0, error=s == 0)
            for i, task in enumerate(tasks) for s in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An evil-labelled run, a run on the same tasks, and a run on other tasks."""
    root = tmp_path_factory.mktemp("evil")
    tasks = [f"{EVIL_TASK}{i}" for i in range(4)]
    return {
        "evil": write_run(root / "evil.jsonl", EVIL_RUN, tasks),
        "base": write_run(root / "base.jsonl", "base", tasks, offset=1),
        "a": write_run(root / "a.jsonl", "a", [f"a{i}" for i in range(4)]),
        "b": write_run(root / "b.jsonl", "b", [f"b{i}" for i in range(4)], offset=1),
    }


def assert_no_raw_control(text: str, where: str) -> None:
    found = sorted({f"\\x{ord(c):02x}" if ord(c) <= 0xFF else f"\\u{ord(c):04x}"
                    for c in RAW.findall(text)})
    assert not found, f"raw control characters {found} in {where}"


# --------------------------------------------------------------------------------------------
# recovery analyze: terminal, HTML, JSON, plots


def test_analyze_shows_escape_sequences_escaped_in_terminal_and_html(runs, tmp_path):
    page, out = tmp_path / "r.html", tmp_path / "r.json"
    result = invoke("analyze", runs["evil"], runs["base"], "--n-boot", 5, "--html", page,
                    "--json", out)
    assert result.exit_code == 0, result.output
    assert_no_raw_control(result.stdout, "stdout")
    assert_no_raw_control(result.stderr, "stderr")
    # The label is shown escaped: in the list of runs, its own heading and the comparison.
    assert f"runs: base, {SHOWN_RUN}; baseline: base" in result.stdout
    assert f"{SHOWN_RUN} vs base" in result.stdout
    assert SHOWN_KIND in result.stdout          # the error kind, in the stats table

    html = page.read_text(encoding="utf-8")
    assert_no_raw_control(html, "the HTML report")
    assert f'<td class="label fullname">{SHOWN_RUN}</td>' in html  # long: in the run key
    assert SHOWN_KIND in html

    data = json.loads(out.read_text(encoding="utf-8"))
    assert EVIL_RUN in data["runs"]                  # JSON keeps the exact label
    assert {data["comparisons"][0]["candidate"], data["comparisons"][0]["baseline"]} == {
        EVIL_RUN, "base"}


def test_rich_markup_in_a_label_is_shown_as_text(tmp_path):
    """A label holding rich markup (``[/]`` closes nothing and would raise) prints as is."""
    tasks = [f"t{i}" for i in range(3)]
    first = write_run(tmp_path / "x.jsonl", "x[/][bold]y", tasks)
    second = write_run(tmp_path / "z.jsonl", "z", tasks, offset=1)
    result = invoke("analyze", first, second, "--n-boot", 0)
    assert result.exit_code == 0, result.output
    assert "x[/][bold]y vs z" in result.stdout or "z vs x[/][bold]y" in result.stdout


def _shown_texts(figure) -> list[str]:
    """What each text artist of a figure displays (mathtext escapes undone)."""
    from matplotlib.text import Text

    shown = []
    for artist in figure.findobj(Text):
        text, is_math = artist._preprocess_math(artist.get_text())
        # matplotlib's own log-scale ticks are mathtext; a text from the input never is.
        assert not is_math or text.startswith("$\\mathdefault{"), (
            f"text parsed as mathtext: {artist.get_text()!r}")
        shown.append(text)
    return shown


def test_a_dollar_label_renders_as_literal_text_in_every_plot(runs):
    from analyses.report import (
        budget_plots,
        decomposition_plots,
        hazard_plots,
        heatmap_plots,
        plots,
    )
    from analyses.report.analyze import AnalyzeConfig, analyze

    report = analyze(AnalyzeConfig(files=[runs["evil"], runs["base"]], n_boot=0))
    run = report.runs[EVIL_RUN]
    comparison = report.comparisons[0]
    figures = {
        "heatmap": heatmap_plots.pass_heatmap(run, report.ks, report.ts),
        "difference": heatmap_plots.difference_heatmap(comparison, report.ks, report.ts),
        "budget curves": budget_plots.budget_curves(report),
        "decomposition": decomposition_plots.decomposition_bars(comparison),
        "hazards": hazard_plots.hazard_figure(report),
        "latency": hazard_plots.latency_figure(report),
    }
    for name, figure in figures.items():
        plots.figure_png(figure)                     # draws: no mathtext error
        texts = "".join(_shown_texts(figure))
        assert_no_raw_control(texts, f"the {name} plot")
        # Long titles are wrapped (at any character of a long word): compare without breaks.
        assert "$\\undefinedmacro$" in "".join(texts.split()), name


@pytest.mark.parametrize("chars", range(12, 40))
def test_wrapping_a_title_never_unescapes_a_dollar(chars):
    from matplotlib.text import Text

    from analyses.report.legend_fit import wrap_label
    from recovery.display import plain_label

    label = plain_label(f"Pass@(K,T): {EVIL_RUN} - $x$ $y$")
    wrapped = "\n".join(wrap_label(label, chars))
    shown, is_math = Text()._preprocess_math(wrapped)
    assert not is_math
    assert "".join(shown.split()) == "".join(label.replace("\\$", "$").split())


# --------------------------------------------------------------------------------------------
# Two runs that share no task


def test_runs_with_no_task_in_common_skip_the_comparison_with_a_note(runs, tmp_path):
    page, out = tmp_path / "r.html", tmp_path / "r.json"
    result = invoke("analyze", runs["a"], runs["b"], "--baseline", "a", "--n-boot", 5,
                    "--html", page, "--json", out)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "runs a and b share no task: no comparison" in text
    # Each run's own numbers are still there.
    assert "Pass@(K,T)" in text and "errors and recoveries" in text
    assert "change of S(T)" not in text and "Pass@(K,T) difference" not in text

    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data["runs"]) == {"a", "b"}
    assert "runs a and b share no task: no comparison" in data["notes"]
    html = page.read_text(encoding="utf-8")
    assert "runs a and b share no task: no comparison" in html


def test_pass_difference_of_runs_with_no_task_in_common(runs):
    import warnings

    from analyses.frames import trajectories_frame
    from analyses.report.surface import DifferenceOptions, pass_difference
    from recovery.store import IngestOptions, open_store

    store = open_store(None)
    try:
        store.ingest_files([runs["a"], runs["b"]], IngestOptions())
        traj = trajectories_frame(store.con)
    finally:
        store.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cells = pass_difference(traj, "a", "b", [1, 2], [2, None], DifferenceOptions(n_boot=5))
    assert [(c.k, c.t, c.n_tasks) for c in cells] == [(1, 2, 0), (1, None, 0), (2, 2, 0),
                                                      (2, None, 0)]
    assert all(c.value != c.value for c in cells)   # NaN: no task to average
    assert [str(w.message) for w in caught] == ["runs a and b share no task: no comparison"]


# --------------------------------------------------------------------------------------------
# recovery graph and recovery mark


@pytest.fixture(scope="module")
def store(runs, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "s.duckdb"
    result = invoke("ingest", runs["evil"], "--store", path)
    assert result.exit_code == 0, result.output
    return path


def test_graph_unknown_task_lists_close_matches_escaped(store, tmp_path):
    result = invoke("graph", "--task", f"{EVIL_TASK}9", "--store", store, "--out",
                    tmp_path / "g.png")
    assert result.exit_code == 1, result.output
    assert_no_raw_control(result.output, "the graph message")
    assert f"did you mean {SHOWN_TASK}" in result.output


def test_graph_draws_an_evil_task_with_its_label_escaped(store, tmp_path):
    out = tmp_path / "g.png"
    result = invoke("graph", "--task", f"{EVIL_TASK}0", "--store", store, "--out", out)
    assert result.exit_code == 0, result.output
    assert_no_raw_control(result.output, "the graph summary")
    assert f"state graph of task {SHOWN_TASK}0" in result.output
    assert out.stat().st_size > 0


def test_graph_figures_show_labels_as_literal_text(store):
    from recovery.graph import state_graph, turn_graph
    from recovery.graph.draw import graph_figure
    from recovery.store import open_store

    opened = open_store(store, read_only=True)
    try:
        (traj_id,) = opened.con.execute("SELECT traj_id FROM trajectories WHERE sample = 0 "
                                 "ORDER BY task_id LIMIT 1").fetchone()
        graphs = {"turn": turn_graph(opened.con, traj_id), "state": state_graph(opened.con, f"{EVIL_TASK}0")}
    finally:
        opened.close()
    for name, graph in graphs.items():
        figure = graph_figure(graph)
        texts = " ".join(" ".join(_shown_texts(figure)).split())
        assert_no_raw_control(texts, f"the {name} graph")
        assert SHOWN_TASK in texts, name


def test_mark_prints_error_kinds_escaped(store):
    result = invoke("mark", "--store", store)
    assert result.exit_code == 0, result.output
    assert_no_raw_control(result.output, "mark's summary")
    assert SHOWN_KIND in result.output
