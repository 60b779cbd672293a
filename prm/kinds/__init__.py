"""The registry of PRM kinds: the one place that knows them.

A kind is a class with scikit-learn's contract (:class:`prm.kinds.base.PRMKind`):
``fit(data) -> self``, ``predict_steps(examples)``, ``save(folder)`` and the classmethod
``load(folder)``. This module maps a kind's name to its class (:func:`kind_class`), finds a
model folder's kind (:func:`folder_kind`), builds a kind from the options of ``prm train``
(:func:`build`, which also reads the old ``--backbone structured|sklearn`` spelling) and loads
a folder, checking the setting once (:func:`load_model`). ``prm train``, ``prm score``,
``prm eval``, ``prm cv`` and the online scorers go through it.

Example:
    >>> from prm.kinds import load_model
    >>> model = load_model("prm-ckpt/", setting="blind")
    >>> scores = model.predict_steps(examples, con=store.con)
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.errors import UsageProblem

if TYPE_CHECKING:
    from prm.config import TrainConfig
    from prm.kinds.base import PRMKind

from prm.kinds.names import (
    DEFAULT_BACKBONES,
    KIND_NAMES,
    KINDS,
    LEGACY_BACKBONES,
    NEURAL_KINDS,
)

__all__ = ["KIND_NAMES", "build", "folder_kind", "kind_class", "load_model",
           "resolve_options"]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def kind_class(name: str) -> type[PRMKind]:
    """The class of the kind ``name``.

    Raises:
        UsageProblem: ``name`` is not a kind.
    """
    if name not in KINDS:
        raise UsageProblem(f"unknown PRM kind {name!r}; use {', '.join(KIND_NAMES)}")
    module, attribute = KINDS[name]
    return getattr(importlib.import_module(module), attribute)


def folder_kind(folder: str | Path, *, trust_remote_code: bool = False) -> str:
    """The kind of a model folder written by ``prm train`` (its spec checked on the way).

    Raises:
        InputProblem: not a model folder, or a damaged spec (named).
        UsageProblem: a field of the spec cannot be used (named).
    """
    from prm.linear.structured import STRUCTURED_FILE
    from prm.spec import PRMSpec

    folder = Path(folder)
    if (folder / STRUCTURED_FILE).is_file():
        return "structured"
    spec = PRMSpec.load(folder, trust_remote_code=trust_remote_code)
    if spec.kind == kind_class("tfidf").spec_kind:
        return "tfidf"
    return "frozen" if spec.mode == "frozen" else "neural"


def check_setting_name(setting: str | None) -> None:
    """Refuse a setting that is neither ``blind`` nor ``hindsight`` (``None``: the model's)."""
    from prm.data.features import SETTINGS

    if setting is not None and setting not in SETTINGS:
        raise UsageProblem(f"unknown setting {setting!r}; use blind or hindsight")


def load_model(folder: str | Path, *, setting: str | None = None, device: str = "auto",
               trust_remote_code: bool = False) -> PRMKind:
    """Load a model folder of any kind; the one place the setting is checked.

    Args:
        folder: A folder written by ``prm train``.
        setting: ``blind`` or ``hindsight``, the setting the scores are for; a folder trained
            for the other one is refused. ``None``: the folder's own.
        device: ``auto``, ``cuda`` or ``cpu`` (the neural kinds).
        trust_remote_code: The user's permission for a backbone's own code.

    Raises:
        InputProblem: a missing or damaged folder (the message names the file).
        UsageProblem: a field that cannot be used, remote code without permission, or a
            folder of another setting.
    """
    check_setting_name(setting)
    model = kind_class(folder_kind(folder, trust_remote_code=trust_remote_code)).load(
        folder, device=device, trust_remote_code=trust_remote_code)
    model.check_setting(setting)
    return model


def resolve_options(config: TrainConfig, note: Callable[[str], Any] = _stderr) -> TrainConfig:
    """``config`` with its kind named and, for the neural kinds, its backbone and mode.

    ``--model-kind`` names the kind; without it the old spelling is read: ``--backbone
    structured`` or ``sklearn`` (a one-line deprecation note through ``note``), any other
    backbone a neural kind (``frozen`` where ``--mode`` is frozen, or auto with a pretrained
    backbone), no backbone the structured kind.

    Raises:
        UsageProblem: a backbone or mode that the kind does not take.
    """
    from prm.backbones import PRETRAINED

    kind, backbone, mode = config.model_kind, config.backbone, config.mode
    check_model_kind(kind)
    if kind is None and backbone in LEGACY_BACKBONES:
        note(f"--backbone {backbone} is deprecated: use --model-kind "
             f"{LEGACY_BACKBONES[backbone]}")
        kind, backbone = LEGACY_BACKBONES[backbone], None
    if kind is None and backbone is None:
        kind = "structured"
    elif kind is None:
        pretrained = backbone in PRETRAINED
        kind = "frozen" if mode == "frozen" or (mode == "auto" and pretrained) else "neural"
    if kind not in NEURAL_KINDS:
        if backbone is not None:
            raise UsageProblem(f"--backbone is an option of the neural kinds (neural, frozen), "
                               f"not of --model-kind {kind}")
        return dataclasses.replace(config, model_kind=kind, backbone=None)
    backbone = backbone or DEFAULT_BACKBONES[kind]
    return dataclasses.replace(config, model_kind=kind, backbone=backbone,
                               mode=_neural_mode(kind, mode))


def check_model_kind(kind: str | None) -> None:
    """Refuse a ``--model-kind`` that is not a kind (``None``: chosen from the options)."""
    if kind is not None:
        kind_class(kind)


def _neural_mode(kind: str, mode: str) -> str:
    """The training mode of a neural kind: ``frozen`` is the frozen kind's alone."""
    if (mode == "frozen") != (kind == "frozen") and mode != "auto":
        raise UsageProblem(f"--mode {mode} does not go with --model-kind {kind}: the frozen kind "
                           "trains a head over the backbone as shipped (--mode frozen), the "
                           "neural kind every weight (--mode full) or adapters (--mode lora)")
    return "frozen" if kind == "frozen" else ("full" if mode == "auto" else mode)


def build(config: TrainConfig, echo: Callable[[str], Any] = print,
          note: Callable[[str], Any] = _stderr) -> PRMKind:
    """An unfitted model of the kind ``config`` names (:func:`resolve_options`)."""
    config = resolve_options(config, note)
    return kind_class(config.model_kind)(config, echo=echo)
