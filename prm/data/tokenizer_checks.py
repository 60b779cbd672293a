"""A model folder's tokenizer is accepted only if it is of the kind the toolkit writes.

``tokenizer.json`` is read strictly (:func:`recovery.ownfiles.read_own_json`) and its
pipeline checked before it is handed to ``tokenizers``: the model is BPE (the ``tiny``
tokenizer, SmolLM2's) or WordPiece (MiniLM's); the normalizer, pre-tokenizer, decoder and
post-processor are of the kinds those tokenizers and ``transformers``' own tokenizer classes
(a local backbone folder's, saved with a frozen head) write, with short plain parameters. A
pattern is a string of at most :data:`MAX_PARAM_CHARS` characters or, for a ``Split``
pre-tokenizer, a regular expression that ``transformers`` itself writes
(:func:`known_split_patterns`): a long pattern grows memory without bound, a backtracking
one panics the Rust code. Vocabulary, merges and added tokens are bounded in number and
length. Pretrained backbones loaded from their pip packages (:mod:`prm.backbones`) do not
pass through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recovery.errors import UsageProblem

MAX_VOCAB = 1 << 20
"""Most vocabulary entries, merges or added tokens (the ``tiny`` limit; SmolLM2 has 49,152)."""
MAX_TOKEN_CHARS = 1024
"""Longest token string (SmolLM2's longest is 81 characters)."""
MAX_PARAM_CHARS = 16
"""Longest string parameter of a pipeline step (WordPiece's ``##``, Metaspace's ``▁``)."""
MAX_STEPS = 8
"""Most steps of a ``Sequence`` normalizer, pre-tokenizer or decoder."""
MAX_WORD_CHARS = 1000
"""Largest WordPiece ``max_input_chars_per_word`` (MiniLM's is 100)."""

NORMALIZERS = {"BertNormalizer", "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents",
               "Strip", "Replace", "Prepend"}
PRE_TOKENIZERS = {"ByteLevel", "Digits", "BertPreTokenizer", "Whitespace", "WhitespaceSplit",
                  "Punctuation", "Metaspace", "Split"}
DECODERS = {"ByteLevel", "WordPiece", "Metaspace", "Replace", "ByteFallback", "Fuse", "Strip"}
SPLIT_PATTERN_MODULES = ("transformers.models.qwen2.tokenization_qwen2",
                         "transformers.models.qwen3_5.tokenization_qwen3_5")
"""Tokenizer classes of ``transformers`` whose ``PRETOKENIZE_REGEX`` a saved tokenizer may
carry (a local Qwen backbone's)."""
POST_PROCESSORS = {"TemplateProcessing", "ByteLevel", "BertProcessing", "RobertaProcessing"}
TOP_KEYS = {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
            "post_processor", "decoder", "model"}
BPE_KEYS = {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
            "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"}
WORDPIECE_KEYS = {"type", "unk_token", "continuing_subword_prefix", "max_input_chars_per_word",
                  "vocab"}


def _refuse(path: Path, what: str) -> UsageProblem:
    return UsageProblem(f"{path}: {what}; a model folder's tokenizer must be of the kind prm "
                        f"train writes")


def _short(value: Any, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit


def _plain(value: Any) -> bool:
    """A scalar parameter: null, true/false, a bounded whole number or a short string."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_VOCAB
    return _short(value, MAX_PARAM_CHARS)


def known_split_patterns() -> set[str]:
    """The ``Split`` regular expressions ``transformers``' own tokenizer classes write."""
    import importlib

    found = set()
    for name in SPLIT_PATTERN_MODULES:
        try:
            found.add(importlib.import_module(name).PRETOKENIZE_REGEX)
        except (ImportError, AttributeError):  # another transformers version
            continue
    return found


def _pattern_ok(type_: str, pattern: Any) -> bool:
    """A short string, or a ``Split`` regular expression that ``transformers`` writes."""
    if not (isinstance(pattern, dict) and len(pattern) == 1):
        return False
    ((form, text),) = pattern.items()
    if form == "String":
        return _short(text, MAX_PARAM_CHARS)
    return form == "Regex" and type_ == "Split" and text in known_split_patterns()


def _check_step(path: Path, field: str, step: Any, kinds: set[str], nested: bool = True) -> None:
    """A normalizer, pre-tokenizer or decoder: a known type with plain parameters, or a short
    ``Sequence`` of them (one level)."""
    if step is None:
        return
    type_ = step.get("type") if isinstance(step, dict) else None
    if type_ == "Sequence" and nested:
        parts = [v for k, v in step.items() if k != "type"]
        if len(parts) != 1 or not isinstance(parts[0], list) or len(parts[0]) > MAX_STEPS:
            raise _refuse(path, f"{field} is a Sequence that is not a short list of steps")
        for part in parts[0]:
            _check_step(path, field, part, kinds, nested=False)
        return
    if type_ not in kinds:
        raise _refuse(path, f"{field} {str(type_)[:40]!r} is not one of {', '.join(sorted(kinds))}")
    bad = [k for k, v in step.items() if k != "type" and not (
        _pattern_ok(type_, v) if k == "pattern" else _plain(v))]
    if bad:
        raise _refuse(path, f"{field} {type_} has a parameter {bad[0][:40]!r} that is not a "
                            f"short plain value")


def _check_small(path: Path, field: str, value: Any, budget: int = 256) -> None:
    """A post-processor, padding or truncation: short strings, few items, little nesting."""
    stack, seen = [(value, 0)], 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > budget or depth > 6:
            raise _refuse(path, f"{field} is larger than a tokenizer needs")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            stack.extend((k, depth + 1) for k in item)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif not (_plain(item) or _short(item, MAX_TOKEN_CHARS)):
            raise _refuse(path, f"{field} holds a value that is not a short plain value")


def _check_vocab(path: Path, vocab: Any) -> None:
    if not isinstance(vocab, dict) or not 0 < len(vocab) <= MAX_VOCAB:
        raise _refuse(path, f"model.vocab must be an object of 1 to {MAX_VOCAB} tokens")
    for token, index in vocab.items():
        if len(token) > MAX_TOKEN_CHARS or isinstance(index, bool) or not isinstance(
                index, int) or not 0 <= index < MAX_VOCAB:
            raise _refuse(path, f"model.vocab entry {token[:40]!r} is too long or has no id "
                                f"from 0 to {MAX_VOCAB - 1}")


def _check_merges(path: Path, merges: Any) -> None:
    if not isinstance(merges, list) or len(merges) > MAX_VOCAB:
        raise _refuse(path, f"model.merges must be a list of at most {MAX_VOCAB} merges")
    for merge in merges:
        pair = merge.split(" ") if isinstance(merge, str) else merge
        if not (isinstance(pair, list) and len(pair) == 2
                and all(_short(p, MAX_TOKEN_CHARS) for p in pair)):
            raise _refuse(path, "model.merges holds an entry that is not a pair of tokens")


def _check_model(path: Path, model: Any) -> None:
    type_ = model.get("type") if isinstance(model, dict) else None
    keys = {"BPE": BPE_KEYS, "WordPiece": WORDPIECE_KEYS}.get(type_)
    if keys is None:
        raise _refuse(path, f"model {str(type_)[:40]!r} is not BPE or WordPiece")
    extra = sorted(set(model) - keys)
    if extra:
        raise _refuse(path, f"model {type_} has an unknown key {extra[0][:40]!r}")
    for key, value in model.items():
        if key not in ("vocab", "merges") and not _plain(value):
            raise _refuse(path, f"model.{key} is not a short plain value")
    if model.get("dropout") is not None:
        raise _refuse(path, "model.dropout must be null (scores would be random)")
    width = model.get("max_input_chars_per_word", 100)
    if type_ == "WordPiece" and not (isinstance(width, int) and 0 < width <= MAX_WORD_CHARS):
        raise _refuse(path, f"model.max_input_chars_per_word must be from 1 to "
                            f"{MAX_WORD_CHARS}")
    _check_vocab(path, model.get("vocab"))
    if type_ == "BPE":
        _check_merges(path, model.get("merges", []))


def _check_added(path: Path, added: Any) -> None:
    if not isinstance(added, list) or len(added) > MAX_VOCAB:
        raise _refuse(path, "added_tokens must be a list")
    for token in added:
        if not (isinstance(token, dict) and _short(token.get("content"), MAX_TOKEN_CHARS)
                and all(_plain(v) for k, v in token.items() if k != "content")):
            raise _refuse(path, "added_tokens holds an entry that is not a short token")


def check_tokenizer_json(data: Any, path: Path) -> None:
    """Refuse a parsed ``tokenizer.json`` that is not of the kind the toolkit writes (see the
    module docstring).

    Raises:
        UsageProblem: one line naming ``path`` and the part refused.
    """
    if not isinstance(data, dict):
        raise _refuse(path, "not a JSON object")
    extra = sorted(set(data) - TOP_KEYS)
    if extra:
        raise _refuse(path, f"unknown key {extra[0][:40]!r}")
    _check_model(path, data.get("model"))
    _check_step(path, "normalizer", data.get("normalizer"), NORMALIZERS)
    _check_step(path, "pre_tokenizer", data.get("pre_tokenizer"), PRE_TOKENIZERS)
    _check_step(path, "decoder", data.get("decoder"), DECODERS)
    post = data.get("post_processor")
    if post is not None:
        type_ = post.get("type") if isinstance(post, dict) else None
        if type_ not in POST_PROCESSORS:
            raise _refuse(path, f"post_processor {str(type_)[:40]!r} is not one of "
                                f"{', '.join(sorted(POST_PROCESSORS))}")
        _check_small(path, "post_processor", post)
    for field in ("padding", "truncation"):
        _check_small(path, field, data.get(field), budget=32)
    _check_added(path, data.get("added_tokens", []))


TOKENIZER_FILES = {"tokenizer.json": 64 << 20, "tokenizer_config.json": 4 << 20,
                   "special_tokens_map.json": 1 << 20, "added_tokens.json": 4 << 20}
"""The tokenizer files read from a folder, each with the most bytes it may have."""


def check_tokenizer_folder(directory: Path) -> None:
    """Read a folder's tokenizer files strictly and check ``tokenizer.json``'s pipeline,
    before ``transformers`` or ``tokenizers`` sees them.

    Raises:
        InputProblem: a file is missing, too large or not strict JSON (named).
        UsageProblem: ``tokenizer.json`` is not of the kind the toolkit writes.
    """
    from recovery.errors import InputProblem
    from recovery.ownfiles import read_own_json

    path = directory / "tokenizer.json"
    if not path.is_file():
        raise InputProblem(f"{path} is missing (a model folder's tokenizer is saved as "
                           f"tokenizer.json)")
    for name, limit in TOKENIZER_FILES.items():
        if (directory / name).exists():
            data = read_own_json(directory / name, "tokenizer file", max_bytes=limit)
            if name == "tokenizer.json":
                check_tokenizer_json(data, path)
