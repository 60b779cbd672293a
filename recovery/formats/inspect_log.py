"""Inspect AI eval logs, ``.json`` and ``.eval``.

One sample is one trajectory; the sample's ``epoch`` (1-based in Inspect) minus one is the sample
index; a turn is one assistant message. Success comes from the sample's score: the first scorer
by default (``ReadOptions.inspect_scorer`` names another), counted as success when its value is
one of ``ReadOptions.inspect_success`` (``C``, ``1``, ``1.0``, ``True``...) or a number at or
above the success threshold. A sample with no score (e.g. one that stopped on an error) has an
unknown outcome.

``.eval`` files are zip archives; since Inspect 0.3.2xx their entries are compressed with zstd
(zip method 93), which Python's ``zipfile`` cannot open before 3.14, so those entries are read
from the archive directly and decompressed with ``zstandard``. An archive whose entries overlap
(several entries pointing at the same compressed bytes: a zip bomb) is refused before any
sample is read. A log still being written has no
``header.json`` yet; its eval spec is then read from ``_journal/start.json``. Long message texts
that Inspect moved to the sample's ``attachments`` (``attachment://<hash>``) are put back. An
``epoch`` past the store's integer range fails its sample, naming it.
"""

from __future__ import annotations

import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from recovery.fields import coerce_task_id
from recovery.formats._chat import split_turns
from recovery.formats.base import Reader, ReadOptions, ReadResult
from recovery.formats.files import READ_ERRORS, excerpt, first_json_char, read_document, stem
from recovery.formats.jsontext import parse_json
from recovery.schema import MAX_STORED_INT, RecordError, Trajectory

ZIP_METHOD_ZSTD = 93
ATTACHMENT_PROTOCOL = "attachment://"
HEADER_ENTRIES = ("header.json", "_journal/start.json")
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")


def sniff(path: Path, head: bytes) -> bool:
    """A zip with a ``header.json`` entry, or a JSON object with ``eval`` and ``version``."""
    if head.startswith(b"PK\x03\x04"):
        return path.suffix == ".eval" or b"header.json" in head or b"samples/" in head
    return first_json_char(head) == "{" and b'"eval"' in head and b'"version"' in head


def _read_entry(
    archive: zipfile.ZipFile, fh: IO[bytes], info: zipfile.ZipInfo, limit: int
) -> bytes:
    """The bytes of one archive entry, zstd (method 93) or any method ``zipfile`` knows.

    Decompression stops after ``limit`` bytes whatever the entry declares, so an entry that
    claims a small size and inflates to gigabytes (a zip bomb) is refused, not held in memory.

    Raises:
        RecordError: when the entry inflates past ``limit``.
    """
    if info.compress_type != ZIP_METHOD_ZSTD:
        with archive.open(info) as stream:
            data = stream.read(limit + 1)
    else:
        import zstandard

        fh.seek(info.header_offset)
        fields = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
        if fields[0] != b"PK\x03\x04":
            raise RecordError(f"entry {info.filename}: bad zip local header")
        name_len, extra_len = fields[-2], fields[-1]
        fh.seek(info.header_offset + _LOCAL_HEADER.size + name_len + extra_len)
        compressed = fh.read(info.compress_size)
        with zstandard.ZstdDecompressor().stream_reader(compressed) as stream:
            data = stream.read(limit + 1)
    if len(data) > limit:
        raise RecordError(
            f"{info.filename}: inflates to more than the limit of {limit} bytes (raise it with "
            "--max-record-mb)"
        )
    return data


def check_no_overlap(archive: zipfile.ZipFile) -> None:
    """Refuse an archive whose entries share bytes.

    Each entry takes at least its local header (:data:`_LOCAL_HEADER`, 30 bytes) and its
    compressed data from its offset on, and the entries lie before the central directory. A
    crafted archive lists many entries at the same offset, so that a few KB inflate once per
    entry (the "overlapping files" zip bomb); ``zipfile`` checks that only for the methods it
    decompresses itself, not for the zstd entries read here directly.

    Raises:
        RecordError: naming two entries that overlap.
    """
    infos = sorted(archive.infolist(), key=lambda i: i.header_offset)
    ends = [(i.header_offset + _LOCAL_HEADER.size + i.compress_size, i) for i in infos]
    for (end, info), following in zip(ends, [*infos[1:], None], strict=True):
        limit = archive.start_dir if following is None else following.header_offset
        if end > limit:
            other = "the central directory" if following is None else following.filename
            raise RecordError(
                f"not a readable Inspect .eval archive: its entries overlap ({excerpt(info.filename)} "
                f"runs into {excerpt(other)}), as in a zip bomb; refused"
            )


def _load_entry(
    archive: zipfile.ZipFile, fh: IO[bytes], info: zipfile.ZipInfo, limit: int
) -> Any:
    """An entry parsed as JSON; a damaged or oversized entry raises RecordError naming it."""
    import zstandard

    try:
        return parse_json(_read_entry(archive, fh, info, limit))
    except RecordError as err:
        message = err.message
        raise RecordError(
            message if message.startswith(info.filename) else f"{info.filename}: {message}"
        ) from None
    except (zstandard.ZstdError, zipfile.BadZipFile, *READ_ERRORS) as err:
        raise RecordError(f"{info.filename}: cannot read the entry: {err}") from None


def _eval_entries(
    path: Path, max_record_bytes: int
) -> tuple[dict[str, Any], Iterator[tuple[str, Any]]]:
    """The log header and an iterator of ``(entry name, sample or RecordError)``."""
    fh = open(path, "rb")  # noqa: SIM115 - closed by the generator below or on error
    try:
        archive = zipfile.ZipFile(fh)
        check_no_overlap(archive)
        names = set(archive.namelist())
        entry = next((name for name in HEADER_ENTRIES if name in names), None)
        if entry is None:
            raise RecordError("not an Inspect .eval archive: no header.json entry")
        header = _load_entry(archive, fh, archive.getinfo(entry), max_record_bytes)
        if not isinstance(header, dict):
            raise RecordError(f"{entry}: expected an object, got {type(header).__name__}")
    except (zipfile.BadZipFile, *READ_ERRORS) as err:
        fh.close()
        raise RecordError(f"not a readable Inspect .eval archive: {err}") from None
    except RecordError:
        fh.close()
        raise

    def samples() -> Iterator[tuple[str, Any]]:
        try:
            infos = sorted(
                (i for i in archive.infolist() if i.filename.startswith("samples/")),
                key=lambda i: i.filename,
            )
            for info in infos:
                if info.file_size > max_record_bytes:
                    yield info.filename, RecordError(
                        f"sample is larger than the limit of {max_record_bytes} bytes "
                        "(raise it with --max-record-mb)"
                    )
                    continue
                try:
                    yield info.filename, _load_entry(archive, fh, info, max_record_bytes)
                except RecordError as err:
                    yield info.filename, err
        finally:
            fh.close()

    return header, samples()


def _json_entries(
    path: Path, max_record_bytes: int
) -> tuple[dict[str, Any], Iterator[tuple[str, Any]]]:
    """The header (the log itself) and its samples, from a ``.json`` log."""
    text = read_document(path, max_record_bytes)
    if isinstance(text, RecordError):
        raise text
    log = parse_json(text)
    if not isinstance(log, dict):
        raise RecordError(f"expected an Inspect log object, got {type(log).__name__}")
    samples = log.get("samples") or []
    if not isinstance(samples, list):
        raise RecordError(f"field 'samples': expected array, got {type(samples).__name__}")
    return log, ((f"samples[{i}]", s) for i, s in enumerate(samples))


def resolve_attachments(value: Any, attachments: dict[str, str]) -> Any:
    """``value`` with every ``attachment://<hash>`` string replaced by the attachment's text."""
    if not attachments:
        return value
    if isinstance(value, str):
        if value.startswith(ATTACHMENT_PROTOCOL):
            return attachments.get(value[len(ATTACHMENT_PROTOCOL) :], value)
        return value
    if isinstance(value, list):
        return [resolve_attachments(v, attachments) for v in value]
    if isinstance(value, dict):
        return {k: resolve_attachments(v, attachments) for k, v in value.items()}
    return value


def _score_value(scores: Any, scorer: str | None) -> tuple[bool, Any]:
    """``(found, value)`` of the named scorer (or the first one) in a sample's ``scores``."""
    if not isinstance(scores, dict) or not scores:
        return False, None
    if scorer is None:
        score = next(iter(scores.values()))
    elif scorer in scores:
        score = scores[scorer]
    else:
        raise RecordError(
            f"field 'scores': no scorer {scorer!r} (the sample has: "
            f"{excerpt(', '.join(map(str, scores)))})"
        )
    return True, score.get("value") if isinstance(score, dict) else score


def score_success(scores: Any, options: ReadOptions, scorer: str | None = None) -> bool | None:
    """Success from a sample's ``scores``: the named scorer, or the first one.

    Args:
        scores: The sample's ``scores`` object (scorer name -> ``{"value": ...}``).
        options: ``inspect_success`` (string values that count as success) and
            ``success_threshold`` (numbers at or above it count as success).
        scorer: The scorer to read; ``None`` = ``options.inspect_scorer``, else the first.

    Returns:
        ``None`` when the sample has no score or its value is neither a string, a number nor
        a boolean (e.g. a dict of several values).

    Raises:
        RecordError: when the named scorer is not among the sample's scores.
    """
    found, value = _score_value(scores, scorer or options.inspect_scorer)
    if not found:
        return None
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
    """One Inspect sample as a trajectory.

    Args:
        sample: The sample object (``id``, ``epoch``, ``messages``, ``scores``...).
        eval_spec: The log's ``eval`` object (``task``, ``model``...).
        options: Reader options.
        default_run: Run label when the log names no model (the file's stem).
        file: Source file.
        line: The sample's 1-based position in the log.
    """
    if not isinstance(sample, dict):
        raise RecordError(f"expected a sample object, got {type(sample).__name__}")
    if "messages" not in sample:
        raise RecordError("sample has no 'messages'")
    attachments = sample.get("attachments")
    messages = resolve_attachments(
        sample["messages"], attachments if isinstance(attachments, dict) else {}
    )
    prompt, turns = split_turns(messages)
    task = eval_spec.get("task")
    sample_id = coerce_task_id(sample.get("id", line), "id")
    epoch = sample.get("epoch")
    if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch > MAX_STORED_INT:
        raise RecordError(f"field 'epoch': {epoch} is out of range (at most {MAX_STORED_INT})")
    scores = sample.get("scores")
    meta: dict[str, Any] = {
        "inspect_task": task,
        "inspect_id": sample.get("id"),
        "epoch": epoch,
        "scores": scores,
    }
    for key in ("error", "limit", "metadata", "target"):
        if sample.get(key):
            meta[key] = sample[key]
    end_reason = None
    if sample.get("error"):
        meta["crashed"] = True
        end_reason = "crash"  # the sample errored: the harness, not a judged failure
    elif sample.get("limit"):
        end_reason = "budget"  # a message, token or time limit ended it: censored
    reward = None
    found, value = _score_value(scores, options.inspect_scorer)
    if found and isinstance(value, (int, float)) and not isinstance(value, bool):
        reward = float(value)
    run = options.run or eval_spec.get("model") or default_run
    return Trajectory(
        run=str(run),
        task_id=f"{task}/{sample_id}" if task else sample_id,
        turns=turns,
        success=score_success(scores, options),
        sample=(epoch - 1) if isinstance(epoch, int) and not isinstance(epoch, bool)
        and epoch >= 1 else None,
        reward=reward,
        prompt=prompt,
        end_reason=end_reason,
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
            header, samples = _eval_entries(path, options.max_record_bytes)
        else:
            header, samples = _json_entries(path, options.max_record_bytes)
    except RecordError as err:
        yield err.located(file, 1)
        return
    eval_spec = header.get("eval")
    if not isinstance(eval_spec, dict):
        eval_spec = {}
    for position, (entry, sample) in enumerate(samples, start=1):
        if isinstance(sample, RecordError):
            message = sample.message
            if not message.startswith(entry):
                message = f"{entry}: {message}"
            yield RecordError(message, file=file, line=position)
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
