"""`recovery analyze --series KEY`: checkpoints of one training, in step order, each compared
with the first exactly as `recovery analyze` compares the pair."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agent_recovery_cli.recovery import main
from recovery.simulate import PRESETS, SimConfig, write_runs
from recovery.simulate.params import PolicyParams

TS = ("--t", "4,8,15")
FAST = ("--n-boot", "15", "--strata", "1", "--seed", "3")
"""Small bootstraps: the test is of the wiring (equality), not of the intervals' quality."""


def run(*args: object) -> Result:
    result = CliRunner().invoke(main, ["analyze", *(str(a) for a in args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output, result.exception)
    return result


def _between(weight: float) -> PolicyParams:
    """A policy ``weight`` of the way from the ``base`` preset to ``rl`` (a checkpoint)."""
    base, rl = PRESETS["base"], PRESETS["rl"]
    return dataclasses.replace(base, **{
        f.name: (1 - weight) * getattr(base, f.name) + weight * getattr(rl, f.name)
        for f in dataclasses.fields(base) if isinstance(getattr(base, f.name), float)})


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Runs ckpt-100, ckpt-200, ckpt-300: 20 tasks x 3 samples at budget 15."""
    config = SimConfig(policies={f"ckpt-{s}": _between(w) for s, w in
                                 ((100, 0.0), (200, 0.5), (300, 1.0))},
                       n_tasks=20, n_samples=3, budgets=[15], seed=7)
    return write_runs(config, tmp_path_factory.mktemp("ckpt"))


def _rewrite(paths: list[Path], out: Path, names: dict[str, str],
             steps: dict[str, object]) -> list[Path]:
    """The files with each record's run renamed and ``meta.step`` set (per old run name;
    a list of steps is dealt out over the records in turn)."""
    out.mkdir(exist_ok=True)
    written = []
    for path in paths:
        lines = path.read_text().splitlines()
        records = [json.loads(line) for line in lines]
        for i, record in enumerate(records):
            old = record["run"]
            step = steps[old]
            record["run"] = names[old]
            record.setdefault("meta", {})["step"] = step[i % len(step)] if isinstance(
                step, list) else step
        target = out / f"{names[path.stem]}.jsonl"
        target.write_text("".join(json.dumps(r) + "\n" for r in records))
        written.append(target)
    return written


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def series_json(checkpoints, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("series") / "s.json"
    result = run(*checkpoints, "--series", "run", *TS, *FAST, "--json", out)
    assert result.exit_code == 0, result.output
    return _json(out)


def test_json_holds_one_entry_per_checkpoint_in_step_order(series_json):
    series = series_json["series"]
    assert [(p["run"], p["step"], p["key"]) for p in series] == [
        ("ckpt-100", 100, "run"), ("ckpt-200", 200, "run"), ("ckpt-300", 300, "run")]
    assert series_json["baseline"] == "ckpt-100"
    assert series[0]["components"] == []
    for point in series:
        assert [c["t"] for c in point["pass_at_1"]] == [4, 8, 15, None]
        assert all(c["k"] == 1 and c["lo"] <= c["value"] <= c["hi"] for c in point["pass_at_1"])
    for point in series[1:]:
        assert [r["t"] for r in point["components"]] == [4, 8, 15, None]
        for row in point["components"]:
            assert math.isclose(row["single_step"] + row["recovery"], row["model_delta"])


def test_components_equal_analyze_of_each_checkpoint_pair(checkpoints, series_json, tmp_path):
    series = series_json["series"]
    first = series[0]["run"]
    for point in series[1:]:
        out = tmp_path / f"{point['run']}.json"
        result = run(*checkpoints, "--baseline", first, "--runs", f"{first},{point['run']}",
                     *TS, *FAST, "--json", out, "--quiet")
        assert result.exit_code == 0, result.output
        pair = _json(out)
        (comparison,) = pair["comparisons"]
        assert comparison["candidate"] == point["run"]
        assert point["components"] == comparison["by_t"]
        cells = [c for c in pair["runs"][point["run"]]["pass_at_kt"] if c["k"] == 1]
        assert point["pass_at_1"] == cells


def test_meta_step_orders_runs_whatever_their_names(checkpoints, tmp_path):
    names = {"ckpt-100": "zeta", "ckpt-200": "alpha", "ckpt-300": "mid"}
    steps = {"ckpt-100": 1000, "ckpt-200": 2000.0, "ckpt-300": 3000}
    files = _rewrite(checkpoints, tmp_path / "meta", names, steps)
    out = tmp_path / "m.json"
    result = run(*files, "--series", "meta.step", *TS, *FAST, "--json", out)
    assert result.exit_code == 0, result.output
    series = _json(out)["series"]
    assert [(p["run"], p["step"]) for p in series] == [
        ("zeta", 1000), ("alpha", 2000), ("mid", 3000)]
    assert _json(out)["baseline"] == "zeta"


def test_terminal_table_and_html_figure(checkpoints, tmp_path):
    page = tmp_path / "s.html"
    result = run(*checkpoints, "--series", "run", *TS, *FAST, "--html", page)
    assert result.exit_code == 0, result.output
    assert "Checkpoints by run" in result.output
    rows = [line.split() for line in result.output.splitlines()
            if line.strip().startswith("ckpt-")]
    assert [r[:2] for r in rows[-3:]] == [["ckpt-100", "100"], ["ckpt-200", "200"],
                                          ["ckpt-300", "300"]]
    text = page.read_text()
    section = text[text.index('id="series"'):]
    assert "data:image/png;base64," in section.split("</section>")[0]
    assert section.index("ckpt-100") < section.index("ckpt-200") < section.index("ckpt-300")


def test_a_report_without_series_has_no_series_key(checkpoints, tmp_path):
    out = tmp_path / "plain.json"
    assert run(*checkpoints[:2], *TS, *FAST, "--json", out, "--quiet").exit_code == 0
    assert "series" not in _json(out)


def _refused(result: Result, start: str) -> None:
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: {start}"), result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("names, says", [
    ({"ckpt-100": "base", "ckpt-200": "rl-2", "ckpt-300": "rl-3"}, "has no number"),
    ({"ckpt-100": "a-100", "ckpt-200": "b-100", "ckpt-300": "c-300"}, "the same step"),
])
def test_run_names_that_give_no_order_are_refused_in_one_line(checkpoints, tmp_path,
                                                              names, says):
    files = _rewrite(checkpoints, tmp_path / "bad", names, dict.fromkeys(names, 1))
    result = run(*files, "--series", "run", *TS, *FAST)
    _refused(result, "--series run: ")
    assert says in result.output


@pytest.mark.parametrize("steps, says", [
    ({"ckpt-100": [100, 150], "ckpt-200": 200, "ckpt-300": 300}, "several values"),
    ({"ckpt-100": "early", "ckpt-200": 200, "ckpt-300": 300}, "not a number"),
    ({"ckpt-100": 100, "ckpt-200": 100, "ckpt-300": 300}, "the same step"),
])
def test_meta_steps_that_give_no_order_are_refused_in_one_line(checkpoints, tmp_path,
                                                               steps, says):
    names = {n: n for n in steps}
    files = _rewrite(checkpoints, tmp_path / "badmeta", names, steps)
    result = run(*files, "--series", "meta.step", *TS, *FAST)
    _refused(result, "--series meta.step: ")
    assert says in result.output


def test_a_missing_meta_field_and_a_bad_key_are_refused(checkpoints):
    _refused(run(*checkpoints, "--series", "meta.step", *TS, *FAST), "--series meta.step: ")
    _refused(run(*checkpoints, "--series", "budget", *TS, *FAST), "--series: ")


def test_series_with_by_or_another_baseline_is_refused(checkpoints):
    _refused(run(*checkpoints, "--series", "run", "--by", "env", *FAST), "--series and --by")
    _refused(run(*checkpoints, "--series", "run", "--baseline", "ckpt-200", *FAST),
             "--series compares")
