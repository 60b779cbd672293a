"""Values made ready for strict JSON: the one sanitiser every writer of JSON calls.

JSON has no NaN or infinity and knows nothing of numpy or pandas scalars; reports, schedules,
metrics, graphs and query results all pass through :func:`json_safe` before ``json.dumps(...,
allow_nan=False)``, so no file this toolkit writes ever holds ``NaN`` or ``Infinity``.
"""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path
from typing import Any


def json_safe(value: Any) -> Any:
    """``value`` with NaN/inf/NA as ``None`` and numpy/pandas scalars as Python ones.

    Dicts (keys become strings), lists and tuples are converted recursively; dates and times
    become ISO 8601 text; anything else that is not JSON is returned as it is (``json.dumps``
    then says what it is).
    """
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():  # a numpy scalar
        return json_safe(item())
    if hasattr(value, "tolist") and hasattr(value, "shape"):  # a numpy array
        return json_safe(value.tolist())
    try:
        import pandas as pd

        if value is pd.NA or value is pd.NaT:
            return None
        if isinstance(value, pd.Timestamp):
            return value.isoformat()
    except ImportError:  # pragma: no cover - pandas is a core dependency
        pass
    return value


def dumps(value: Any, *, indent: int | None = None) -> str:
    """Strict JSON text of :func:`json_safe` of ``value`` (never NaN or Infinity)."""
    return json.dumps(json_safe(value), indent=indent, allow_nan=False, ensure_ascii=False)


def write_json(path: str | Path, value: Any, *, indent: int | None = 2) -> Path:
    """Write :func:`dumps` of ``value`` to ``path`` (folders created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(value, indent=indent) + "\n", encoding="utf-8")
    return path
