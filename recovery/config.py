"""Option fields with help text, for the dataclass behind each command (no click here).

Each command's options are a dataclass whose fields carry their help text, as TRL's configs do.
Python users fill the dataclass and call the library function; the command line
(:mod:`agent_recovery_cli.recovery.options`) turns the same fields into click options. Keeping the field
helper here means a library module can declare its options without importing click.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack


class CliSpec(TypedDict, total=False):
    """How an :func:`opt` field shows on the command line (every key optional)."""

    flag: str | None
    """The option's name (default: ``--field-name``); ``--x/--no-x`` for a switch."""
    short: str | None
    """A one-letter alias such as ``-o``."""
    choices: tuple[str, ...] | None
    """Allowed values."""
    argument: bool
    """A positional argument instead of an option (lists take any number)."""
    required: bool
    """The option must be given."""


def opt(
    default: Any = None,
    help: str = "",
    *,
    default_factory: Callable[[], Any] | None = None,
    **cli: Unpack[CliSpec],
) -> Any:
    """A dataclass field that is also a command-line option: ``default`` (or
    ``default_factory``, for a mutable default), the ``help`` text shown by ``--help``, and
    how it shows on the command line (:class:`CliSpec`)."""
    unknown = set(cli) - set(CliSpec.__annotations__)
    if unknown:
        raise TypeError(f"opt() got unexpected keyword arguments {sorted(unknown)}")
    metadata = {
        "help": help,
        "flag": cli.get("flag"),
        "short": cli.get("short"),
        "choices": cli.get("choices"),
        "argument": cli.get("argument", False),
        "required": cli.get("required", False),
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


def need(help: str) -> Any:
    """A required dataclass field (no default) carrying its ``help`` text in the metadata
    :func:`opt` writes: for options dataclasses that the command line does not build."""
    return dataclasses.field(metadata={"help": help, "flag": None, "short": None,
                                       "choices": None, "argument": False, "required": True})
