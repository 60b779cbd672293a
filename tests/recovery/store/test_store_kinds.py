"""One Store API, two kinds: ingest, marking, PRM scores and the frames give the same rows in a
DuckDB file and in a folder store, and every write goes through the store object."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from recovery.errors import InputProblem
from recovery.marking import rules_from_toml
from recovery.simulate import PRESETS, SimConfig, write_runs
from recovery.store import DuckDBStore, FolderStore, Store, open_store

KINDS = ("duckdb", "folder")


@pytest.fixture(scope="module")
def sim_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("kinds-sim")
    config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]}, n_tasks=12,
                       n_samples=3, budgets=[4, 8], seed=5)
    return sorted(write_runs(config, out))


def _location(kind: str, tmp_path: Path) -> str:
    return str(tmp_path / "runs.duckdb") if kind == "duckdb" else f"{tmp_path}/runs/"


def _rows(store: Store, query: str) -> list[tuple]:
    return sorted(store.con.execute(query).fetchall(), key=repr)


TURNS = ("SELECT tr.run, tr.task_id, tr.sample, t.t, t.error_kind, t.is_error, t.recovery_of "
         "FROM turns t JOIN trajectories tr USING (traj_id)")
SPELLS = ("SELECT tr.run, tr.task_id, tr.sample, s.start_t, s.end_t, s.kind, s.recovered, "
          "s.fatal FROM error_spells s JOIN trajectories tr USING (traj_id)")


def _written(kind: str, tmp_path: Path, sim_files: list[Path]) -> dict[str, object]:
    """Every write of the Store API on one kind, and what the store then holds."""
    from prm.score import write_step_scores

    tmp_path.mkdir(parents=True, exist_ok=True)
    store = open_store(_location(kind, tmp_path))
    assert isinstance(store, DuckDBStore if kind == "duckdb" else FolderStore)
    assert store.kind == kind
    with store:
        results = store.ingest_files(sim_files)
        assert [r.status for r in results] == ["ingested", "ingested"]
        assert [r.status for r in store.ingest_files(sim_files[:1])] == ["skipped"]
        out: dict[str, object] = {"runs": store.runs_of(results), "ingest_marks": _rows(
            store, TURNS)}
        rules = rules_from_toml({"rule": [{"name": "an a", "kind": "custom", "field": "observation",
                                           "pattern": "a"}]}, "custom.toml")
        rl = store.trajectories_of_runs(["rl"])
        out["rule_counts"] = store.mark(rules=rules, traj_ids=rl)
        out["rule_marks"], out["rule_spells"] = _rows(store, TURNS), _rows(store, SPELLS)
        first_turns = store.con.sql("SELECT traj_id, t FROM turns WHERE t <= 2 ORDER BY traj_id, t").df()
        first_turns["score"] = [0.1 if i % 3 == 0 else 0.9 for i in range(len(first_turns))]
        assert write_step_scores(store, first_turns, "judge") == len(first_turns)
        out["prm_counts"] = store.mark(prm_model="judge", prm_threshold=0.5)
        out["prm_marks"], out["prm_spells"] = _rows(store, TURNS), _rows(store, SPELLS)
        out["scores"] = _rows(store, "SELECT tr.task_id, tr.run, tr.sample, s.t, s.score FROM "
                                     "step_scores s JOIN trajectories tr USING (traj_id)")
        from analyses.frames import spells_frame, trajectories_frame, turn_flags_frame

        traj = trajectories_frame(store.con)
        out["frames"] = (
            traj.drop(columns=["traj_id"]).sort_values(["run", "task_id", "sample", "budget"])
            .reset_index(drop=True),
            len(turn_flags_frame(store.con)), len(spells_frame(store.con)),
        )
    return out


def test_every_write_gives_the_same_rows_in_both_kinds(
    tmp_path: Path, sim_files: list[Path]
) -> None:
    duckdb_side = _written("duckdb", tmp_path / "a", sim_files)
    folder_side = _written("folder", tmp_path / "b", sim_files)
    assert duckdb_side["rule_counts"].get("custom", 0) > 0  # the rule marked something
    assert duckdb_side["prm_counts"].get("prm", 0) > 0  # so did the PRM scores
    assert duckdb_side["rule_marks"] != duckdb_side["ingest_marks"]
    for key in ("runs", "ingest_marks", "rule_counts", "rule_marks", "rule_spells",
                "prm_counts", "prm_marks", "prm_spells", "scores"):
        assert duckdb_side[key] == folder_side[key], key
    a, b = duckdb_side["frames"], folder_side["frames"]
    pd.testing.assert_frame_equal(a[0], b[0], check_dtype=False)
    assert a[1:] == b[1:]


@pytest.mark.parametrize("kind", KINDS)
def test_a_read_only_store_refuses_every_write(
    kind: str, tmp_path: Path, sim_files: list[Path]
) -> None:
    location = _location(kind, tmp_path)
    with open_store(location) as store:
        store.ingest_file(sim_files[0])
    with open_store(location, read_only=True) as store:
        assert store.read_only
        writes = [
            lambda: store.ingest_file(sim_files[1]),
            lambda: store.mark(),
            lambda: store.replace_step_scores(
                pd.DataFrame({"traj_id": ["x"], "t": [1], "score": [0.5]}), "m"),
        ]
        for write in writes:
            with pytest.raises(InputProblem, match="read-only"):
                write()
        (n,) = store.con.execute("SELECT count(*) FROM step_scores").fetchone()
        assert n == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_store_is_one_clear_problem(kind: str, tmp_path: Path) -> None:
    location = _location(kind, tmp_path)
    for kwargs in ({"read_only": True}, {"must_exist": True}):
        with pytest.raises(InputProblem, match="does not exist"):
            open_store(location, **kwargs)
    assert not Path(location.rstrip("/")).exists()  # nothing was made


@pytest.mark.parametrize("kind", KINDS)
def test_recovery_mark_on_both_kinds(kind: str, tmp_path: Path, sim_files: list[Path]) -> None:
    from agent_recovery_cli.recovery.mark import MarkConfig, run_mark

    location = _location(kind, tmp_path)
    with open_store(location) as store:
        store.ingest_files(sim_files)
        before = _rows(store, SPELLS)
        store.con.execute("UPDATE turns SET is_error = false, error_kind = NULL") if (
            kind == "duckdb") else None
    lines: list[str] = []
    counts = run_mark(MarkConfig(store=Path(location), run=["base"]), echo=lines.append)
    assert counts and lines[0].startswith("marked 72 trajectories")
    with open_store(location, read_only=True) as store:
        assert _rows(store, SPELLS) == before  # re-marking restores what ingest marked


def test_a_store_is_read_like_its_connection(tmp_path: Path, sim_files: list[Path]) -> None:
    with open_store(None) as store:
        store.ingest_file(sim_files[0])
        assert store.con.execute("SELECT count(*) FROM trajectories").fetchall() == [(72,)]
        assert store.con.sql("SELECT count(*) FROM trajectories").fetchall() == [(72,)]
        assert "DuckDBStore :memory:" in repr(store)


def test_prm_score_writes_the_same_scores_to_both_kinds(
    tmp_path: Path, sim_files: list[Path]
) -> None:
    from click.testing import CliRunner

    from agent_recovery_cli.prm import main as prm_main

    locations = {kind: _location(kind, tmp_path / kind) for kind in KINDS}
    for kind, location in locations.items():
        (tmp_path / kind).mkdir()
        with open_store(location) as store:
            store.ingest_files(sim_files)
    model = tmp_path / "prm"
    trained = CliRunner().invoke(prm_main, [
        "train", "--store", locations["duckdb"], "--backbone", "structured", "--labels",
        "recovery", "--out", str(model)])
    assert trained.exit_code == 0, trained.output
    written = {}
    for kind, location in locations.items():
        scored = CliRunner().invoke(prm_main, ["score", "--store", location, "--model",
                                               str(model), "--name", "judge"])
        assert scored.exit_code == 0, scored.output
        with open_store(location, read_only=True) as store:
            written[kind] = _rows(store, "SELECT tr.run, tr.task_id, tr.sample, s.t, "
                                         "round(s.score, 12) FROM step_scores s "
                                         "JOIN trajectories tr USING (traj_id)")
    assert len(written["duckdb"]) > 0
    assert written["duckdb"] == written["folder"]
