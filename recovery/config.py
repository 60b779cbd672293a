"""Option fields with help text, for the dataclass behind each command (no click here).

Each command's options are a dataclass whose fields carry their help text, as TRL's configs do.
Python users fill the dataclass and call the library function; the command line
(:mod:`agent_recovery_cli.recovery.options`) turns the same fields into click options. Keeping the field
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


def check_choices(config: Any) -> None:
    """Refuse a value outside an option's ``choices`` (each item, for a list), as the command
    line does, so that a config made in Python is held to the same values.

    Raises:
        UsageProblem: naming the option, the value and the allowed ones.
    """
    from recovery.errors import UsageProblem

    for f in dataclasses.fields(config):
        choices = f.metadata.get("choices")
        if not choices:
            continue
        value = getattr(config, f.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        bad = [v for v in values if v is not None and v not in choices]
        if bad:
            flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
            raise UsageProblem(f"{flag.split('/')[0]}: {bad[0]!r} is not one of "
                               f"{', '.join(map(str, choices))}")


class CheckedOptions:
    """Base of a command's options dataclass: its ``choices`` are checked when it is made
    (:func:`check_choices`); a subclass with a ``__post_init__`` of its own calls this one."""

    def __post_init__(self) -> None:
        check_choices(self)
