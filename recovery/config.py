"""Option fields with help text, for the dataclass behind each command (no click here).

Each command's options are a dataclass whose fields carry their help text, as TRL's configs do.
Python users fill the dataclass and call the library function; the command line
(:mod:`recovery.cli.options`) turns the same fields into click options. Keeping the field
helper here means a library module can declare its options without importing click.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


def opt(
    default: Any = None,
    help: str = "",
    *,
    flag: str | None = None,
    short: str | None = None,
    choices: tuple[str, ...] | None = None,
    argument: bool = False,
    required: bool = False,
    default_factory: Callable[[], Any] | None = None,
) -> Any:
    """A dataclass field that is also a command-line option.

    Args:
        default: Default value.
        help: Help text shown by ``--help``.
        flag: The option's name (default: ``--field-name``); ``--x/--no-x`` for a switch.
        short: A one-letter alias such as ``-o``.
        choices: Allowed values.
        argument: A positional argument instead of an option (lists take any number).
        required: The option must be given.
        default_factory: For mutable defaults.
    """
    metadata = {
        "help": help,
        "flag": flag,
        "short": short,
        "choices": choices,
        "argument": argument,
        "required": required,
    }
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)
