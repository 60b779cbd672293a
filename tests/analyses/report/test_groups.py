"""`recovery analyze` on runs of several environments: distinct run names for inputs whose
default names collide, groups (``--by``), ``--runs``, ``--where``, and tables that are never
cut when the output is piped."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import run_cli

ENVS = ("babaisai", "crafter", "textworld")
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "formats" / "balrog"


def write_run(path: Path, *, seed: int, n_tasks: int = 4, n_samples: int = 3,
              envs: tuple[str, ...] = ENVS, run: str | None = None, plain_tasks: int = 0,
              budget: int = 20) -> Path:
    """A canonical JSONL run: ``n_tasks`` tasks per environment (``env/level-i``), plus
    ``plain_tasks`` task ids without ``/``; every trajectory has some error turns."""
    rng = random.Random(seed)
    tasks = [f"{env}/level-{i}" for env in envs for i in range(n_tasks)]
    tasks += [f"plain-{i}" for i in range(plain_tasks)]
    lines = []
    for task in tasks:
        for sample in range(n_samples):
            n_turns = rng.randint(2, 8)
            success = rng.random() < 0.5
            turns = []
            for t in range(n_turns):
                turn: dict[str, Any] = {"action": f"move {t}", "observation": f"obs {t} {task}"}
                if rng.random() < 0.3 and t < n_turns - 1:
                    turn["error"] = "invalid_action"
                turns.append(turn)
            record: dict[str, Any] = {"task_id": task, "sample": sample, "budget": budget,
                                      "success": success, "turns": turns,
                                      "meta": {"level": task.split("-")[-1][-1]}}
            if run is not None:
                record["run"] = run
            lines.append(json.dumps(record))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def analyze(*args: object):
    return run_cli("analyze", *args)


# ------------------------------------------------------------------------------------------
# 1. Distinct default run names


def test_two_files_of_the_same_name_get_their_folders_in_the_run_name(tmp_path: Path) -> None:
    a = write_run(tmp_path / "A" / "babaisai.jsonl", seed=1)
    b = write_run(tmp_path / "B" / "babaisai.jsonl", seed=2)
    out = tmp_path / "r.json"
    result = analyze(a, b, "--n-boot", 0, "--json", out, "--quiet")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert sorted(data["runs"]) == ["A/babaisai", "B/babaisai"]
    assert data["comparisons"][0]["candidate"] == "B/babaisai"
    # the output says which names were given
    text = " ".join(result.output.split())
    assert "A/babaisai" in text and "run name" in text


def test_a_run_the_data_names_itself_keeps_its_name(tmp_path: Path) -> None:
    a = write_run(tmp_path / "A" / "babaisai.jsonl", seed=1, run="gpt")
    b = write_run(tmp_path / "B" / "babaisai.jsonl", seed=2)
    out = tmp_path / "r.json"
    result = analyze(a, b, "--n-boot", 0, "--json", out, "--quiet")
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(out.read_text())["runs"]) == ["B/babaisai", "gpt"]


def test_names_that_still_collide_are_refused_naming_the_run_flag(tmp_path: Path) -> None:
    a = write_run(tmp_path / "x" / "A" / "babaisai.jsonl", seed=1)
    b = write_run(tmp_path / "y" / "A" / "babaisai.jsonl", seed=2)
    result = analyze(a, b, "--n-boot", 0, "--quiet")
    assert result.exit_code == 2, result.output
    assert "--run" in result.output and "A/babaisai" in result.output


def test_ingest_gives_the_same_distinct_names(tmp_path: Path) -> None:
    a = write_run(tmp_path / "A" / "babaisai.jsonl", seed=1)
    b = write_run(tmp_path / "B" / "babaisai.jsonl", seed=2)
    store = tmp_path / "s.duckdb"
    result = run_cli("ingest", a, b, "--store", store)
    assert result.exit_code == 0, result.output
    out = tmp_path / "r.json"
    assert analyze("--store", store, "--n-boot", 0, "--json", out, "--quiet").exit_code == 0
    assert sorted(json.loads(out.read_text())["runs"]) == ["A/babaisai", "B/babaisai"]


def _balrog_folder(root: Path) -> Path:
    """A copy of the BALROG fixture as ``root/babaisai/``."""
    target = root / "babaisai"
    shutil.copytree(FIXTURES, target)
    return target


def test_two_balrog_folders_of_the_same_name(tmp_path: Path) -> None:
    a = _balrog_folder(tmp_path / "A")
    b = _balrog_folder(tmp_path / "B")
    (b / "textworld" / "treasure_hunter" / "treasure_hunter_run_00.json").write_text(
        (a / "textworld" / "treasure_hunter" / "treasure_hunter_run_00.json").read_text()
        .replace('"progression": 0.0', '"progression": 1.0'))
    out = tmp_path / "r.json"
    result = analyze(a, b, "--n-boot", 0, "--json", out, "--quiet")
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(out.read_text())["runs"]) == ["A/babaisai", "B/babaisai"]


# ------------------------------------------------------------------------------------------
# 2. Groups


@pytest.fixture(scope="module")
def envs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("envs")
    return [write_run(root / "base.jsonl", seed=3, plain_tasks=2),
            write_run(root / "rl.jsonl", seed=4, plain_tasks=2)]


def test_by_env_gives_one_report_per_group_and_a_summary(envs: list[Path], tmp_path: Path):
    out = tmp_path / "r.json"
    result = analyze(*envs, "--by", "env", "--n-boot", 0, "--json", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    values = [g["value"] for g in data["groups"]]
    assert values == [*ENVS, "(none)"]
    assert all(g["key"] == "env" for g in data["groups"])
    for group in data["groups"]:
        report = group["report"]
        assert sorted(report["runs"]) == ["base", "rl"]
        n_tasks = 2 if group["value"] == "(none)" else 4
        assert report["runs"]["base"]["n_tasks"] == n_tasks
        assert report["runs"]["base"]["n_trajectories"] == 3 * n_tasks
        assert report["comparisons"][0]["headline"].startswith("rl vs base")
        # too few tasks: the report says so
        assert any("fewer than 10" in note for note in report["notes"])
    summary = {row["value"]: row for row in data["group_summary"]}
    assert list(summary) == values
    assert summary["crafter"]["n_tasks"] == 4
    assert summary["crafter"]["n_trajectories"] == {"base": 12, "rl": 12}
    crafter = data["groups"][1]["report"]
    s_base = next(c["value"] for c in crafter["runs"]["base"]["pass_at_kt"]
                  if c["k"] == 1 and c["t"] is None)
    assert summary["crafter"]["s_no_limit"]["base"] == pytest.approx(s_base)
    assert summary["crafter"]["headline"] == [crafter["comparisons"][0]["headline"]]
    # terminal: the summary first, then each group's section
    text = result.stdout
    assert text.index("groups by env") < text.index("env = babaisai") < text.index(
        "env = crafter")


def test_by_env_in_html(envs: list[Path], tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    result = analyze(*envs, "--by", "env", "--where", "task_id NOT LIKE 'babaisai/%' AND "
                     "task_id NOT LIKE 'textworld/%'", "--n-boot", 0, "--html", page, "--quiet")
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert html.count('<section class="group"') == 2
    assert 'id="group-crafter"' in html and 'id="group-none"' in html
    assert 'id="group-babaisai"' not in html
    assert html.index('id="group-summary"') < html.index('id="group-crafter"')
    assert 'id="group-crafter-headline"' in html and 'id="group-none-run-rl"' in html
    assert html.count('id="headline"') == 0


def test_by_meta_key_and_by_column(envs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = analyze(*envs, "--by", "meta.level", "--n-boot", 0, "--json", out, "--quiet")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert [g["value"] for g in data["groups"]] == ["0", "1", "2", "3"]
    assert data["groups"][0]["key"] == "meta.level"
    result = analyze(*envs, "--by", "run", "--n-boot", 0, "--json", out, "--quiet")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert [g["value"] for g in data["groups"]] == ["base", "rl"]
    only = data["groups"][0]["report"]
    assert list(only["runs"]) == ["base"] and only["comparisons"] == []
    assert any("one run" in note for note in only["notes"])
    assert data["group_summary"][0]["n_trajectories"] == {"base": 42}


def test_by_an_unknown_field_is_refused(envs: list[Path]) -> None:
    result = analyze(*envs, "--by", "colour", "--n-boot", 0, "--quiet")
    assert result.exit_code == 2, result.output
    assert "colour" in result.output and "task_id" in result.output


# ------------------------------------------------------------------------------------------
# 3. --runs and --where


def test_runs_selects_runs_and_refuses_unknown_ones(tmp_path: Path) -> None:
    files = [write_run(tmp_path / f"{name}.jsonl", seed=i)
             for i, name in enumerate(("a", "b", "c"))]
    out = tmp_path / "r.json"
    result = analyze(*files, "--runs", "a,c", "--n-boot", 0, "--json", out, "--quiet")
    assert result.exit_code == 0, result.output
    assert sorted(json.loads(out.read_text())["runs"]) == ["a", "c"]
    result = analyze(*files, "--runs", "a,zz", "--n-boot", 0, "--quiet")
    assert result.exit_code == 2
    assert "zz" in result.output and "a, b, c" in result.output


def test_where_filters_every_number(envs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = analyze(*envs, "--where", "task_id LIKE 'babaisai/%' AND budget = 20",
                     "--n-boot", 0, "--json", out, "--quiet")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["runs"]["base"]["n_tasks"] == 4
    assert data["runs"]["base"]["n_trajectories"] == 12
    assert data["data_quality"]["base"]["n_trajectories"] == 12
    assert data["comparisons"][0]["by_t"][-1]["n_tasks"] == 4


@pytest.mark.parametrize("condition", [
    "1 = 1); DROP TABLE turns; SELECT (1",
    "true; COPY trajectories TO 'x.csv'",
    "task_id IN (SELECT content FROM read_text('/etc/hostname'))",
    "no_such_column = 3",
    "",
])
def test_a_bad_where_is_refused_in_one_line(envs: list[Path], condition: str) -> None:
    result = analyze(*envs, "--where", condition, "--n-boot", 0, "--quiet")
    assert result.exit_code == 2, result.output
    assert "No such option" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith("Error: --where: "), result.output


# ------------------------------------------------------------------------------------------
# 4. Piped tables are not cut


def test_piped_tables_keep_every_column(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base.jsonl", seed=5, n_samples=4)
    rl = write_run(tmp_path / "rl.jsonl", seed=6, n_samples=4)
    ts = ",".join(str(t) for t in range(1, 9))
    result = analyze(base, rl, "--t", ts, "--n-boot", 0)
    assert result.exit_code == 0, result.output
    header = next(line for line in result.stdout.splitlines()
                  if line.lstrip().startswith("K") and "T=1" in line)
    assert "T=8" in header and "no limit" in header
    assert "…" not in result.stdout
