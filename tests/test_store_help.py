"""Every command that takes --store says that a store is a DuckDB file or a folder of Parquet
files (a folder works everywhere a file does)."""

from __future__ import annotations

import click
import pytest


def commands_with_store() -> list[tuple[str, click.Command]]:
    from agent_recovery_cli.prm import main as prm_main
    from agent_recovery_cli.recovery import main as recovery_main

    found = []

    def walk(prefix: str, command: click.Command) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(click.Context(command)):
                walk(f"{prefix} {name}", command.get_command(click.Context(command), name))
        elif any("--store" in p.opts for p in command.params):
            found.append((prefix, command))

    walk("recovery", recovery_main)
    walk("prm", prm_main)
    return found


def test_the_commands_were_found() -> None:
    names = {name for name, _ in commands_with_store()}
    assert {"recovery sql", "recovery graph", "recovery export parquet", "prm train", "prm cv",
            "recovery budgetmix plan", "recovery budgetmix rewards"} <= names


@pytest.mark.parametrize("name, command", commands_with_store(), ids=lambda x: str(x))
def test_store_help_names_both_kinds(name: str, command: click.Command) -> None:
    (option,) = [p for p in command.params if "--store" in p.opts]
    text = " ".join(option.help.split())
    assert "DuckDB store" not in text, name
    assert "DuckDB file" in text and ("Parquet folder" in text
                                      or "folder of Parquet files" in text), (name, text)
