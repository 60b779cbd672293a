"""How the report writes numbers and turn limits: one set of formatters for every output.

The terminal, the HTML page and the plots all call these, so a number reads the same wherever
it appears: ``-`` for a missing value, no ``-0.000``, ``no limit`` for T = infinity.
"""

from __future__ import annotations

import math

NO_LIMIT = "no limit"
"""How a turn limit of infinity (``None``) is written."""

MISSING = "-"
"""How a missing (NaN) number is written."""


def t_label(t: int | None) -> str:
    """A turn limit as a bare label: ``"10"`` or ``"no limit"``."""
    return NO_LIMIT if t is None else str(t)


def t_header(t: int | None) -> str:
    """A turn limit as a column header: ``"T=10"`` or ``"no limit"``."""
    return NO_LIMIT if t is None else f"T={t}"


def number(value: float | None, digits: int = 3, *, signed: bool = False) -> str:
    """``0.427``; ``+0.031`` when ``signed``; :data:`MISSING` for NaN; never ``-0.000``."""
    if value is None or not math.isfinite(value):
        return MISSING
    if round(value, digits) == 0:
        value = 0.0
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def percent(value: float | None, digits: int = 1) -> str:
    """``12.5%``; :data:`MISSING` for NaN."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{100 * value:.{digits}f}%"


def interval(lo: float, hi: float, digits: int = 2, *, signed: bool = False,
             compact: bool = True) -> str:
    """An interval: compact ``.06-.11`` / ``-.01,+.02``, or ``[0.060, 0.110]``; empty
    without bootstrap (NaN ends)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ""
    if not compact:
        return f"[{number(lo, digits, signed=signed)}, {number(hi, digits, signed=signed)}]"
    sep = "," if signed else "-"
    return f"{_short(lo, digits, signed)}{sep}{_short(hi, digits, signed)}"


def _short(value: float, digits: int, signed: bool) -> str:
    text = f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return text.replace("0.", ".", 1)
