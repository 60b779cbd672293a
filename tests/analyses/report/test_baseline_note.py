"""`recovery analyze --by env` says which run is the baseline and why."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_support import run_cli


def write_run(path: Path, run: str, wins: int) -> None:
    lines = []
    for env in ("alpha", "beta"):
        for task in range(3):
            for sample in range(2):
                success = (task + sample) % 3 < wins
                lines.append({"run": run, "task_id": f"{env}/t{task}", "sample": sample,
                              "success": success,
                              "turns": [{"action": "look", "observation": "ok"},
                                        {"action": "go", "observation": "done"}]})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_the_grouped_report_names_the_baseline_and_why(tmp_path: Path) -> None:
    write_run(tmp_path / "zeta.jsonl", "zeta", 2)
    write_run(tmp_path / "base.jsonl", "base", 1)
    out = tmp_path / "r.json"
    result = run_cli("analyze", tmp_path / "zeta.jsonl", tmp_path / "base.jsonl", "--by", "env",
                     "--n-boot", "0", "--json", out)
    assert result.exit_code == 0, result.output
    notes = json.loads(out.read_text())["notes"]
    assert "base is the baseline: the first run alphabetically (--baseline picks another)" \
        in notes
    assert "base is the baseline" in result.stdout
    chosen = run_cli("analyze", tmp_path / "zeta.jsonl", tmp_path / "base.jsonl", "--by",
                     "env", "--n-boot", "0", "--baseline", "zeta", "--json", out)
    assert chosen.exit_code == 0, chosen.output
    assert "zeta is the baseline (--baseline)" in json.loads(out.read_text())["notes"]
