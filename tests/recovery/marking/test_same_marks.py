"""Marks depend on what a turn says, never on the file it came from."""

from __future__ import annotations

import json
from pathlib import Path

from recovery.store import IngestOptions, open_store

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "formats"


def marks(con) -> dict[tuple[str, int, int], str | None]:
    return {(task, sample, t): kind for task, sample, t, kind in con.execute(
        "SELECT tr.task_id, tr.sample, u.t, u.error_kind FROM turns u "
        "JOIN trajectories tr USING (traj_id)").fetchall()}


def _episodes(con) -> list[tuple]:
    """Each stored episode: task, sample, success, its actions and its observations."""
    return con.execute(
        "SELECT tr.task_id, tr.sample, tr.success, list(u.action ORDER BY u.t), "
        "list(u.observation ORDER BY u.t) FROM trajectories tr JOIN turns u USING (traj_id) "
        "GROUP BY ALL").fetchall()


def as_canonical(con, path: Path) -> Path:
    """The stored episodes written out as canonical JSONL: the same turns, another format."""
    rows = _episodes(con)
    with path.open("w") as out:
        for task, sample, success, actions, observations in rows:
            out.write(json.dumps({
                "run": "canonical", "task_id": task, "sample": sample, "success": success,
                "turns": [{"action": a, "observation": o}
                          for a, o in zip(actions, observations, strict=True)]}) + "\n")
    return path


def as_chat(con, path: Path) -> Path:
    """The same episodes as OpenAI chat messages, the observation a user message."""
    rows = _episodes(con)
    with path.open("w") as out:
        for task, sample, success, actions, observations in rows:
            messages = [{"role": "user", "content": "start"}]
            for a, o in zip(actions, observations, strict=True):
                messages += [{"role": "assistant", "content": a},
                             {"role": "user", "content": o}]
            out.write(json.dumps({"task_id": task, "sample": sample, "success": success,
                                  "messages": messages}) + "\n")
    return path


def test_balrog_folder_and_canonical_jsonl_get_the_same_marks(tmp_path: Path) -> None:
    folder = open_store(None)
    folder.ingest_file(FIXTURES / "balrog")
    from_folder = marks(folder.con)
    assert "invalid_action" in from_folder.values()  # the environment's notice is marked
    canonical = open_store(None)
    canonical.ingest_file(as_canonical(folder.con, tmp_path / "same.jsonl"))
    assert marks(canonical.con) == from_folder


def test_the_invalid_action_notice_is_marked_in_a_chat_transcript(tmp_path: Path) -> None:
    folder = open_store(None)
    folder.ingest_file(FIXTURES / "balrog")
    chat = open_store(None)
    chat.ingest_file(as_chat(folder.con, tmp_path / "chat.jsonl"), IngestOptions(format="openai"))
    got = marks(chat.con)
    want = marks(folder.con)
    notices = {key for key, kind in want.items() if kind == "invalid_action"}
    assert notices and {key for key, kind in got.items() if kind == "invalid_action"} == notices
