"""Checks of what a model folder holds, shared by the structured model and the TF-IDF
baseline: every value the scorer uses is checked when the folder is loaded.

Array members of an ``.npz`` are checked from their ``.npy`` headers (shape, dtype, byte size
against the member's size in the zip directory) before any array is allocated, then their
values (finite, bounded, positive scales). The structured model's ``structured.json`` is
checked field by field, its feature names against those the featuriser computes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from recovery.errors import InputProblem

if TYPE_CHECKING:
    import numpy as np

FORMAT = "prm-structured"
VERSION = 3
"""3: ``call_failed_last`` and ``call_neutral`` (version 2 folders read as the threshold
deciding alone; 1 also without text)."""
TEXT_BITS = 15
"""Each text field (:data:`prm.data.features.TEXT_COLUMNS`) is hashed into ``2 ** TEXT_BITS``
columns of word unigrams and bigrams."""
TEXT_FIELDS = 4
"""Text fields scored: :data:`prm.data.features.TEXT_COLUMNS`."""
TEXT_WIDTH = TEXT_FIELDS * 2 ** TEXT_BITS
"""Hashed columns of the text fields side by side."""
MAX_EMBEDDING_WIDTH = 4096
"""The widest turn embedding a folder may declare (MiniLM's marker+mean features are 768)."""


def three_class_params(model: Any) -> tuple[np.ndarray, np.ndarray]:
    """A fitted scikit-learn logistic regression's coefficients and intercepts as three rows,
    those of the classes -1, 0 and +1, whatever classes it saw.

    A fold that saw only two classes fits a binary model: one row, the logit of
    ``classes_[1]`` against ``classes_[0]``, which is the softmax of the logits 0 and that
    row. A class it never saw gets the logit ``-inf``: probability 0.
    """
    import numpy as np

    classes = np.asarray(model.classes_, float)
    rows = (classes + 1).astype(int)  # -1, 0, +1 -> rows 0, 1, 2
    coef = np.zeros((3, model.coef_.shape[1]))
    intercept = np.full(3, -np.inf)
    if len(classes) == 2:
        coef[rows[1]], intercept[rows[1]] = model.coef_[0], model.intercept_[0]
        intercept[rows[0]] = 0.0
    else:
        coef[rows], intercept[rows] = model.coef_, model.intercept_
    return coef, intercept


MAX_WEIGHT = 1e6
"""Largest magnitude of a coefficient, intercept, text ratio or embedding array (fitted ones
are far below: standardised features)."""
MAX_CENTRE = 1e12
"""Largest magnitude of a feature's mean."""
SCALE_RANGE = (1e-12, 1e12)
"""A feature's scale: positive (fitting puts 1 where the spread is below 1e-12) and finite."""
MAX_MEMBERS = 64


def _npy_header(fh: Any) -> tuple[tuple[int, ...], Any]:
    """Shape and dtype from an ``.npy`` stream's header; nothing after it is read."""
    import numpy as np

    version = np.lib.format.read_magic(fh)
    read = {(1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:
        raise ValueError(f"npy format version {version} is not read")
    shape, _, dtype = read(fh)
    return shape, dtype


def npz_headers(path: Path) -> dict[str, tuple[tuple[int, ...], Any]]:
    """Each member's declared shape and dtype, read from its header alone, after checking
    that it holds plain numbers and exactly the bytes its shape declares (the uncompressed
    size in the zip directory), so that nothing is allocated from a false header.

    Raises:
        InputProblem: naming ``path`` and the member.
    """
    import math
    import zipfile

    out = {}
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if len(infos) > MAX_MEMBERS:
                raise InputProblem(f"{path}: {len(infos)} members; not a model's arrays")
            for info in infos:
                if not info.filename.endswith(".npy"):
                    raise InputProblem(f"{path}: member {info.filename!r} is not an array")
                with archive.open(info) as fh:
                    shape, dtype = _npy_header(fh)
                    offset = fh.tell()
                if dtype.kind not in "fiu" or dtype.fields is not None or dtype.shape:
                    raise InputProblem(f"{path}: member {info.filename} holds {dtype}, not "
                                       f"plain numbers")
                declared = math.prod(shape) * dtype.itemsize
                if declared != info.file_size - offset:
                    raise InputProblem(
                        f"{path}: member {info.filename} declares shape {shape} ({declared} "
                        f"bytes) but holds {info.file_size - offset} bytes; not read")
                out[info.filename[:-4]] = (shape, dtype)
    except FileNotFoundError:
        raise InputProblem(f"{path} is missing") from None
    except (OSError, ValueError, EOFError, RuntimeError,  # encrypted, unknown compression
            zipfile.BadZipFile) as err:
        raise InputProblem(f"{path}: not a model's arrays ({err})") from None
    return out


def npz_arrays(path: Path, expected: dict[str, tuple[int, ...]],
               optional: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The arrays of ``path`` as floats, each of the shape ``expected`` says, checked from the
    headers (:func:`npz_headers`) before any is read. A name in ``optional`` may be absent
    when its expected shape holds nothing (it is then empty).

    Raises:
        InputProblem: a missing, unexpected or misshapen member, naming ``path``.
    """
    import math
    import zipfile

    import numpy as np

    headers = npz_headers(path)
    unexpected = sorted(set(headers) - set(expected))
    if unexpected:
        raise InputProblem(f"{path}: unexpected member {unexpected[0]}.npy")
    for name, (declared, _) in headers.items():  # the largest problem is named first
        if math.prod(declared) > math.prod(expected[name]):
            raise InputProblem(f"{path}: member {name}.npy is larger than the model's shapes "
                               f"allow (shape {declared}, expected {expected[name]}); not read")
    for name, shape in expected.items():
        if name not in headers and not (name in optional and not math.prod(shape)):
            raise InputProblem(f"{path}: lacks the array {name!r}")
        if name in headers and headers[name][0] != shape:
            raise InputProblem(f"{path}: member {name}.npy has shape {headers[name][0]}, "
                               f"expected {shape}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: np.asarray(data[name], dtype=float) for name in headers}
    except (OSError, ValueError, EOFError, RuntimeError,  # encrypted, unknown compression
            zipfile.BadZipFile) as err:
        raise InputProblem(f"{path}: not a model's arrays ({type(err).__name__}: "
                           f"{err})") from None
    return {name: arrays.get(name, np.zeros(shape)) for name, shape in expected.items()}


def check_values(path: Path, arrays: dict[str, np.ndarray],
                 limits: dict[str, tuple[float, float]]) -> None:
    """Every value of each named array finite and within its ``(low, high)``.

    Raises:
        InputProblem: naming ``path``, the array and a value outside.
    """
    import numpy as np

    for name, (low, high) in limits.items():
        values = arrays[name].ravel()
        bad = ~(np.isfinite(values) & (values >= low) & (values <= high))
        if bad.any():
            raise InputProblem(f"{path}: '{name}' holds {values[bad][0]!r}; its values must "
                               f"be finite, from {low:g} to {high:g}")


STRUCTURED_LIMITS = {"coef": (-MAX_WEIGHT, MAX_WEIGHT), "intercept": (-MAX_WEIGHT, MAX_WEIGHT),
                     "means": (-MAX_CENTRE, MAX_CENTRE), "scales": SCALE_RANGE,
                     "emb_mean": (-MAX_CENTRE, MAX_CENTRE),
                     "emb_components": (-MAX_WEIGHT, MAX_WEIGHT),
                     "ratios": (-MAX_WEIGHT, MAX_WEIGHT),
                     "text_means": (-MAX_CENTRE, MAX_CENTRE), "text_scales": SCALE_RANGE}
"""What each array of ``structured.npz`` may hold."""


def known_feature_names(setting: str) -> set[str]:
    """The feature columns :func:`prm.data.features.step_features` computes in ``setting`` (read
    off a one-turn frame: the names do not depend on the data)."""
    import pandas as pd

    from prm.data.features import FRAME_COLUMNS, step_features

    turn = {"traj_id": "a", "run": "r", "task_id": "q", "t": 1, "n_turns": 1, "success": 1.0,
            "success_turn": float("nan"), "action": "", "observation": "", "is_tool": False,
            "is_error": False, "error_kind": None, "speaker": ""}
    frame = pd.DataFrame({k: [v] for k, v in turn.items()})[list(FRAME_COLUMNS)]
    return set(step_features(frame, setting).names)


def _number(v: Any, low: float, high: float) -> bool:
    import math

    return (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            and low <= v <= high)


def _structured_checks(record: dict[str, Any]) -> dict[str, Any]:
    """Field name -> whether its value is usable (``structured.json``)."""
    from prm.data.features import SETTINGS
    from prm.data.labels import LABEL_SOURCES, RECOVERY_BASES
    from prm.spec import NEVER_AN_ERROR

    return {
        "version": lambda v: v in (1, 2, VERSION),
        "setting": lambda v: v in SETTINGS,
        "head": lambda v: v in ("binary", "ternary"),
        "classes": lambda v: v == ([-1.0, 0.0, 1.0] if record.get("head") == "ternary"
                                   else [-1.0, 1.0]),
        "feature_names": lambda v: isinstance(v, list) and v and all(
            isinstance(x, str) for x in v) and len(set(v)) == len(v),
        "C": lambda v: _number(v, 1e-12, 1e12),
        "error_threshold": lambda v: _number(v, 0.0, 1.0) or v == NEVER_AN_ERROR,
        "first_error_threshold": lambda v: _number(v, 0.0, 1.0) or v == NEVER_AN_ERROR,
        "embeddings": lambda v: isinstance(v, list) and len(v) == 2 and all(
            isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)
        and v[0] <= v[1] <= MAX_EMBEDDING_WIDTH and (v[0] > 0) == (v[1] > 0),
        "text": lambda v: isinstance(v, bool),
        "call_failed_last": lambda v: isinstance(v, bool) and (
            not v or record.get("setting") == "hindsight"),
        "call_neutral": lambda v: isinstance(v, bool) and (
            not v or record.get("head") == "ternary"),
        "labels": lambda v: v is None or v in LABEL_SOURCES,
        "label_base": lambda v: v is None or v in RECOVERY_BASES,
    }


def check_structured_record(record: Any, path: Path) -> None:
    """Every field of ``structured.json``: its type and range, named when wrong; the feature
    names must be ones the featuriser computes in the folder's setting.

    Raises:
        InputProblem: naming ``path`` and the field.
    """

    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise InputProblem(f"{path}: not a structured PRM (no 'format': {FORMAT!r})")
    if record.get("version") == 1 and "text" not in record:
        record["text"] = False  # written before the text scores existed: none
    if record.get("version") in (1, 2):  # written before these choices: the threshold decides
        record.setdefault("call_failed_last", False)
        record.setdefault("call_neutral", record.get("head") == "ternary")
    for name, ok in _structured_checks(record).items():
        optional = name in ("labels", "label_base", "first_error_threshold")
        if (name not in record and not optional) or not ok(record.get(name)):
            raise InputProblem(f"{path}: field '{name}' is missing or not usable "
                               f"({str(record.get(name))[:80]})")
    known = known_feature_names(record["setting"])
    unknown = [n for n in record["feature_names"] if n not in known]
    if unknown:
        raise InputProblem(f"{path}: feature {unknown[0][:80]!r} is not one the structured "
                           f"model computes in the {record['setting']} setting")


def structured_shapes(record: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shape of each array of ``structured.npz``, from a checked record."""

    n_pc, width = record["embeddings"]
    d = len(record["feature_names"]) + n_pc
    k = 3 if record["head"] == "ternary" else 1
    n_scores, n_ratios = (2 * TEXT_FIELDS, TEXT_WIDTH) if record["text"] else (0, 0)
    return {"coef": (k, d + n_scores), "intercept": (k,), "means": (d,), "scales": (d,),
            "emb_mean": (width,), "emb_components": (n_pc, width), "ratios": (n_ratios,),
            "text_means": (n_scores,), "text_scales": (n_scores,)}
