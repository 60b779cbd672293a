"""The toolkit's own files (rule files, simulator configs, manifests) are read strictly: deep
nesting, keys twice, a FIFO, an oversized file and out-of-range rule numbers are one line
naming the file, never a RecursionError, a hang or a DuckDB error."""

from __future__ import annotations

import os
import threading
import time

import pytest

from recovery.errors import InputProblem, UsageProblem
from recovery.marking.rules import RuleError, load_rules
from recovery.ownfiles import parse_own_toml, read_own_json, read_own_toml
from recovery.simulate import load_config
from tests.cli_support import canonical_store, run_cli

DEEP = 100_000

DEEP_TOML = {
    "inline-array": "x = " + "[" * DEEP + "]" * DEEP + "\n",
    "inline-table": "x = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n",
    "dotted-key": "x" + ".a" * DEEP + " = 1\n",
    "table-header": "[" + ".".join(["a"] * DEEP) + "]\n",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return canonical_store(tmp_path_factory.mktemp("store"))


def _usage_line(result) -> str:
    """The one ``Error:`` line of a usage error (click prints the usage and a hint too)."""
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error")]
    return line


# --------------------------------------------------------------------------------------------
# The reader itself


@pytest.mark.parametrize("name", sorted(DEEP_TOML))
def test_deep_toml_is_one_problem_and_quick(tmp_path, name):
    path = tmp_path / "deep.toml"
    path.write_text(DEEP_TOML[name])
    began = time.perf_counter()
    with pytest.raises(InputProblem, match="nested more than 256 levels") as info:
        read_own_toml(path, "rules file")
    assert str(path) in str(info.value)
    assert time.perf_counter() - began < 5  # tomllib's dotted keys take quadratic time


def test_toml_at_the_depth_limit_is_read():
    assert parse_own_toml("x" + ".a" * 200 + " = 1\n", "f.toml")["x"]["a"]["a"]
    floats = "x = [" + ", ".join(f"{i}.5" for i in range(1000)) + "]\n"
    assert len(parse_own_toml(floats, "f.toml")["x"]) == 1000  # many dots, no depth


def test_an_integer_of_thousands_of_digits_is_one_problem(tmp_path):
    path = tmp_path / "long.toml"
    path.write_text("seed = " + "9" * 5000 + "\n")
    with pytest.raises(InputProblem, match="too many digits") as info:
        read_own_toml(path, "simulator config")
    assert str(path) in str(info.value)
    path.write_text(_rule("meta[" + "9" * 5000 + "]"))
    with pytest.raises(RuleError, match="index of 5000 digits is out of range"):
        load_rules(path)


def test_deep_json_and_keys_twice_are_one_problem(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * DEEP + "]" * DEEP)
    with pytest.raises(InputProblem, match="deep") as info:
        read_own_json(deep, "config")
    assert str(deep) in str(info.value)
    twice = tmp_path / "twice.json"
    twice.write_text('{"seed": 1, "seed": 2}')
    with pytest.raises(InputProblem, match="seed") as info:
        read_own_json(twice, "config")
    assert str(twice) in str(info.value)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "rules.toml"
    os.mkfifo(fifo)
    caught: list[BaseException] = []

    def read() -> None:
        try:
            read_own_toml(fifo, "rules file")
        except InputProblem as err:
            caught.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert caught and "not a regular file" in str(caught[0]) and str(fifo) in str(caught[0])


def test_the_size_limit(tmp_path):
    path = tmp_path / "big.json"
    path.write_text('{"a": "' + "x" * 100 + '"}')
    with pytest.raises(InputProblem, match="the limit is 64") as info:
        read_own_json(path, "manifest", max_bytes=64)
    assert str(path) in str(info.value)
    assert read_own_json(path, "manifest", max_bytes=1000)["a"] == "x" * 100


# --------------------------------------------------------------------------------------------
# Rule files


def _rule(field: str, predicate: str = "exists = true") -> str:
    return f'[[rule]]\nname = "r"\nkind = "x"\nfield = "{field}"\n{predicate}\n'


@pytest.mark.parametrize("name", ["inline-array", "dotted-key"])
def test_a_deep_rules_file_is_a_rule_error(store, tmp_path, name):
    path = tmp_path / "rules.toml"
    path.write_text(DEEP_TOML[name])
    with pytest.raises(RuleError, match="nested more than") as info:
        load_rules(path)
    assert str(path) in str(info.value)
    result = run_cli("mark", "--store", store, "--rules", path)
    assert result.exit_code == 2 and str(path) in _usage_line(result)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (_rule(f"meta.a[{2**63}]"), "index"),
        (_rule(f"meta[{2**64}].a"), "index"),
        (_rule(f"observation_json[{-2**63 - 1}]"), "index"),
        (_rule(f"meta[{2**31}]"), "index"),
        (_rule(f"meta[{-2**31 - 1}]"), "index"),
        (_rule("reward", f"lt = {10**400}"), "'lt'"),
        (_rule("reward", f"gt = {-10**400}"), "'gt'"),
        (_rule("reward", f"equals = {10**400}"), "'equals'"),
    ],
    ids=["2^63", "2^64", "-2^63-1", "2^31", "-2^31-1", "lt-huge", "gt-huge", "equals-huge"],
)
def test_rule_numbers_that_reach_sql_are_bounded(store, tmp_path, text, fragment):
    path = tmp_path / "rules.toml"
    path.write_text(text)
    with pytest.raises(RuleError) as info:
        load_rules(path)
    message = str(info.value)
    assert str(path) in message and "rule 1 ('r')" in message and fragment in message
    result = run_cli("mark", "--store", store, "--rules", path)
    assert result.exit_code == 2 and "rule 1 ('r')" in _usage_line(result)


@pytest.mark.parametrize("index", [2**31 - 1, -2**31, 0, -1])
def test_rule_indices_in_range_mark_the_store(store, tmp_path, index):
    path = tmp_path / "rules.toml"
    path.write_text(_rule(f"meta.items[{index}]"))
    assert load_rules(path).rules[0].field == f"meta.items[{index}]"
    result = run_cli("mark", "--store", store, "--rules", path)
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------------------------
# Simulator configs


@pytest.mark.parametrize(
    ("suffix", "text"),
    [(".toml", DEEP_TOML["inline-table"]), (".toml", DEEP_TOML["dotted-key"]),
     (".json", '{"tasks": ' + "[" * DEEP + "]" * DEEP + "}"),
     (".json", '{"seed": 1, "seed": 2}')],
    ids=["toml-inline", "toml-dotted", "json-deep", "json-key-twice"],
)
def test_bad_simulator_configs_are_usage_problems(tmp_path, suffix, text):
    path = tmp_path / f"sim{suffix}"
    path.write_text(text)
    with pytest.raises(UsageProblem) as info:
        load_config(path)
    assert str(path) in str(info.value)
    out = tmp_path / "out"
    result = run_cli("simulate", "--config", path, "--out", out)
    assert result.exit_code == 2 and str(path) in _usage_line(result)
    assert not out.exists()


def test_packaged_presets_and_builtin_rules_still_load():
    from recovery.marking.rules import _builtin_rules
    from recovery.simulate.config import PRESETS_DIR

    presets = sorted(PRESETS_DIR.glob("*.toml"))
    assert len(presets) >= 4
    for preset in presets:
        assert load_config(preset.stem).policies
    _builtin_rules.cache_clear()
    assert len(_builtin_rules()) > 10
