"""Reading one field of the data: coercion to the type the record keeps, with a message that
names the field and the expected type (:class:`recovery.schema.RecordError`) when it does not
fit."""

from __future__ import annotations

import math
from typing import Any

from recovery.schema import (
    END_REASONS,
    EXPLICIT_ERROR_KIND,
    MAX_STORED_INT,
    RecordError,
    compact_json,
    type_name,
)


def as_text(value: Any) -> str:
    """Render an action/observation as text: strings as they are, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return compact_json(value)


def coerce_task_id(value: Any, where: str = "task_id") -> str:
    """Task ids are strings; ints are converted. Anything else is an error."""
    if isinstance(value, bool) or value is None:
        raise RecordError(f"field '{where}': expected string or integer, got {type_name(value)}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if not value:
            raise RecordError(f"field '{where}': expected a non-empty string")
        return value
    raise RecordError(f"field '{where}': expected string or integer, got {type_name(value)}")


def coerce_optional_int(value: Any, where: str) -> int | None:
    """An optional non-negative integer that fits the store's INTEGER columns.

    Floats with an integral value are accepted.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise RecordError(f"field '{where}': expected integer, got bool")
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise RecordError(f"field '{where}': expected integer, got {type_name(value)}")
    if value < 0:
        raise RecordError(f"field '{where}': expected a non-negative integer, got {value}")
    if value > MAX_STORED_INT:
        raise RecordError(
            f"field '{where}': {value} is out of range (at most {MAX_STORED_INT})"
        )
    return value


def coerce_optional_float(value: Any, where: str) -> float | None:
    """An optional finite number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError(f"field '{where}': expected number, got {type_name(value)}")
    try:
        value = float(value)
    except OverflowError:
        raise RecordError(f"field '{where}': {value} is out of the range of a double") from None
    if not math.isfinite(value):
        raise RecordError(f"field '{where}': expected a finite number, got {value}")
    return value


def coerce_label(value: Any, where: str) -> float | None:
    """A process label in [-1, 1] (a Monte Carlo value v in [0, 1] is stored as 2v - 1)."""
    label = coerce_optional_float(value, where)
    if label is not None and not -1.0 <= label <= 1.0:
        raise RecordError(f"field '{where}': expected a label in [-1, 1], got {label}")
    return label


def coerce_error(value: Any, where: str) -> str | None:
    """An explicit error mark: a kind name, ``true`` (kind ``explicit``), or false/null."""
    if value is None or value is False:
        return None
    if value is True:
        return EXPLICIT_ERROR_KIND
    if isinstance(value, str):
        return value or None
    raise RecordError(f"field '{where}': expected string, boolean or null, got {type_name(value)}")


def coerce_meta(value: Any, where: str) -> dict[str, Any]:
    """Optional object."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecordError(f"field '{where}': expected object, got {type_name(value)}")
    return value


def coerce_end_reason(value: Any, where: str = "end_reason") -> str | None:
    """An optional end reason: one of :data:`END_REASONS`, or null."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in END_REASONS:
        raise RecordError(
            f"field '{where}': expected one of {', '.join(END_REASONS)} or null, got {value!r}"
        )
    return value

