"""Training a PRM (``prm train``); its options are :class:`prm.config.TrainConfig`.

:func:`train` reads the store, splits it by task and trains one of: the TF-IDF baseline
(:mod:`prm.baseline`), a neural PRM with every weight or LoRA adapters trained
(:mod:`prm.loop`), or a head over a frozen pretrained backbone (:mod:`prm.frozen`).
:func:`train_examples` does the same from examples already in memory (``prm cv`` calls it per
fold).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.config import TrainConfig, TrainResult
from prm.data import StepExample, TaskSplit, load_step_examples
from prm.labels import no_target_message
from prm.spec import SPLIT_FILE, SUMMARY_FILE, PRMSpec
from recovery.errors import InputProblem, UsageProblem

if TYPE_CHECKING:
    from prm.frozen import FeatureCache

def is_ternary(examples: list[StepExample]) -> bool:
    """Whether the targets are ternary labels: every known one 0, 0.5 or 1, and some 0.5."""
    known = [x for e in examples for x in e.targets if x == x]
    return bool(known) and 0.5 in known and all(x in (0.0, 0.5, 1.0) for x in known)


def model_spec(config: TrainConfig, examples: list[StepExample],
               echo: Callable[[str], Any] = print) -> PRMSpec:
    """The spec a run of ``config`` builds: its mode, head, pooling and window resolved."""
    from prm.backbones import PRETRAINED
    from prm.windows import MIN_WINDOW

    pretrained = config.backbone in PRETRAINED
    mode = config.mode if config.mode != "auto" else ("frozen" if pretrained else "full")
    if mode != "full" and config.backbone == "tiny":
        raise UsageProblem("--mode lora and frozen need a pretrained backbone (minilm, smollm2 "
                           "or a model folder); tiny is trained from scratch")
    if mode != "full" and (config.resume or config.save_every):
        raise UsageProblem("--resume and --save-every are for --mode full")
    labels_ternary = config.labels == "data" and is_ternary(examples)
    head = config.head if config.head != "auto" else ("ternary" if labels_ternary else "binary")
    if head == "ternary" and not labels_ternary:
        raise UsageProblem("--head ternary needs data labels of -1, 0 and +1 (--labels data)")
    pool = config.pool if config.pool != "auto" else (
        "marker" if config.backbone == "tiny" else "marker+mean")
    if config.max_length < MIN_WINDOW:
        raise UsageProblem(f"--max-length must be at least {MIN_WINDOW} tokens")
    max_length = config.max_length
    if pretrained and max_length > PRETRAINED[config.backbone].max_positions:
        max_length = PRETRAINED[config.backbone].max_positions
        echo(f"--max-length {config.max_length} is more than {config.backbone} has positions "
             f"for: windows of {max_length} tokens")
    return PRMSpec(
        kind="neural", backbone=config.backbone, labels=config.labels,
        label_base=config.label_base, max_length=max_length,
        max_prompt_tokens=config.max_prompt_tokens, trust_remote_code=config.trust_remote_code,
        novelty=config.novelty and mode != "frozen", tiny=config.tiny, mode=mode, head=head,
        pool=pool,
    )


def train(config: TrainConfig, *, echo: Callable[[str], Any] = print) -> TrainResult:
    """Train a PRM on the store's trajectories; write it to ``config.out``.

    Args:
        config: The options (see :class:`TrainConfig` and ``prm train --help``).
        echo: Where rank 0 prints progress lines.

    Returns:
        A summary of the run (also written to ``train_summary.json``).

    Raises:
        InputProblem: the store is missing or not a store; there is nothing to train on.
        UsageProblem: options that do not go together.
    """
    from recovery.store import open_store

    if config.store is None or config.out is None:
        raise UsageProblem("store and out are required")
    store = open_store(config.store, read_only=True, must_exist=True)
    con = store.con
    try:
        examples = load_step_examples(con, config.labels, base=config.label_base)
        if examples and not any(x == x for e in examples for x in e.targets):
            raise InputProblem(no_target_message(config.store, config.labels, con))
    finally:
        store.close()
    return train_examples(config, examples, echo=echo)


def train_examples(
    config: TrainConfig,
    examples: list[StepExample],
    split: TaskSplit | None = None,
    *,
    echo: Callable[[str], Any] = print,
    cache: FeatureCache | None = None,
) -> TrainResult:
    """Train on examples already read (``config.store`` is only named in messages).

    Args:
        config: The options; ``config.out`` receives the model.
        examples: Step examples with targets.
        split: The task split; default: :meth:`TaskSplit.make` with the config's seed and
            fractions (or the resumed checkpoint's).
        echo: Where progress lines go.
        cache: Frozen-backbone features to reuse (``prm cv`` shares one across its folds).
    """
    from prm.checkpoints import resume_checkpoint

    if config.out is None:
        raise UsageProblem("out is required")
    if config.runs:
        runs = set(config.runs)
        examples = [e for e in examples if e.run in runs]
    if not examples:
        raise InputProblem(f"no trajectories to train on in {config.store}")
    if not any(target == target for e in examples for target in e.targets):
        raise InputProblem(no_target_message(config.store, config.labels))
    out = Path(config.out)
    resume_from = resume_checkpoint(out, echo) if config.resume else None
    if split is None:
        if resume_from is not None:
            split = TaskSplit.load(resume_from / SPLIT_FILE)
        else:
            fractions = (1.0 - config.val_fraction - config.test_fraction, config.val_fraction,
                         config.test_fraction)
            if min(fractions) < 0:
                raise UsageProblem("--val-fraction and --test-fraction must be at least 0 and "
                                   "sum to at most 1")
            split = TaskSplit.make(examples, seed=config.seed, fractions=fractions)
    if config.backbone == "sklearn":
        return train_baseline(config, examples, split)
    if config.backbone == "structured":
        from prm.structured import train_structured

        return train_structured(config, examples, split, echo)
    spec = model_spec(config, examples, echo)
    result = TrainResult(
        out=out, kind="neural", n_train=len(split.select(examples, "train")),
        n_validation=len(split.select(examples, "validation")),
        n_test=len(split.select(examples, "test")),
    )
    if spec.mode == "frozen":
        from prm.frozen import train_frozen

        out.mkdir(parents=True, exist_ok=True)
        return train_frozen(config, spec, examples, split, echo, result, cache)
    from prm.loop import train_neural

    return train_neural(config, spec, examples, split, resume_from, echo, result)


def train_baseline(
    config: TrainConfig, examples: list[StepExample], split: TaskSplit
) -> TrainResult:
    """Fit :class:`prm.baseline.TfidfStepBaseline` on the train split and save it."""
    from prm.baseline import TfidfStepBaseline, learnable, save_baseline_model, turn_frame
    from recovery.errors import InputProblem

    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    frame = turn_frame(split.select(examples, "train"))
    if not learnable(frame["target"].to_numpy()):
        raise InputProblem(f"the targets of the train split of {config.store} are all one "
                           "class: nothing to learn")
    baseline = TfidfStepBaseline().fit(frame, frame["target"].to_numpy())
    save_baseline_model(out, baseline, labels=config.labels, label_base=config.label_base)
    split.save(out / SPLIT_FILE)
    result = TrainResult(
        out=out, kind="sklearn", wall_s=time.perf_counter() - started,
        n_train=len(split.select(examples, "train")),
        n_validation=len(split.select(examples, "validation")),
        n_test=len(split.select(examples, "test")),
    )
    (out / SUMMARY_FILE).write_text(json.dumps(result.to_dict(), indent=1))
    return result
