"""Training a PRM (``prm train``); its options are :class:`prm.config.TrainConfig`.

:func:`train` reads the store, splits it by task and fits the kind the options name
(:mod:`prm.kinds`: structured, tfidf, neural or frozen), then saves it: one path for every
kind.
:func:`train_examples` does the same from examples already in memory (``prm cv`` calls it per
fold).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prm.config import TrainConfig, TrainResult
from prm.data.examples import StepExample, TaskSplit, load_step_examples
from prm.data.labels import no_target_message, unused_labels_note
from prm.spec import SPLIT_FILE
from recovery.errors import InputProblem, UsageProblem


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

    if config.store is None:
        raise UsageProblem("store is required")
    from prm.config import with_default_out

    config = with_default_out(config, echo)
    store = open_store(config.store, read_only=True, must_exist=True)
    con = store.con
    try:
        examples = load_step_examples(con, config.labels, base=config.label_base)
        if examples and not any(x == x for e in examples for x in e.targets):
            raise InputProblem(no_target_message(config.store, config.labels, con))
        unused = unused_labels_note(con, config.labels)
        if unused:
            echo(f"note: {unused}")
    finally:
        store.close()
    return train_examples(config, examples, echo=echo)


def train_examples(
    config: TrainConfig,
    examples: list[StepExample],
    split: TaskSplit | None = None,
    *,
    echo: Callable[[str], Any] = print,
    shared: dict[str, Any] | None = None,
) -> TrainResult:
    """Train on examples already read (``config.store`` is only named in messages).

    Args:
        config: The options; ``config.out`` receives the model.
        examples: Step examples with targets.
        split: The task split; default: :meth:`TaskSplit.make` with the config's seed and
            fractions (or the resumed checkpoint's).
        echo: Where progress lines go.
        shared: Label-free work to share between calls (``prm cv``'s folds): features.
    """
    from prm.neural.checkpoints import resume_checkpoint

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
    from prm.kinds import build
    from prm.kinds.base import FitData

    model = build(config, echo).fit(FitData(examples, split, store=config.store,
                                            resume_from=resume_from, shared={} if shared is None else shared))
    if model.result.finished:
        model.result.described = model.describe()
        model.save(out)
    return model.result
