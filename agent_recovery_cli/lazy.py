"""A click group that imports a subcommand's module only when that subcommand runs.

Keeps ``recovery --help`` fast and lets each subcommand live in its own module.
"""

from __future__ import annotations

import importlib
import importlib.util

import click


class LazyGroup(click.Group):
    """Subcommands given as ``{"name": "package.module:attribute"}``."""

    def __init__(
        self, *args: object, lazy_commands: dict[str, str] | None = None, **kwargs: object
    ):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        present = {
            name
            for name, target in self.lazy_commands.items()
            if importlib.util.find_spec(target.split(":")[0]) is not None
        }
        return sorted(set(super().list_commands(ctx)) | present)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands:
            module_name, attribute = self.lazy_commands[cmd_name].split(":")
            return getattr(importlib.import_module(module_name), attribute)
        return super().get_command(ctx, cmd_name)
