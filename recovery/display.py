"""Text made safe to show a person: the one place control characters are escaped.

Run labels, task ids, actions and file names come from files nobody here wrote. Printed as
they are, an escape sequence in one of them can clear the screen, retitle the window or plant
a link (OSC 8) in the terminal; a ``$`` pair in a plot label is parsed as matplotlib mathtext
and can crash the plot. Every place that shows such text to a person calls :func:`printable`
(terminal, CSV and table output) or :func:`plain_label` (plot text).
"""

from __future__ import annotations

import re

# C0 controls except tab and newline, DEL, and the C1 controls (0x80-0x9f: 0x9b is a one-byte
# CSI on terminals that honour 8-bit controls). Also the Unicode line and paragraph separators
# and the bidirectional overrides, which reorder what a reader sees.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_CONTROL_WITH_NEWLINES = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code == 0x0A:
        return "\\n"
    if code == 0x09:
        return "\\t"
    if code == 0x0D:
        return "\\r"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: object, *, keep_newlines: bool = False) -> str:
    """``text`` as a string with every control character written as an escape.

    Args:
        text: any value; non-strings are converted with ``str``.
        keep_newlines: keep newline and tab as they are (for multi-line text such as a
            message); by default they are escaped too, so one value stays on one line.

    Returns:
        The text with ESC, BEL, CR, the C1 controls, DEL, the bidirectional overrides and
        (unless kept) newline and tab replaced by ``\\xNN`` / ``\\n`` / ``\\t`` escapes.
        Ordinary text, including non-ASCII letters, is returned unchanged.
    """
    value = text if isinstance(text, str) else str(text)
    pattern = _CONTROL if keep_newlines else _CONTROL_WITH_NEWLINES
    return pattern.sub(_escape, value)


def plain_label(text: object) -> str:
    """``text`` for a matplotlib label: printable, and never parsed as mathtext.

    matplotlib treats a label holding an even number of unescaped ``$`` as mathtext, which
    renders ``$x$`` as math and raises on an unknown macro such as ``$\\undefinedmacro$``.
    Escaping every ``$`` keeps the label as the plain text it is.
    """
    return printable(text).replace("$", r"\$")
