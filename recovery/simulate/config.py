"""Simulator configs from TOML files and dicts (``recovery simulate --config``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recovery.errors import UsageProblem
from recovery.simulate.params import PRESETS, PolicyParams, SimConfig, TaskParams

# --------------------------------------------------------------------------------------------
# Config files.

PRESETS_DIR = Path(__file__).parents[1] / "presets"
"""Packaged example configs (``recovery simulate --config NAME`` finds ``NAME.toml`` here)."""

MAX_CONFIG_BYTES = 1024 * 1024
"""Largest simulator config read (the packaged ones are under a kilobyte)."""

_POLICY_FIELDS = {f.name for f in dataclasses.fields(PolicyParams)}
_TASK_FIELDS = {f.name for f in dataclasses.fields(TaskParams)}
_CONFIG_FIELDS = {"policies", "n_tasks", "n_samples", "budgets", "seed", "tasks", "mc_rollouts"}


def policy_from_dict(data: Mapping[str, Any], where: str = "policy") -> PolicyParams:
    """A :class:`PolicyParams` from a mapping of its field names.

    ``preset = "base"`` starts from a preset; the other keys replace its fields.

    Raises:
        UsageProblem: naming an unknown key or preset, or a bad value.
    """
    values = dict(data)
    preset = values.pop("preset", None)
    unknown = sorted(set(values) - _POLICY_FIELDS)
    if unknown:
        raise UsageProblem(
            f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_POLICY_FIELDS))}"
        )
    if preset is not None and preset not in PRESETS:
        raise UsageProblem(f"{where}: unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    if "kind_weights" in values:
        values["kind_weights"] = tuple(values["kind_weights"])
    start = PRESETS[preset] if preset is not None else PolicyParams()
    try:
        return dataclasses.replace(start, **values)
    except (TypeError, ValueError) as err:
        raise UsageProblem(f"{where}: {err}") from None


def config_from_dict(data: Mapping[str, Any], where: str = "config") -> SimConfig:
    """A :class:`SimConfig` from a mapping (the parsed TOML or JSON of a config file).

    Keys: ``policies`` (name -> policy fields, optionally ``preset``), ``tasks`` (TaskParams
    fields), ``n_tasks``, ``n_samples``, ``budgets``, ``seed``; all optional.

    Raises:
        UsageProblem: naming an unknown key, or a bad value and where it is.
    """
    unknown = sorted(set(data) - _CONFIG_FIELDS)
    if unknown:
        raise UsageProblem(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_CONFIG_FIELDS))}"
        )
    kwargs: dict[str, Any] = {k: data[k]
                              for k in ("n_tasks", "n_samples", "budgets", "seed", "mc_rollouts")
                              if k in data}
    if "policies" in data:
        policies = data["policies"]
        if not isinstance(policies, Mapping):
            raise UsageProblem(f"{where}: 'policies' must be a table of policy tables")
        kwargs["policies"] = {
            str(name): policy_from_dict(p, f"{where}: policies.{name}")
            for name, p in policies.items()
        }
    if "tasks" in data:
        tasks = dict(data["tasks"])
        bad = sorted(set(tasks) - _TASK_FIELDS)
        if bad:
            raise UsageProblem(
                f"{where}: tasks: unknown field(s) {', '.join(bad)}; known: {', '.join(sorted(_TASK_FIELDS))}"
            )
        if "domains" in tasks:
            tasks["domains"] = tuple(tasks["domains"])
        try:
            kwargs["tasks"] = TaskParams(**tasks)
        except (TypeError, ValueError) as err:
            raise UsageProblem(f"{where}: tasks: {err}") from None
    try:
        return SimConfig(**kwargs)
    except (TypeError, ValueError) as err:
        raise UsageProblem(f"{where}: {err}") from None


def resolve_config_path(path: str | Path) -> Path:
    """``path`` itself when it exists, else the packaged preset config ``presets/<path>.toml``."""
    candidate = Path(path)
    if candidate.exists():
        return candidate
    packaged = PRESETS_DIR / f"{candidate.name}.toml"
    if candidate.suffix == "" and packaged.exists():
        return packaged
    known = ", ".join(sorted(p.stem for p in PRESETS_DIR.glob("*.toml")))
    raise FileNotFoundError(f"{path}: no such file (packaged configs: {known})")


def load_config(path: str | Path) -> SimConfig:
    """Read a simulator config from a TOML or JSON file (or a packaged config by name).

    Example file (TOML)::

        seed = 0
        budgets = [10, 20, 40]
        [tasks]
        error_spread = 0.0
        [policies.base]
        preset = "base"
        [policies.careful]
        preset = "base"
        p_recover = 0.7

    Raises:
        FileNotFoundError: when the file does not exist.
        UsageProblem: naming the file and the bad key or value (or that it is not UTF-8,
            TOML or JSON, has a key twice, is nested too deep or is too large).
    """
    from recovery.errors import InputProblem
    from recovery.ownfiles import read_own_json, read_own_toml

    resolved = resolve_config_path(path)
    read = read_own_json if resolved.suffix == ".json" else read_own_toml
    try:
        # strict and bounded: not UTF-8, malformed, a key twice, too deep, too large, a FIFO
        data = read(resolved, "simulator config", max_bytes=MAX_CONFIG_BYTES)
    except InputProblem as err:  # a file named by --config: a usage problem (exit 2)
        raise UsageProblem(str(err)) from None
    if not isinstance(data, dict):
        raise UsageProblem(f"{resolved}: expected a table/object at the top level")
    return config_from_dict(data, str(resolved))
