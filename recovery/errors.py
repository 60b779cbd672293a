"""Errors that say the user's input cannot be used, shared by every package.

Every problem the user can fix derives from :class:`Problem`: bad input, bad options, a store
that cannot be used. Library functions raise these (no click here); the command line reports
them on one line without a traceback: a :class:`UsageProblem` as a usage error (exit status
2), any other :class:`Problem` (an :class:`InputProblem`, say) as an error (exit status 1).
Every other exception is a bug and keeps its traceback. A plain :class:`ValueError` stays what
it is in Python: a caller passed a value the function does not take.
"""

from __future__ import annotations

__all__ = ["InputProblem", "Problem", "UsageProblem"]


class Problem(Exception):
    """A problem the user can fix: bad input, bad options, a store that cannot be used.

    Its message is printed on one line without a traceback; it says what is wrong and names
    the file, the option or the flag that fixes it.
    """


class UsageProblem(Problem):
    """An option or a file named by one (a rule file, a model folder) cannot be used.

    The message says what is wrong and names the file, the option or the flag that fixes it.
    """


class InputProblem(Problem):
    """Data or a store that cannot be read as asked; the message names the file."""
