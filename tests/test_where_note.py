"""--where that matches nothing because a column it names is NULL everywhere says so; the
README's --where example matches the data it sits beside."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb

from tests.analyses.report.test_crashes import tau_records
from tests.cli_support import run_cli

README = Path(__file__).resolve().parents[1] / "README.md"


def test_where_on_a_column_null_everywhere_says_so(tmp_path: Path) -> None:
    path = tmp_path / "t.json"                       # tau-bench: no budget in the data
    path.write_text(json.dumps(tau_records(4, set(), {0, 1})))
    result = run_cli("analyze", path, "--where", "task_id <> 'budget' AND budget = 100",
                     "--n-boot", "0")
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert "no trajectory of the runs meets the condition" in line
    assert line.endswith("budget is unknown (NULL) for every trajectory")
    plain = run_cli("analyze", path, "--where", "task_id = 'nope'", "--n-boot", "0")
    assert plain.exit_code == 2 and "unknown (NULL)" not in plain.output


def test_null_columns_note_names_only_columns_null_everywhere() -> None:
    from recovery.scope import null_columns_note

    con = duckdb.connect()
    con.execute("CREATE TABLE trajectories (run VARCHAR, task_id VARCHAR, budget INTEGER, "
                "reward DOUBLE)")
    con.execute("INSERT INTO trajectories VALUES ('a', 't', NULL, NULL), ('b', 't', 5, NULL)")
    where = "budget = 3 AND reward > 0 AND task_id = 'budget'"
    assert null_columns_note(con, where, ["a"]) == (
        "; budget and reward are unknown (NULL) for every trajectory")
    assert null_columns_note(con, where, None) == (
        "; reward is unknown (NULL) for every trajectory")
    assert null_columns_note(con, "task_id = 'reward'", None) == ""   # only in a string


def test_the_readme_where_example_names_no_budget_beside_balrog_data() -> None:
    text = README.read_text(encoding="utf-8")
    (line,) = [x for x in text.splitlines() if "--where" in x and x.startswith("recovery")]
    # the store beside it holds a BALROG folder, whose episodes have no budget
    assert "balrog" in text and not re.search(r"\bbudget\b", line.split("--where")[1])
