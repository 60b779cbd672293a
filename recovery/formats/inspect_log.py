"""Inspect AI eval logs, ``.json`` and ``.eval`` (DESIGN 11).

One sample is one trajectory; the sample's ``epoch`` (1-based in Inspect) minus one is the sample
index; a turn is one assistant message. Success comes from the sample's score: the first scorer
by default, counted as success when its value is one of ``ReadOptions.inspect_success``
(``C``, ``1``, ``1.0``, ``True``...) or a number at or above the success threshold.

``.eval`` files are zip archives; since Inspect 0.3.2xx their entries are compressed with zstd
(zip method 93), which Python's ``zipfile`` cannot open before 3.14, so those entries are read
from the archive directly and decompressed with ``zstandard``.
"""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from recovery.formats import Reader, ReadOptions, ReadResult, first_json_char, stem
from recovery.formats._chat import split_turns
from recovery.schema import RecordError, Trajectory, coerce_task_id

ZIP_METHOD_ZSTD = 93
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")


def sniff(path: Path, head: bytes) -> bool:
    """A zip with a ``header.json`` entry, or a JSON object with ``eval`` and ``samples``."""
    if head.startswith(b"PK\x03\x04"):
        return path.suffix == ".eval" or b"header.json" in head or b"samples/" in head
    return first_json_char(head) == "{" and b'"eval"' in head and b'"version"' in head


def _read_entry(archive: zipfile.ZipFile, fh: Any, info: zipfile.ZipInfo) -> bytes:
    if info.compress_type != ZIP_METHOD_ZSTD:
        return archive.read(info)
    import zstandard

    fh.seek(info.header_offset)
    fields = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
    if fields[0] != b"PK\x03\x04":
        raise RecordError(f"entry {info.filename}: bad zip local header")
    name_len, extra_len = fields[-2], fields[-1]
    fh.seek(info.header_offset + _LOCAL_HEADER.size + name_len + extra_len)
    data = fh.read(info.compress_size)
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=info.file_size or 0)


def _eval_entries(path: Path) -> tuple[dict[str, Any], Iterator[tuple[str, Any]]]:
    fh = open(path, "rb")  # noqa: SIM115 - closed by the generator below
    try:
        archive = zipfile.ZipFile(fh)
        header = json.loads(_read_entry(archive, fh, archive.getinfo("header.json")))
    except KeyError:
        fh.close()
        raise RecordError("not an Inspect .eval archive: no header.json entry") from None
    except (zipfile.BadZipFile, json.JSONDecodeError) as err:
        fh.close()
        raise RecordError(f"not a readable Inspect .eval archive: {err}") from None

    def samples() -> Iterator[tuple[str, Any]]:
        try:
            names = sorted(
                (i for i in archive.infolist() if i.filename.startswith("samples/")),
                key=lambda i: i.filename,
            )
            for info in names:
                try:
                    yield info.filename, json.loads(_read_entry(archive, fh, info))
                except json.JSONDecodeError as err:
                    yield info.filename, RecordError(f"malformed JSON: {err.msg}")
        finally:
            fh.close()

    return header, samples()


def score_success(scores: Any, options: ReadOptions, scorer: str | None = None) -> bool | None:
    """Success from a sample's ``scores``: the named scorer, or the first one."""
    if not isinstance(scores, dict) or not scores:
        return None
    score = scores.get(scorer) if scorer else next(iter(scores.values()))
    value = score.get("value") if isinstance(score, dict) else score
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value >= options.success_threshold
    if isinstance(value, str):
        return value in options.inspect_success
    return None


def sample_trajectory(
    sample: dict[str, Any],
    eval_spec: dict[str, Any],
    options: ReadOptions,
    default_run: str,
    file: str,
    line: int,
) -> Trajectory:
    """One Inspect sample as a trajectory."""
    if not isinstance(sample, dict):
        raise RecordError(f"expected a sample object, got {type(sample).__name__}")
    if "messages" not in sample:
        raise RecordError("sample has no 'messages'")
    prompt, turns = split_turns(sample["messages"])
    task = eval_spec.get("task")
    sample_id = coerce_task_id(sample.get("id", line), "id")
    epoch = sample.get("epoch")
    meta: dict[str, Any] = {
        "inspect_task": task,
        "inspect_id": sample.get("id"),
        "epoch": epoch,
        "scores": sample.get("scores"),
    }
    for key in ("error", "limit", "metadata", "target"):
        if sample.get(key):
            meta[key] = sample[key]
    reward = None
    scores = sample.get("scores")
    if isinstance(scores, dict) and scores:
        first = next(iter(scores.values()))
        value = first.get("value") if isinstance(first, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            reward = float(value)
    return Trajectory(
        run=options.run or eval_spec.get("model") or default_run,
        task_id=f"{task}/{sample_id}" if task else sample_id,
        turns=turns,
        success=score_success(scores, options),
        sample=(epoch - 1) if isinstance(epoch, int) and epoch >= 1 else None,
        reward=reward,
        prompt=prompt,
        meta=meta,
        source_file=file,
        source_line=line,
    )


def read(path: Path, options: ReadOptions) -> ReadResult:
    """Read an Inspect log; ``line`` is the sample's position in the log (1-based)."""
    default_run = stem(path)
    file = str(path)
    try:
        if path.suffix == ".eval" or zipfile.is_zipfile(path):
            header, samples = _eval_entries(path)
        else:
            with open(path, encoding="utf-8") as fh:
                log = json.load(fh)
            header = log
            samples = ((f"samples[{i}]", s) for i, s in enumerate(log.get("samples") or []))
    except json.JSONDecodeError as err:
        yield RecordError(f"malformed JSON: {err.msg}", file=file, line=err.lineno)
        return
    except RecordError as err:
        yield err.located(file, 1)
        return
    eval_spec = header.get("eval") or {}
    for position, (entry, sample) in enumerate(samples, start=1):
        if isinstance(sample, RecordError):
            yield RecordError(f"{entry}: {sample.message}", file=file, line=position)
            continue
        try:
            yield sample_trajectory(sample, eval_spec, options, default_run, file, position)
        except RecordError as err:
            yield RecordError(f"{entry}: {err.message}", file=file, line=position)


READER = Reader(
    name="inspect",
    description="Inspect AI eval logs (.eval zip archives or .json)",
    sniff=sniff,
    read=read,
)
