"""Errors that say the user's input cannot be used, shared by every package.

Library functions raise these (no click here); the command line reports them without a
traceback: :class:`UsageProblem` as a usage error (exit status 2), :class:`InputProblem` as an
error (exit status 1).
"""

from __future__ import annotations


class UsageProblem(ValueError):
    """An option or a file named by one (a rule file, a model folder) cannot be used.

    The message says what is wrong and names the file, the option or the flag that fixes it.
    """


class InputProblem(ValueError):
    """Data or a store that cannot be read as asked; the message names the file."""
