"""One dataclass per command's options, turned into click options.

Each command's options are a dataclass whose fields carry their help text (declared with
:func:`recovery.config.opt`, which needs no click); :func:`command_options` turns the fields
into click arguments and options and hands the command one filled-in config object. The same
dataclass is what Python users pass to the library function behind the command.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from recovery.config import opt
from recovery.display import printable
from recovery.errors import Problem, UsageProblem

__all__ = ["CommaList", "command_options", "opt"]


class CommaList(click.ParamType):
    """``5,10,20`` -> ``[5, 10, 20]`` (items converted with ``item_type``)."""

    name = "list"

    def __init__(self, item_type: type):
        self.item_type = item_type

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, list):
            return value
        items = [v.strip() for v in str(value).split(",") if v.strip()]
        try:
            return [self.item_type(v) for v in items]
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of {self.item_type.__name__}")


def _unwrap_optional(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _click_type(tp: Any, choices: tuple[str, ...] | None) -> Any:
    tp = _unwrap_optional(tp)
    if choices:
        return click.Choice(list(choices))
    if typing.get_origin(tp) in (list, tuple):
        (item,) = typing.get_args(tp)[:1]
        return CommaList(_unwrap_optional(item))
    if tp is Path:
        return click.Path(path_type=Path)
    if tp in (int, float, str):
        return tp
    return str


def command_options(config_cls: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a click command so that it receives one ``config_cls`` instance.

    The command function is called as ``fn(config)``. This is where the command line turns a
    :class:`recovery.errors.Problem` into one line without a traceback: a
    :class:`recovery.errors.UsageProblem` is reported as a usage error (exit 2), any other
    problem (an :class:`recovery.errors.InputProblem`, say) as an error (exit 1). Every other
    exception is a bug and propagates with its traceback.
    """
    hints = typing.get_type_hints(config_cls)
    fields = [f for f in dataclasses.fields(config_cls) if f.metadata.get("help") is not None]

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(**kwargs: Any) -> Any:
            values = {}
            for f in fields:
                key = f.name
                if key not in kwargs:
                    continue
                value = kwargs[key]
                if f.metadata["argument"] and isinstance(value, tuple):
                    value = list(value)
                values[key] = value
            try:
                return fn(config_cls(**values))
            except UsageProblem as err:
                raise click.UsageError(printable(str(err), keep_newlines=True)) from None
            except Problem as err:
                raise click.ClickException(printable(str(err), keep_newlines=True)) from None

        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        for f in reversed(fields):
            meta = f.metadata
            tp = hints[f.name]
            if meta["argument"]:
                is_list = typing.get_origin(_unwrap_optional(tp)) is list
                item = typing.get_args(_unwrap_optional(tp))[0] if is_list else tp
                wrapper = click.argument(
                    f.name,
                    nargs=-1 if is_list else 1,
                    type=click.Path(path_type=Path) if item is Path else None,
                    required=meta["required"],
                )(wrapper)
                continue
            names = [meta["flag"] or "--" + f.name.replace("_", "-")]
            if meta["short"]:
                names.append(meta["short"])
            default = (
                f.default_factory()  # type: ignore[misc]
                if f.default_factory is not dataclasses.MISSING
                else f.default
            )
            if _unwrap_optional(tp) is bool:
                wrapper = click.option(
                    *names, f.name, is_flag=True, default=default, help=meta["help"]
                )(wrapper)
            else:
                # click >= 8.3 treats an explicit default=None as a given value, so a required
                # option must get no default at all or a missing one is never reported.
                default_kwargs = {} if meta["required"] else {"default": default}
                wrapper = click.option(
                    *names,
                    f.name,
                    type=_click_type(tp, meta["choices"]),
                    required=meta["required"],
                    show_default=default is not None and default != [],
                    help=meta["help"],
                    **default_kwargs,
                )(wrapper)
        return wrapper

    return decorate
