"""Every command's options dataclass holds Python callers to the values the command line
allows: a field with ``choices`` refuses any other value when the config is made."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

from recovery.config import CheckedOptions
from recovery.errors import UsageProblem
from tests.test_layers import library_modules

CLI_MODULES = ("agent_recovery_cli.recovery.sql", "agent_recovery_cli.recovery.graph", "agent_recovery_cli.recovery.mark",
               "agent_recovery_cli.recovery.ingest", "agent_recovery_cli.recovery.export", "agent_recovery_cli.recovery.simulate",
               "agent_recovery_cli.prm.evaluate", "agent_recovery_cli.prm.score", "agent_recovery_cli.prm.export_trl")


def configs_with_choices() -> list[type]:
    found = {}
    for name in (*library_modules(), *CLI_MODULES):
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if dataclasses.is_dataclass(cls) and any(
                f.metadata.get("choices") for f in dataclasses.fields(cls)
            ):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[k] for k in sorted(found)]


CONFIGS = configs_with_choices()


def test_the_configs_were_found() -> None:
    names = {cls.__name__ for cls in CONFIGS}
    assert {"AnalyzeConfig", "TrainConfig", "PlanConfig", "SqlConfig"} <= names


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda cls: cls.__name__)
def test_a_value_outside_the_choices_is_refused(cls: type) -> None:
    assert issubclass(cls, CheckedOptions)
    required = {f.name: [] if f.metadata.get("argument") else "x"
                for f in dataclasses.fields(cls) if f.metadata.get("required")}
    cls(**required)  # the defaults are allowed values
    for f in dataclasses.fields(cls):
        if not f.metadata.get("choices"):
            continue
        default = getattr(cls(**required), f.name)
        bad = ["no such value"] if isinstance(default, list) else "no such value"
        with pytest.raises(UsageProblem, match="is not one of"):
            cls(**required, **{f.name: bad})
