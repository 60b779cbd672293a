"""BALROG episode folders: a submission folder as BALROG's evaluator writes it.

BALROG (``Evaluator.run_episode`` in ``balrog/evaluator.py``) writes, per episode,
``<env>/<task>/<task>_run_NN.csv`` (columns ``Step, Action, Reasoning, Observation, Reward,
Done``; written with ``escapechar="˘"``) and, when the episode ends,
``<env>/<task>/<task>_run_NN.json`` (``task``, ``episode_return``, ``num_steps``, ``done``,
``progression``, token counts, ``action_frequency``, ``seed``, ``agent``, ``client``...). The
folder also holds ``summary.json``, ``<env>/<env>_summary.json`` and images; those are not
episodes. A directory is one input: ``recovery analyze runs/balrog-gpt4o/``.

- One CSV row is one turn: ``Action`` is the model's output, ``Observation`` what the
  environment showed next; ``Reasoning`` and ``Step`` go to the turn's meta, ``Reward`` is the
  turn's reward, ``Done`` marks the turn that ended the episode.
- When the model's output is not a valid action the environment takes a default action and
  BALROG prepends "Your previous output did not contain a valid action. Defaulted to action:
  ..." to that same row's observation; the built-in rules mark such a turn ``invalid_action``.
- ``task_id`` = ``<env>/<task>``; ``sample`` = the episode number ``NN``; ``run`` = ``--run``,
  else the folder's name; ``reward`` = ``episode_return``; success = ``progression`` >= 1.
- End reason: a success is ``success``; an episode whose summary lacks ``done`` ran out of
  BALROG's step limit (``max_steps_per_episode``): ``budget``; one that ended (``done``) without
  full progression: ``failure``; an episode with no summary yet: unknown.
- Trajectories name the folder as their source (``source_line`` = the episode's position in
  it) and ``meta.episode_file`` names the CSV; bad records name the file and line inside.
- Only what lies inside the folder is read: an episode file (CSV or summary) must be a regular
  file (``lstat``: not a symbolic link, even one that points inside, not a named pipe or a
  device) whose resolved path is inside the folder's; any other is refused with its own name
  (and never opened, so a named pipe cannot block). Linked folders are not entered.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recovery.fields import coerce_optional_float, coerce_optional_int
from recovery.formats._common import expect_dict, guard, type_name
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import entry_problem, excerpt, open_entry, read_entry_document
from recovery.formats.jsontext import parse_json
from recovery.schema import RecordError, Trajectory, Turn

ESCAPECHAR = "˘"
"""The escape character BALROG's evaluator writes its CSV files with."""
HEADER = ("Step", "Action", "Reasoning", "Observation", "Reward", "Done")
REQUIRED_COLUMNS = ("Action", "Observation")
_EPISODE = re.compile(r"^(?P<task>.+)_run_(?P<index>\d+)\.(?P<ext>csv|json)$")
MAX_DEPTH = 12
"""How many folders deep episode files are looked for. A task name with slashes nests
twice (``babyai/BabyAI-MixedTrainLocal-v0/goto/BabyAI-MixedTrainLocal-v0/goto_run_00.csv``)."""
SUMMARY_KEYS = frozenset({"progression", "episode_return"})
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0", ""})


def _episode_files(folder: Path, ext: str) -> Iterator[Path]:
    """Entries named ``..._run_NN.<ext>`` below ``folder``, at most :data:`MAX_DEPTH` folders
    deep: whatever they are (links and named pipes too: the reader refuses those by name).
    Linked folders are not entered."""
    for root, dirs, files in os.walk(folder):
        depth = len(Path(root).relative_to(folder).parts)
        if depth >= MAX_DEPTH:
            dirs.clear()
        dirs.sort()
        for name in sorted(files):
            match = _EPISODE.match(name)
            if match and match.group("ext") == ext:
                yield Path(root) / name


def sniff(path: Path, head: bytes) -> bool:
    """A folder with an episode file ``..._run_NN.csv`` whose header is BALROG's."""
    if not path.is_dir():
        return False
    for candidate in _episode_files(path, "csv"):
        if entry_problem(path, candidate) is not None:
            continue  # a link or a named pipe: not opened (the reader refuses it by name)
        try:
            with open_entry(path, candidate) as fh:
                first = fh.readline(4096).decode("utf-8", errors="replace")
        except (RecordError, OSError):
            continue
        return first.removeprefix("\ufeff").strip().startswith("Step,Action")
    return False


@contextmanager
def _field_limit(limit: int) -> Iterator[None]:
    """Let the csv module read fields up to ``limit`` characters, for this read only."""
    previous = csv.field_size_limit()
    csv.field_size_limit(min(max(limit, previous), sys.maxsize))
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def read_steps(
    path: Path, max_record_bytes: int, folder: Path | None = None
) -> list[tuple[int, dict[str, str]]]:
    """The rows of an episode CSV with the line each ends on.

    Args:
        path: The CSV.
        max_record_bytes: The longest field read.
        folder: The folder input it belongs to (default: the CSV's own folder); the CSV must
            be a regular file inside it (see :func:`recovery.formats.files.open_entry`).

    Raises:
        RecordError: naming the CSV and the line (a refused entry, missing columns, bad
            bytes, bad quoting).
    """
    file = str(path)
    rows: list[tuple[int, dict[str, str]]] = []
    raw = open_entry(path.parent if folder is None else folder, path)
    try:
        with io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as fh, \
                _field_limit(max_record_bytes):
            reader = csv.DictReader(fh, escapechar=ESCAPECHAR)
            columns = reader.fieldnames or []
            for column in REQUIRED_COLUMNS:
                if column not in columns:
                    raise RecordError(
                        f"column '{column}' is missing (the header has: "
                        f"{excerpt(', '.join(columns))})",
                        file=file, line=1,
                    )
            for row in reader:
                if None in row:
                    raise RecordError(f"{len(row[None])} more fields than the header names",
                                      file=file, line=reader.line_num)
                rows.append((reader.line_num, row))
    except UnicodeDecodeError as err:
        raise RecordError(f"not valid UTF-8 text (byte {err.start + 1})", file=file,
                          line=1) from None
    except csv.Error as err:
        raise RecordError(f"malformed CSV: {excerpt(err)}", file=file,
                          line=getattr(reader, "line_num", 1) or 1) from None
    except OSError as err:
        raise RecordError(f"cannot read the file: {err}", file=file, line=1) from None
    finally:
        raw.close()
    return rows


def _cell_float(value: str | None, column: str) -> float | None:
    if value is None or not value.strip():
        return None
    try:
        number = float(value)
    except ValueError:
        raise RecordError(
            f"column '{column}': expected a number, got '{excerpt(value)}'") from None
    if not math.isfinite(number):
        raise RecordError(f"column '{column}': expected a finite number, got '{excerpt(value)}'")
    return number


def _cell_bool(value: str | None, column: str) -> bool:
    text = (value or "").strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise RecordError(f"column '{column}': expected True or False, got '{excerpt(value)}'")


def steps_to_turns(rows: list[tuple[int, dict[str, str]]], file: str) -> list[Turn]:
    """One turn per CSV row."""
    turns = []
    for line, row in rows:
        try:
            meta: dict[str, Any] = {}
            step = row.get("Step")
            if step not in (None, ""):
                meta["step"] = int(step) if step.isdigit() and len(step) < 10 else step
            if row.get("Reasoning"):
                meta["reasoning"] = row["Reasoning"]
            for column, value in row.items():
                if column not in HEADER and value not in (None, ""):
                    meta[column] = value
            turns.append(Turn(
                action=row.get("Action") or "",
                observation=row.get("Observation") or "",
                reward=_cell_float(row.get("Reward"), "Reward"),
                done=_cell_bool(row.get("Done"), "Done"),
                meta=meta,
            ))
        except RecordError as err:
            raise err.located(file, line) from None
    return turns


def _summary(folder: Path, path: Path, options: ReadOptions) -> dict[str, Any] | None:
    """The episode's JSON summary; ``None`` when there is none (the episode had not ended)."""
    if not os.path.lexists(path):
        return None
    try:
        text = read_entry_document(folder, path, options.max_record_bytes)
        return expect_dict(parse_json(text, str(path)), "episode")
    except RecordError as err:
        raise err.located(str(path), 1) from None


def episode_trajectory(
    folder: Path, csv_path: Path, position: int, options: ReadOptions
) -> Trajectory:
    """One episode (its CSV and, when written, its JSON summary) as a trajectory."""
    match = _EPISODE.match(csv_path.name)
    assert match is not None  # the caller only passes episode files
    json_path = csv_path.with_suffix(".json")
    turns = steps_to_turns(read_steps(csv_path, options.max_record_bytes, folder),
                           str(csv_path))
    summary = _summary(folder, json_path, options)
    relative = csv_path.relative_to(folder)
    success = reward = reason = None
    meta: dict[str, Any] = {"episode_file": relative.as_posix()}
    if summary is not None:
        where = f"{json_path.name}: "
        try:
            progression = coerce_optional_float(summary.get("progression"), "progression")
            reward = coerce_optional_float(summary.get("episode_return"), "episode_return")
            done = summary.get("done")
            if done is not None and not isinstance(done, bool):
                raise RecordError(f"field 'done': expected boolean, got {type_name(done)}")
        except RecordError as err:
            raise RecordError(where + err.message, file=str(json_path), line=1) from None
        success = None if progression is None else progression >= 1.0
        if not success and progression is not None:
            reason = None if done else "budget"
        meta.update(summary)
        listed = summary.get("task")
    else:
        meta["summary"] = None  # the episode had not ended when the folder was written
        listed = None
    env, task = task_of(folder, relative, listed if isinstance(listed, str) else None)
    digits = match.group("index")  # the episode number; huge ones are out of range
    sample = coerce_optional_int(int(digits) if len(digits) <= 18 else 2**63,
                                 f"sample (the episode number of {csv_path.name})")
    return Trajectory(
        run=options.run or folder.resolve().name,
        task_id=f"{env}/{task}",
        turns=turns,
        success=success,
        sample=sample,
        reward=reward,
        end_reason=reason,
        meta=meta,
        source_file=str(folder),
        source_line=position,
    )


def task_of(folder: Path, relative: Path, listed: str | None) -> tuple[str, str]:
    """``(env, task)`` of an episode file at ``relative`` below ``folder``.

    BALROG writes ``<env>/<task>/<task>_run_NN.csv``, so a task of ``k`` slash-separated parts
    puts the file ``2k + 1`` parts deep; ``2k`` parts deep means the folder given is the
    environment's own. The summary's ``task`` wins when it fits; else ``k`` is read from
    the depth.
    """
    parts = relative.parts
    if len(parts) == 1:  # the task's own folder was given
        return folder.resolve().parent.name, listed or _EPISODE.match(parts[0]).group("task")
    k = listed.count("/") + 1 if listed else 0
    if listed and len(parts) in (2 * k, 2 * k + 1):
        offset = len(parts) - 2 * k
    else:
        k, offset, listed = len(parts) // 2, len(parts) % 2, None
    env = parts[0] if offset else folder.resolve().name
    return env, listed or "/".join(parts[offset:offset + k])


def episodes(folder: Path) -> list[Path]:
    """The episode CSV files below ``folder``, in a stable order."""
    return sorted(_episode_files(folder, "csv"), key=lambda p: p.relative_to(folder).as_posix())


def orphan_summaries(folder: Path) -> list[Path]:
    """Episode summaries (``..._run_NN.json``) without their steps file (an entry of any kind
    named as the steps file counts as one: it is reported by its own name)."""
    found = (p for p in _episode_files(folder, "json")
             if not os.path.lexists(p.with_suffix(".csv")))
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read a BALROG submission folder: one trajectory per episode."""
    if not path.is_dir():
        yield RecordError("a BALROG input is a folder of episodes, not a file", file=str(path),
                          line=1)
        return
    for position, csv_path in enumerate(episodes(path), start=1):
        yield guard(str(csv_path), 1,
                    lambda p=csv_path, n=position: episode_trajectory(path, p, n, options))
    for json_path in orphan_summaries(path):
        problem = entry_problem(path, json_path)
        message = f"the steps file {json_path.with_suffix('.csv').name} is missing"
        if problem is not None and not problem.startswith("cannot read"):
            message = f"{problem}; {message}"
        yield RecordError(message, file=str(json_path), line=1)


READER = Reader(
    name="balrog",
    description="BALROG submission folders: <env>/<task>/<task>_run_NN.csv and .json per episode",
    sniff=sniff,
    read=read,
    directory=True,
)
