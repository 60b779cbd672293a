"""A frozen backbone with a trained head over cached features (``prm train --mode frozen``).

The backbone runs once over every window, without gradients, and the features the head reads
at each turn's marker (:meth:`StepScorer.features`) are kept (:class:`FeatureCache`); the head
is then a logistic regression over them (scikit-learn: binary with soft targets, or
multinomial over the classes -1 / 0 / +1), fitted with its regularisation and the error
threshold chosen by grouped cross-validation over the training tasks. The fitted coefficients
become the ``StepScorer``'s linear head, so a saved frozen model scores exactly like any other
(its folder holds the head alone; the backbone is the one shipped in the package).

This is what makes a pretrained backbone usable on a small CPU: one forward pass per window,
instead of a forward and backward pass per window and epoch (docs/prm.md gives the times).
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.data.examples import turn_rows
from prm.data.labels import class_index
from prm.spec import SPLIT_FILE, SUMMARY_FILE, PRMSpec
from recovery.errors import InputProblem

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from prm.config import TrainConfig, TrainResult
    from prm.data.examples import StepExample
    from prm.kinds.base import FitData
    from prm.neural.folder import LoadedPRM

HEAD_CS = (0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
"""Inverse regularisation strengths the head's inner cross-validation tries (on whitened
principal components)."""

HEAD_COMPONENTS = 128
"""Principal components the head reads: the features are standardised and whitened by PCA
first (one linear map, folded into the head's weights afterwards), which conditions the
regression so that L-BFGS converges in a few iterations instead of hundreds."""


def _example_key(example: StepExample) -> str:
    digest = hashlib.sha256()
    for text in (example.prompt, *example.actions, *example.observations):
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x1f")
    return f"{example.traj_id}:{digest.hexdigest()}"


@dataclass
class FeatureCache:
    """Per-trajectory head features of one frozen backbone, computed once and reused (e.g. by
    every fold of ``prm cv``).

    Attributes:
        features: ``{example key: (turns, width) array}``, turn ``t`` at row ``t - 1``.
    """

    features: dict[str, Any] = field(default_factory=dict)

    def get(self, examples: Sequence[StepExample]) -> list[Any | None]:
        """The cached features of each example (``None`` where missing)."""
        return [self.features.get(_example_key(e)) for e in examples]

    def put(self, examples: Sequence[StepExample], arrays: Sequence[Any]) -> None:
        """Keep the features of each example."""
        for example, array in zip(examples, arrays, strict=True):
            self.features[_example_key(example)] = array


def extract_features(
    frozen: LoadedPRM,
    examples: Sequence[StepExample],
    *,
    device: str = "cpu",
    batch_tokens: int = 8192,
    cache: FeatureCache | None = None,
    progress: bool = True,
) -> list[Any]:
    """The features ``frozen``'s head reads at every turn (its scorer on ``device``, in batches of
    ``batch_tokens`` padded tokens), one ``(turns, width)`` float32 array per example.

    Examples already in ``cache`` are not recomputed; new ones are added to it.
    """
    import numpy as np
    import torch
    from tqdm import tqdm

    from prm.data.tokenize import TokenIds
    from prm.data.windows import collate, encode_examples, token_budget_batches

    scorer, tokenizer, spec = frozen.scorer, frozen.tokenizer, frozen.spec
    cache = cache if cache is not None else FeatureCache()
    cached = cache.get(examples)
    todo = [e for e, c in zip(examples, cached, strict=True) if c is None]
    if todo:
        pad = TokenIds.of(tokenizer, spec.step_token).pad
        windows = encode_examples(todo, tokenizer, spec.max_length, spec.max_prompt_tokens,
                                  spec.step_token)
        lengths = [len(w) for w in windows]
        order = sorted(range(len(windows)), key=lambda i: lengths[i])
        per_window: list[Any] = [None] * len(windows)
        bar = tqdm(total=sum(len(w.step_ts) for w in windows), unit="turn",
                   desc="frozen features", disable=not progress, file=sys.stderr,
                   dynamic_ncols=True)
        scorer.eval()
        use_cuda = torch.device(device).type == "cuda"
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_cuda):
            for batch_ids in token_budget_batches(lengths, batch_tokens, order):
                batch = collate([windows[i] for i in batch_ids], pad).to(device)
                features = scorer.features(batch.input_ids, batch.step_mask, batch.actions,
                                           batch.turn_index).float().cpu().numpy()
                counts = [len(windows[i].step_ts) for i in batch_ids]
                for i, part in zip(batch_ids, np.split(features, np.cumsum(counts)[:-1]),
                                   strict=True):
                    per_window[i] = part
                bar.update(sum(counts))
        bar.close()
        by_traj: dict[str, list[Any]] = {}
        for window, part in zip(windows, per_window, strict=True):
            by_traj.setdefault(window.traj_id, []).append(part)
        width = scorer.head.in_features
        cache.put(todo, [np.concatenate(by_traj[e.traj_id]) if e.traj_id in by_traj
                         else np.zeros((0, width), np.float32) for e in todo])
    return [c for c in cache.get(examples)]


@dataclass
class HeadFit:
    """A fitted head over standardised features, in raw feature space.

    Attributes:
        coef: ``(outputs, width)`` weights (1 output: the logit of a good step; 3: class
            logits of -1, 0, +1).
        intercept: ``(outputs,)``.
        C: The chosen inverse regularisation strength.
        error_threshold: The chosen error threshold (:func:`prm.evaluation.decisions.choose_error_threshold`).
    """

    coef: Any
    intercept: Any
    C: float
    error_threshold: float

    def probabilities(self, features: Any) -> Any:
        """Binary: P(good) ``(n,)``; ternary: ``(n, 3)`` class probabilities."""
        import numpy as np
        from scipy.special import expit, softmax

        logits = np.asarray(features, float) @ self.coef.T + self.intercept
        return expit(logits[:, 0]) if logits.shape[1] == 1 else softmax(logits, axis=1)


def _fit_logistic(X: np.ndarray, targets: np.ndarray, ternary: bool, C: float) -> Any:
    """A scikit-learn logistic regression on standardised ``X``; soft binary targets enter as
    a positive with weight ``y`` and a negative with weight ``1 - y``."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=C, max_iter=2000)
    if ternary:
        return model.fit(X, class_index(targets))
    doubled = np.concatenate([X, X])
    labels = np.concatenate([np.ones(len(targets), int), np.zeros(len(targets), int)])
    weights = np.concatenate([targets, 1.0 - targets])
    keep = weights > 0
    return model.fit(doubled[keep], labels[keep], sample_weight=weights[keep])


def _proba(model: Any, X: np.ndarray, ternary: bool) -> np.ndarray:
    import numpy as np

    probs = model.predict_proba(X)
    if ternary:  # a class missing from the training rows gets probability 0
        full = np.zeros((len(X), 3))
        full[:, model.classes_] = probs
        return full
    return probs[:, 1]


def _loss(probs: np.ndarray, targets: np.ndarray, ternary: bool) -> float:
    import numpy as np

    if ternary:
        classes = class_index(targets)
        return float(-np.mean(np.log(np.clip(probs[np.arange(len(classes)), classes], 1e-7, 1))))
    p = np.clip(probs, 1e-7, 1 - 1e-7)
    return float(-np.mean(targets * np.log(p) + (1 - targets) * np.log(1 - p)))


def fit_head(
    rows: pd.DataFrame,
    features: np.ndarray,
    *,
    ternary: bool,
    seed: int = 0,
    folds: int = 3,
    Cs: Sequence[float] = HEAD_CS,
) -> HeadFit:
    """Fit the head on labelled turns, choosing ``C`` and the error threshold by grouped
    cross-validation over tasks (a logistic regression on the whitened principal components
    of the features, :data:`HEAD_COMPONENTS`, folded back into one linear head).

    Long because the docstring documents the arguments and the choice of C and threshold; the
    body is about 61 lines.

    Args:
        rows: One row per turn with ``traj_id, t, task_id, target`` (NaN targets are left out).
        features: ``(len(rows), width)``.
        ternary: Three classes (-1 / 0 / +1) instead of a binary soft target.
        seed: Seed of the inner folds.
        folds: Inner folds (fewer when there are fewer tasks).
        Cs: Candidate inverse regularisation strengths.

    Raises:
        InputProblem: when no turn has a target, or all targets are one class.
    """
    import numpy as np
    from sklearn.model_selection import GroupKFold

    from prm.evaluation.decisions import choose_error_threshold

    known = rows["target"].notna().to_numpy()
    rows, X = rows.loc[known].reset_index(drop=True), np.asarray(features, float)[known]
    targets = rows["target"].to_numpy(float)
    if not len(rows):
        raise InputProblem("no turn has a target to fit the head on")
    if (ternary and len(np.unique(class_index(targets))) < 2) or (
            not ternary and (targets.min() == targets.max())):
        raise InputProblem("the targets are all one class: nothing to learn")
    from sklearn.decomposition import PCA

    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale[scale < 1e-6] = 1.0
    pca = PCA(n_components=min(HEAD_COMPONENTS, len(rows) - 1, X.shape[1]), whiten=True,
              svd_solver="full",
              random_state=seed).fit((X - mean) / scale)
    Z = pca.transform((X - mean) / scale)
    groups = rows["task_id"].astype(str).to_numpy()
    n_splits = min(folds, len(np.unique(groups)))
    oof: dict[float, np.ndarray] = {}
    if n_splits >= 2:
        splitter = GroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
        for C in Cs:
            probs = np.zeros((len(rows), 3)) if ternary else np.zeros(len(rows))
            for train_idx, test_idx in splitter.split(Z, groups=groups):
                try:
                    model = _fit_logistic(Z[train_idx], targets[train_idx], ternary, C)
                except ValueError:  # one class in this inner fold
                    probs[test_idx] = (np.full(3, 1 / 3) if ternary
                                       else targets[train_idx].mean())
                    continue
                probs[test_idx] = _proba(model, Z[test_idx], ternary)
            oof[C] = probs
        best_C = min(Cs, key=lambda C: _loss(oof[C], targets, ternary))
        held_out = rows[["traj_id", "t", "target"]].copy()
        held_out["score"] = 1.0 - oof[best_C][:, 0] if ternary else oof[best_C]
        if ternary:
            held_out["p_neutral"] = oof[best_C][:, 1]
        threshold = choose_error_threshold(held_out)
    else:
        best_C, threshold = 0.1, 0.5
    model = _fit_logistic(Z, targets, ternary, best_C)
    coef = np.asarray(model.coef_, float)
    intercept = np.asarray(model.intercept_, float)
    if ternary and len(model.classes_) == 2:  # a class never seen: softmax([0, s]) = sigmoid
        low, high = model.classes_
        full_coef, full_intercept = np.zeros((3, coef.shape[1])), np.full(3, -30.0)
        full_intercept[low] = 0.0
        full_coef[high], full_intercept[high] = coef[0], intercept[0]
        coef, intercept = full_coef, full_intercept
    # logits = W pca(z) + b with pca(z) = (z - m) M and z = (x - mean) / scale: one linear map.
    M = pca.components_.T / np.sqrt(pca.explained_variance_)
    G = M @ coef.T  # (width, outputs) on z
    raw_coef = (G / scale[:, None]).T
    raw_intercept = intercept - pca.mean_ @ G - (mean / scale) @ G
    return HeadFit(coef=raw_coef, intercept=raw_intercept, C=float(best_C),
                   error_threshold=float(threshold))



def frozen_scorer(config: TrainConfig, spec: PRMSpec, echo: Callable[[str], Any]) -> LoadedPRM:
    """The frozen backbone wrapped in a ``StepScorer`` (head untrained), its tokenizer, and the
    spec with its marker token."""
    from prm.backbones import load_backbone
    from prm.neural.folder import LoadedPRM
    from prm.neural.model import build_scorer

    backbone, tokenizer, step_token = load_backbone(
        config.backbone, trust_remote_code=config.trust_remote_code, echo=echo
    )
    spec = dataclasses.replace(spec, step_token=step_token, novelty=False, mode="frozen")
    scorer = build_scorer(backbone, tokenizer, novelty=False, n_outputs=spec.n_outputs,
                          pool=spec.pool)
    for parameter in scorer.backbone.parameters():
        parameter.requires_grad_(False)
    return LoadedPRM(scorer=scorer, tokenizer=tokenizer, spec=spec)


def set_head(scorer: Any, fit: HeadFit) -> None:
    """Copy a fitted head into the ``StepScorer``'s linear head."""
    import torch

    with torch.no_grad():
        scorer.head.weight.copy_(torch.as_tensor(fit.coef, dtype=scorer.head.weight.dtype))
        scorer.head.bias.copy_(torch.as_tensor(fit.intercept, dtype=scorer.head.bias.dtype))


def train_frozen(config: TrainConfig, spec: PRMSpec, data: FitData, echo: Callable[[str], Any],
                 result: TrainResult) -> TrainResult:
    """Fit the head of a frozen backbone on ``data``'s train and validation tasks; save the
    model into ``config.out`` and fill ``result``.

    The head's regularisation and error threshold are chosen by grouped cross-validation over
    those tasks, so the validation split joins the training rows instead of being held out.
    The backbone's features are kept in ``data.shared`` (the folds of one cross-validation
    share them).
    """
    import json
    import time

    import numpy as np
    import torch

    from prm.neural.device import resolve_device
    from prm.neural.folder import save_scorer

    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    started = time.perf_counter()
    frozen = frozen_scorer(config, spec, echo)
    scorer, tokenizer, spec = frozen.scorer.to(device), frozen.tokenizer, frozen.spec  # in place
    split, cache = data.split, data.shared.setdefault("frozen-features", FeatureCache())
    fit_examples = data.fitted("train", "validation")
    echo(f"frozen {config.backbone}: features of {len(fit_examples)} trajectories on {device}")
    features = extract_features(frozen, fit_examples, device=device,
                                batch_tokens=config.batch_tokens, cache=cache,
                                progress=config.progress)
    rows = turn_rows(fit_examples)
    fit = fit_head(rows, np.concatenate(features), ternary=spec.head == "ternary",
                   seed=config.seed)
    set_head(scorer, fit)
    spec = dataclasses.replace(spec, error_threshold=fit.error_threshold)
    out = Path(config.out)
    save_scorer(out, scorer.cpu(), tokenizer, spec)
    split.save(out / SPLIT_FILE)
    result.wall_s = time.perf_counter() - started
    result.validation = {"head_C": fit.C, "error_threshold": fit.error_threshold}
    (out / SUMMARY_FILE).write_text(json.dumps(result.to_dict(), indent=1))
    echo(f"head over {len(rows)} turns (C = {fit.C:g}, error threshold "
         f"{fit.error_threshold:g}) in {result.wall_s:.0f} s")
    return result
