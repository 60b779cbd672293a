"""The neural kinds: ``neural`` (a transformer trained in full or with LoRA adapters,
:mod:`prm.neural.loop`) and ``frozen`` (a head over a pretrained backbone as shipped,
:mod:`prm.neural.frozen`).

Their folder is ``prm_config.json`` (kind ``neural``, with the mode), the backbone's config,
the tokenizer and ``model.safetensors``. Training writes into the run's ``--out`` as it goes
(checkpoints, the loss log), so :meth:`NeuralKind.save` into that folder writes nothing more and
into another copies the model's files. They read no outcome and no later turn, so they score
in either setting.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prm.kinds.base import FitData, SpecKind
from recovery.errors import UsageProblem

if TYPE_CHECKING:
    import pandas as pd

    from prm.config import TrainConfig
    from prm.data.examples import StepExample
    from prm.spec import PRMSpec



def is_ternary(examples: list[StepExample]) -> bool:
    """Whether the targets are ternary labels: every known one 0, 0.5 or 1, and some 0.5."""
    known = [x for e in examples for x in e.targets if x == x]
    return bool(known) and 0.5 in known and all(x in (0.0, 0.5, 1.0) for x in known)


def model_spec(config: TrainConfig, examples: list[StepExample],
               echo: Callable[[str], Any] = print) -> PRMSpec:
    """The spec a run of ``config`` builds: its mode, head, pooling and window resolved."""
    from prm.backbones import PRETRAINED
    from prm.data.windows import MIN_WINDOW
    from prm.spec import PRMSpec

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


class NeuralKind(SpecKind):
    """A neural PRM (``full`` or ``lora``) behind the kind contract."""

    name = "neural"

    def __init__(self, config: Any = None, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.loaded: Any = None
        self.device = "cpu"

    @property
    def spec(self) -> PRMSpec:
        """The loaded model's spec."""
        return self.loaded.spec

    @property
    def head(self) -> str:
        return self.spec.head

    def describe(self) -> str:
        return f"neural PRM ({self.spec.backbone}, {self.spec.mode}, {self.spec.head})"

    @classmethod
    def trained_words(cls, config: TrainConfig) -> tuple[str, str]:
        """The backbone and the mode (``full``, ``lora`` or ``frozen``)."""
        return str(config.backbone), config.mode

    def fit(self, data: FitData) -> NeuralKind:
        """Train into ``config.out`` (checkpoints and the loss log as it goes); the trained
        model is loaded back unless ``--stop-after`` stopped the run."""
        from prm.neural.loop import train_neural

        spec = model_spec(self.config, data.examples, self.echo)
        self.result = self._new_result(data)
        train_neural(self.config, spec, data, self.echo, self.result)
        return self._trained(data)

    def _trained(self, data: FitData) -> NeuralKind:
        from prm.neural.device import resolve_device
        from prm.neural.folder import load_scorer

        self.split = data.split
        self.model_dir = Path(self.config.out)
        if self.result.finished:
            self.device = resolve_device(self.config.device)
            self.loaded = load_scorer(self.model_dir, device=self.device,
                                      trust_remote_code=self.config.trust_remote_code)
        return self

    def predict_steps(self, examples: Sequence[StepExample], *, con: Any = None,
                      batch_tokens: int = 16384, progress: bool = False) -> pd.DataFrame:
        import sys

        import numpy as np
        import pandas as pd
        from tqdm import tqdm

        from prm.data.tokenize import TokenIds
        from prm.data.windows import encode_examples
        from prm.neural.model import score_windows, step_frame

        spec, tokenizer = self.spec, self.loaded.tokenizer
        with tqdm(total=sum(e.n_steps for e in examples), unit="turn", desc="prm score",
                  disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
            windows = encode_examples(examples, tokenizer, spec.max_length,
                                      spec.max_prompt_tokens, spec.step_token)
            probs = score_windows(self.loaded.scorer, windows,
                                  TokenIds.of(tokenizer, spec.step_token).pad,
                                  device=self.device, batch_tokens=batch_tokens,
                                  progress=bar.update)
        frame = step_frame(windows, probs)
        if not len(frame):
            return pd.DataFrame({"traj_id": [], "t": np.zeros(0, np.int64), "score": []})
        return frame[["traj_id", "t", "score"]
                     + (["p_neutral"] if "p_neutral" in frame else [])].reset_index(drop=True)

    def save(self, folder: str | Path) -> None:
        """Nothing more into the folder it was trained in; into another, its model's files."""
        folder = Path(folder)
        if self.model_dir is None or folder.resolve() == self.model_dir.resolve():
            return
        folder.mkdir(parents=True, exist_ok=True)
        for path in self.model_dir.iterdir():  # the model's files; not its checkpoints
            if path.is_file():
                shutil.copy2(path, folder / path.name)
        shutil.copytree(self.model_dir / "backbone", folder / "backbone", dirs_exist_ok=True)
        self.model_dir = folder

    @classmethod
    def load(cls, folder: str | Path, *, device: str = "auto",
             trust_remote_code: bool = False) -> NeuralKind:
        from prm.neural.device import resolve_device
        from prm.neural.folder import load_scorer

        model = cls()
        model.device = resolve_device(device)
        model.loaded = load_scorer(folder, device=model.device,
                                   trust_remote_code=trust_remote_code)
        model.model_dir = Path(folder)
        return model


class FrozenKind(NeuralKind):
    """A head over a frozen pretrained backbone behind the kind contract."""

    name = "frozen"

    def fit(self, data: FitData) -> FrozenKind:
        """Fit the head on the train and validation tasks' features (``data.shared`` keeps
        the backbone's features for the folds of one cross-validation)."""
        from prm.neural.frozen import train_frozen

        spec = model_spec(self.config, data.examples, self.echo)
        self.result = self._new_result(data)
        Path(self.config.out).mkdir(parents=True, exist_ok=True)
        train_frozen(self.config, spec, data, self.echo, self.result)
        return self._trained(data)
