"""The simulator (DESIGN 9): rates, shared tasks, determinism, budgets, ground truth, text.

Rates are checked on the written JSONL files against the configured probabilities with
tolerances of ``Z`` binomial standard errors at the sample size of each check.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from recovery.errors import UsageProblem
from recovery.simulate import (
    NORMAL_TEXT_FORBIDDEN,
    PRESETS,
    VISIBLE_ERROR_PATTERNS,
    VISIBLE_ERROR_TEMPLATES,
    VISIBLE_KINDS,
    PolicyParams,
    SimConfig,
    TaskParams,
    load_config,
    simulate,
    turn_probabilities,
    write_runs,
)

Z = 4.5
FLAT = TaskParams(error_spread=0.0, progress_spread=0.0)
POLICY_A = PolicyParams(
    p_progress=0.45, p_error=0.2, p_silent=0.3, p_recover=0.4, p_fatal=0.15,
    kind_weights=(0.5, 0.3, 0.2),
)
POLICY_B = dataclasses.replace(POLICY_A, p_recover=0.6, p_fatal=0.05)
OUT_OF_SPELL = ("progress", "stall", "error")
IN_SPELL = ("recover", "repeat", "fatal")


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def write_and_read(config: SimConfig, out: Path) -> dict[str, list[dict]]:
    paths = write_runs(config, out)
    assert [p.name for p in paths] == [f"{name}.jsonl" for name in config.policies]
    return {p.stem: read_jsonl(p) for p in paths}


def assert_rate(k: int, n: int, p: float, what: str) -> None:
    """``k`` successes in ``n`` trials agree with probability ``p`` within Z standard errors."""
    assert n > 0, what
    sd = math.sqrt(n * p * (1 - p))
    assert abs(k - n * p) <= Z * sd + 1e-9, f"{what}: {k}/{n} = {k / n:.4f}, expected {p:.4f}"


def all_turns(records: list[dict]):
    for rec in records:
        for t, turn in enumerate(rec["turns"], start=1):
            yield rec, t, turn


@pytest.fixture(scope="module")
def flat_runs(tmp_path_factory) -> dict[str, list[dict]]:
    """Policies A and B (B differs only in recovery) on tasks without modulation."""
    config = SimConfig(
        policies={"a": POLICY_A, "b": POLICY_B}, n_tasks=300, n_samples=6, budgets=[30],
        seed=11, tasks=FLAT,
    )
    return write_and_read(config, tmp_path_factory.mktemp("flat"))


@pytest.fixture(scope="module")
def preset_runs(tmp_path_factory) -> dict[str, list[dict]]:
    """The presets with the default (modulated) tasks, the demo's sizes."""
    config = SimConfig(
        policies={"base": PRESETS["base"], "rl": PRESETS["rl"]}, n_tasks=200, n_samples=8,
        budgets=[40], seed=0,
    )
    return write_and_read(config, tmp_path_factory.mktemp("presets"))


# --------------------------------------------------------------------------------------------
# Rates.


@pytest.mark.parametrize("name,policy", [("a", POLICY_A), ("b", POLICY_B)])
def test_rates_match_configured_probabilities(flat_runs, name, policy):
    events = Counter()
    silent = visible = 0
    kinds = Counter()
    recover_progress = 0
    for _, _, turn in all_turns(flat_runs[name]):
        meta = turn["meta"]
        events[meta["event"]] += 1
        if meta["event"] == "error":
            if meta["true_error"] == "silent":
                silent += 1
            else:
                visible += 1
                kinds[meta["true_kind"]] += 1
        if meta["event"] == "recover":
            recover_progress += meta["progress_after"] > meta["progress_before"]
    at_risk = sum(events[e] for e in OUT_OF_SPELL)
    in_spell = sum(events[e] for e in IN_SPELL)
    assert at_risk > 15_000 and in_spell > 3_000  # enough data for tight checks
    assert_rate(events["progress"], at_risk, policy.p_progress, "progress")
    assert_rate(events["error"], at_risk, policy.p_error, "error")
    assert_rate(silent, silent + visible, policy.p_silent, "silent share of errors")
    total_weight = sum(policy.kind_weights)
    for kind, weight in zip(VISIBLE_KINDS, policy.kind_weights, strict=True):
        assert_rate(kinds[kind], visible, weight / total_weight, f"visible kind {kind}")
    assert_rate(events["recover"], in_spell, policy.p_recover, "recover")
    assert_rate(events["fatal"], in_spell, policy.p_fatal, "fatal")
    q = policy.p_progress / (1 - policy.p_error)
    assert_rate(recover_progress, events["recover"], q, "progress on recovery turns")


def test_task_modulation_matches_expected_per_task_rates(preset_runs):
    tasks = TaskParams()
    for name in ("base", "rl"):
        policy = PRESETS[name]
        observed = Counter()
        expected = Counter()
        variance = Counter()
        errors_by_half = {True: [0, 0], False: [0, 0]}
        for rec, _, turn in all_turns(preset_runs[name]):
            meta = turn["meta"]
            if meta["event"] not in OUT_OF_SPELL:
                continue
            difficulty = rec["meta"]["task"]["difficulty"]
            p_progress, p_error = turn_probabilities(policy, tasks, difficulty)
            for event, p in (("progress", p_progress), ("error", p_error)):
                observed[event] += meta["event"] == event
                expected[event] += p
                variance[event] += p * (1 - p)
            half = errors_by_half[difficulty > 0.5]
            half[0] += meta["event"] == "error"
            half[1] += 1
        for event in ("progress", "error"):
            z = (observed[event] - expected[event]) / math.sqrt(variance[event])
            assert abs(z) < Z, f"{name} {event}: z = {z:.2f}"
        # The modulation is really there: hard tasks make clearly more errors.
        hard = errors_by_half[True][0] / errors_by_half[True][1]
        easy = errors_by_half[False][0] / errors_by_half[False][1]
        assert hard > 1.5 * easy


def test_turn_probabilities_modulation_and_clamp():
    policy = PolicyParams(p_progress=0.6, p_error=0.3)
    tasks = TaskParams(error_spread=1.0, progress_spread=0.5)
    assert turn_probabilities(policy, tasks, 0.5) == pytest.approx((0.6, 0.3))
    assert turn_probabilities(policy, tasks, 0.0) == pytest.approx((0.9, 0.0))
    p_progress, p_error = turn_probabilities(policy, tasks, 1.0)
    assert (p_progress, p_error) == pytest.approx((0.3, 0.6))
    hurried = turn_probabilities(dataclasses.replace(policy, hurry_progress=2, hurry_error=2),
                                 tasks, 0.5, hurry=True)
    assert sum(hurried) == pytest.approx(1.0)  # 1.2 + 0.6 scaled down to sum 1
    assert hurried[0] / hurried[1] == pytest.approx(2.0)


def test_task_lengths_and_difficulties():
    free = simulate(SimConfig(policies={"p": POLICY_A}, n_tasks=400, n_samples=1))["p"]
    lengths = Counter(t.meta["task"]["length"] for t in free)
    assert set(lengths) == set(range(2, 17))  # uniform on [length_min, length_max]
    difficulties = [t.meta["task"]["difficulty"] for t in free]
    assert 0.4 < sum(difficulties) / len(difficulties) < 0.6
    assert all(round(d, 4) == d for d in difficulties)
    tied = simulate(SimConfig(policies={"p": POLICY_A}, n_tasks=100, n_samples=1,
                              tasks=TaskParams(length_follows_difficulty=1.0)))["p"]
    for traj, other in zip(tied, free, strict=False):
        task = traj.meta["task"]
        assert task["length"] == round(2 + task["difficulty"] * 14)
        assert task["difficulty"] == other.meta["task"]["difficulty"]  # same draws otherwise


# --------------------------------------------------------------------------------------------
# Policies differ only where configured.


def test_policies_share_tasks_and_differ_only_in_recovery(flat_runs):
    a, b = flat_runs["a"], flat_runs["b"]
    assert len(a) == len(b)
    for ra, rb in zip(a, b, strict=True):
        assert (ra["task_id"], ra["sample"], ra["budget"]) == (rb["task_id"], rb["sample"],
                                                                rb["budget"])
        assert ra["meta"]["task"] == rb["meta"]["task"]
        assert ra["prompt"] == rb["prompt"] and ra["prompt"].startswith("User: ")
        assert ra["meta"]["params"] != rb["meta"]["params"]
        # Common random numbers: identical until the first turn taken inside a spell.
        for ta, tb in zip(ra["turns"], rb["turns"], strict=False):
            if ta["meta"]["event"] in IN_SPELL or tb["meta"]["event"] in IN_SPELL:
                assert ta["meta"]["event"] in IN_SPELL and tb["meta"]["event"] in IN_SPELL
                break
            assert ta == tb
    # Unchanged parameters give agreeing rates; the changed one differs in its direction.
    rates = {}
    for name, records in flat_runs.items():
        events = Counter(turn["meta"]["event"] for _, _, turn in all_turns(records))
        rates[name] = events
    for event, pool in (("error", OUT_OF_SPELL), ("progress", OUT_OF_SPELL),
                        ("recover", IN_SPELL), ("fatal", IN_SPELL)):
        k = [rates[n][event] for n in ("a", "b")]
        n = [sum(rates[r][e] for e in pool) for r in ("a", "b")]
        p = sum(k) / sum(n)
        z = (k[1] / n[1] - k[0] / n[0]) / math.sqrt(p * (1 - p) * (1 / n[0] + 1 / n[1]))
        if event in ("error", "progress"):
            assert abs(z) < Z, f"{event} differs between a and b: z = {z:.2f}"
        elif event == "recover":
            assert z > Z
        else:
            assert z < -Z


def test_equal_parameters_give_identical_turns():
    config = SimConfig(policies={"x": POLICY_A, "y": POLICY_A}, n_tasks=20, n_samples=3, seed=5)
    runs = simulate(config)
    for tx, ty in zip(runs["x"], runs["y"], strict=True):
        assert tx.run == "x" and ty.run == "y"
        assert [(t.action, t.observation, t.meta) for t in tx.turns] == [
            (t.action, t.observation, t.meta) for t in ty.turns
        ]


def test_tasks_do_not_depend_on_policy_set_or_task_count():
    one = simulate(SimConfig(policies={"base": PRESETS["base"]}, n_tasks=5, n_samples=1))
    two = simulate(SimConfig(n_tasks=12, n_samples=2))
    first = {t.task_id: t.meta["task"] for t in one["base"]}
    for traj in two["rl"]:
        if traj.task_id in first:
            assert traj.meta["task"] == first[traj.task_id]
    assert len(first) == 5


# --------------------------------------------------------------------------------------------
# Determinism and budgets.


def test_same_seed_same_bytes_different_seed_different(tmp_path):
    config = SimConfig(n_tasks=15, n_samples=3, budgets=[10, 25], seed=3)
    first = write_runs(config, tmp_path / "one")
    second = write_runs(config, tmp_path / "two")
    other = write_runs(dataclasses.replace(config, seed=4), tmp_path / "three")
    for p1, p2, p3 in zip(first, second, other, strict=True):
        assert p1.read_bytes() == p2.read_bytes()
        assert p1.read_bytes() != p3.read_bytes()
        lines1 = p1.read_text().splitlines()
        lines3 = p3.read_text().splitlines()
        differing = sum(
            json.loads(x)["turns"] != json.loads(y)["turns"]
            for x, y in zip(lines1, lines3, strict=True)
        )
        assert differing > 0.9 * len(lines1)


def test_simulate_equals_written_files(tmp_path):
    from recovery.schema import trajectory_to_dict

    config = SimConfig(n_tasks=6, n_samples=2, seed=9)
    runs = simulate(config)
    written = write_and_read(config, tmp_path)
    for name, trajectories in runs.items():
        assert [trajectory_to_dict(t) for t in trajectories] == written[name]


def test_budgets_are_respected(tmp_path):
    budgets = [5, 10, 20]
    config = SimConfig(n_tasks=40, n_samples=3, budgets=budgets, seed=2)
    runs = write_and_read(config, tmp_path)
    for records in runs.values():
        counts = Counter(rec["budget"] for rec in records)
        assert counts == {b: 40 * 3 for b in budgets}
        for rec in records:
            n = len(rec["turns"])
            assert 1 <= n <= rec["budget"]
            if rec["meta"]["end"] == "budget":
                assert n == rec["budget"] and not rec["success"]
        # A budget-unaware policy at budget 5 is its budget-20 run cut at turn 5.
        by_key = {(r["task_id"], r["sample"], r["budget"]): r for r in records}
        for (task, sample, budget), rec in by_key.items():
            if budget == 5:
                longer = by_key[(task, sample, 20)]
                assert rec["turns"] == longer["turns"][:5]
                assert rec["success"] == (longer["success"] and len(longer["turns"]) <= 5)


def test_budget_aware_policy_hurries_at_the_end(tmp_path):
    aware = dataclasses.replace(POLICY_A, budget_aware=True, hurry_turns=4, hurry_progress=1.5,
                                hurry_error=1.5)
    config = SimConfig(policies={"aware": aware, "plain": POLICY_A}, n_tasks=300, n_samples=4,
                       budgets=[8, 16], seed=4, tasks=FLAT)
    runs = write_and_read(config, tmp_path)
    hurried = Counter()
    for rec, t, turn in all_turns(runs["aware"]):
        assert turn["meta"]["hurry"] == (rec["budget"] - t < 4)
        if turn["meta"]["hurry"] and turn["meta"]["event"] in OUT_OF_SPELL:
            hurried[turn["meta"]["event"]] += 1
    assert "hurry" not in runs["plain"][0]["turns"][0]["meta"]
    p_progress, p_error = turn_probabilities(aware, FLAT, 0.5, hurry=True)
    n = sum(hurried.values())
    assert_rate(hurried["progress"], n, p_progress, "hurried progress")
    assert_rate(hurried["error"], n, p_error, "hurried error")
    # Budgeted mode differs from truncation for the aware policy (not for the plain one).
    by_key = {(r["task_id"], r["sample"], r["budget"]): r for r in runs["aware"]}
    cut_differs = sum(
        rec["turns"] != by_key[(k[0], k[1], 16)]["turns"][: len(rec["turns"])]
        for k, rec in by_key.items() if k[2] == 8
    )
    assert cut_differs > 0


# --------------------------------------------------------------------------------------------
# Ground truth.


def true_spells(is_error: list[bool]) -> dict[int, int]:
    """DESIGN 4, written out: error turn -> the turn its spell started."""
    start: dict[int, int] = {}
    for t, err in enumerate(is_error, start=1):
        if err:
            start[t] = start[t - 1] if t > 1 and is_error[t - 2] else t
    return start


def check_ground_truth(rec: dict) -> None:
    turns = rec["turns"]
    metas = [turn["meta"] for turn in turns]
    is_error = [m["true_error"] is not None for m in metas]
    spell_of = true_spells(is_error)
    length = rec["meta"]["task"]["length"]
    assert metas[0]["progress_before"] == 0
    for t, (meta, turn) in enumerate(zip(metas, turns, strict=True), start=1):
        event = meta["event"]
        gained = meta["progress_after"] - meta["progress_before"]
        assert gained in (0, 1)
        assert (gained == 1) == (event == "progress" or (event == "recover" and gained == 1))
        if event == "progress":
            assert gained == 1
        if t > 1:
            assert meta["progress_before"] == metas[t - 2]["progress_after"]
        assert (event in ("error", "repeat", "fatal")) == is_error[t - 1]
        if is_error[t - 1]:
            assert meta["spell_start"] == spell_of[t]
            assert (event == "error") == (spell_of[t] == t)
            assert meta["true_error"] in ("visible", "silent")
            if meta["true_error"] == "silent":
                assert meta["true_kind"] == "silent"
                assert gained == 0
            else:
                assert meta["true_kind"] in VISIBLE_KINDS
            if t > 1 and is_error[t - 2]:
                prev = metas[t - 2]
                assert (meta["true_error"], meta["true_kind"]) == (prev["true_error"],
                                                                   prev["true_kind"])
                if meta["true_error"] == "visible":  # a repeated failing action, same answer
                    assert (turn["action"], turn["observation"]) == (
                        turns[t - 2]["action"], turns[t - 2]["observation"])
        else:
            assert meta["spell_start"] is None and meta["true_kind"] is None
        recovered = t > 1 and is_error[t - 2] and not is_error[t - 1]
        assert (event == "recover") == recovered
        assert meta["recovers"] == (spell_of[t - 1] if recovered else None)
        if event in ("progress", "stall", "error"):
            assert t == 1 or not is_error[t - 2]
    final = metas[-1]
    assert rec["success"] == (final["progress_after"] == length)
    assert rec["reward"] == (1.0 if rec["success"] else 0.0)
    assert all(m["progress_after"] < length for m in metas[:-1])
    end = rec["meta"]["end"]
    assert end == ("success" if rec["success"] else "fatal" if final["event"] == "fatal"
                   else "budget")
    assert all(m["event"] != "fatal" for m in metas[:-1])
    if end == "budget":
        assert len(turns) == rec["budget"]


def test_ground_truth_is_consistent(flat_runs, preset_runs):
    n = 0
    for runs in (flat_runs, preset_runs):
        for records in runs.values():
            for rec in records:
                check_ground_truth(rec)
                n += 1
    assert n > 5000


def test_trajectory_meta(preset_runs):
    rec = preset_runs["rl"][0]
    assert rec["run"] == "rl" and rec["meta"]["policy"] == "rl"
    assert rec["meta"]["params"] == {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in dataclasses.asdict(PRESETS["rl"]).items()
    }
    assert rec["meta"]["seed"] == 0
    task = rec["meta"]["task"]
    assert 2 <= task["length"] <= 16 and 0 <= task["difficulty"] <= 1
    ends = Counter(r["meta"]["end"] for r in preset_runs["base"])
    assert set(ends) == {"success", "fatal", "budget"}


# --------------------------------------------------------------------------------------------
# Text.

ARG_RE = re.compile(r'(\w+)=(?:"([^"]*)"|(-?\d+))')
TOKEN_RE = re.compile(r"#?\w+")


def unsupported_values(history: set[str], action: str) -> list[str]:
    """Id and amount arguments of ``action`` that the history tokens (the prompt and the
    observations before the turn) do not contain: a reader comparing the action with the
    history would object to them."""
    out = []
    for name, text, number in ARG_RE.findall(action):
        if name.endswith("_id") or name == "amount":
            value = text or number
            if value not in history:
                out.append(value)
    return out


def near_miss_of_history(value: str, history: set[str]) -> bool:
    """An amount, or an id one character off an id the history has."""
    if value.lstrip("-").isdigit():
        return True
    return any(
        len(h) == len(value) and sum(a != b for a, b in zip(h, value, strict=True)) == 1
        for h in history
    )


def test_silent_errors_contradict_the_history_and_clean_turns_do_not(flat_runs, preset_runs):
    n_silent = n_clean = 0
    for runs in (flat_runs, preset_runs):
        for records in runs.values():
            for rec in records:
                history = set(TOKEN_RE.findall(rec["prompt"]))
                for turn in rec["turns"]:
                    truth = turn["meta"]["true_error"]
                    if truth == "silent":
                        bad = unsupported_values(history, turn["action"])
                        assert bad, f"silent error contradicts nothing: {turn}"
                        assert all(near_miss_of_history(v, history) for v in bad)
                        n_silent += 1
                    elif truth is None:
                        assert not unsupported_values(history, turn["action"]), turn
                        n_clean += 1
                    history.update(TOKEN_RE.findall(turn["observation"]))
    assert n_silent > 1000 and n_clean > 50_000


def shape(text: str) -> str:
    """Text with ids and numbers masked: what a regex on the turn alone could key on."""
    return re.sub(r"#?\w*\d\w*", "<v>", text)


def test_silent_turns_look_like_clean_turns(preset_runs):
    clean_actions, clean_obs, silent = set(), set(), []
    for records in preset_runs.values():
        for _, _, turn in all_turns(records):
            truth = turn["meta"]["true_error"]
            if truth is None and turn["meta"]["event"] == "progress":
                clean_actions.add(shape(turn["action"]))
                clean_obs.add(shape(turn["observation"]))
            elif truth == "silent":
                silent.append(turn)
    assert len(silent) > 500
    for turn in silent:
        assert shape(turn["action"]) in clean_actions, turn["action"]
        assert shape(turn["observation"]) in clean_obs, turn["observation"]


def test_visible_errors_readable_and_normal_text_never_says_error(flat_runs, preset_runs):
    forbidden = re.compile(NORMAL_TEXT_FORBIDDEN)
    patterns = {k: re.compile(p) for k, p in VISIBLE_ERROR_PATTERNS.items()}
    templates = {
        (kind, i): re.compile(re.sub(r"\\\{\w+\\\}", ".+?", re.escape(template)), re.S)
        for kind, kind_templates in VISIBLE_ERROR_TEMPLATES.items()
        for i, template in enumerate(kind_templates)
    }
    used = Counter()
    for runs in (flat_runs, preset_runs):
        for records in runs.values():
            for _, _, turn in all_turns(records):
                obs, meta = turn["observation"], turn["meta"]
                if meta["true_error"] == "visible":
                    matching = [k for k, p in patterns.items() if p.search(obs)]
                    assert matching == [meta["true_kind"]], obs
                    which = [key for key, rx in templates.items() if rx.fullmatch(obs)]
                    assert which and all(k == meta["true_kind"] for k, _ in which), obs
                    used[which[0]] += 1
                else:
                    assert not forbidden.search(obs), obs
                    assert not any(p.search(obs) for p in patterns.values()), obs
    # Every wording of every kind occurs.
    assert set(used) == set(templates)


def test_error_templates_match_their_patterns():
    for kind, templates in VISIBLE_ERROR_TEMPLATES.items():
        for template in templates:
            assert re.search(VISIBLE_ERROR_PATTERNS[kind], template), template
            others = [k for k in VISIBLE_KINDS if k != kind]
            assert not any(re.search(VISIBLE_ERROR_PATTERNS[k], template) for k in others)


def test_only_visible_repeats_copy_the_previous_turn(flat_runs, preset_runs):
    copies = 0
    for runs in (flat_runs, preset_runs):
        for records in runs.values():
            for rec in records:
                turns = rec["turns"]
                for prev, turn in itertools.pairwise(turns):
                    same = (prev["action"], prev["observation"]) == (turn["action"],
                                                                     turn["observation"])
                    if same:
                        copies += 1
                        assert prev["meta"]["true_error"] == turn["meta"]["true_error"] == (
                            "visible")
                        assert turn["meta"]["event"] in ("repeat", "fatal")
    assert copies > 1000


def test_text_variety(preset_runs):
    actions = Counter()
    observations = set()
    for records in preset_runs.values():
        for _, _, turn in all_turns(records):
            actions[turn["action"].split("(")[0].split(" ")[0]] += 1
            observations.add(shape(turn["observation"]))
    assert len(actions) >= 15  # tools of three domains, think/respond/search, parse errors
    assert len(observations) >= 200


def test_progress_steps_read_the_same_in_every_sample(preset_runs):
    """The environment answers the same step the same way, so samples of a task share states."""
    texts: dict[tuple[str, int], set[tuple[str, str]]] = {}
    for records in preset_runs.values():
        for rec, _, turn in all_turns(records):
            if turn["meta"]["event"] == "progress":
                key = (rec["task_id"], turn["meta"]["progress_before"])
                texts.setdefault(key, set()).add((turn["action"], turn["observation"]))
    assert len(texts) > 1000
    assert all(len(variants) == 1 for variants in texts.values())


# --------------------------------------------------------------------------------------------
# Presets (the claims in docs/simulator.md).


def test_presets_have_the_documented_properties(preset_runs):
    base, rl = PRESETS["base"], PRESETS["rl"]
    assert PolicyParams() == base
    assert rl.p_recover > base.p_recover and rl.p_fatal < base.p_fatal
    for name in ("p_progress", "p_error", "p_silent"):
        assert abs(getattr(rl, name) - getattr(base, name)) <= 0.01 + 1e-9
    success = {}
    for name, records in preset_runs.items():
        turns_to_success = [len(r["turns"]) if r["success"] else math.inf for r in records]
        success[name] = {
            T: sum(s <= T for s in turns_to_success) / len(records) for T in (5, 10, 20, 40)
        }
        errors = [turn["meta"]["true_error"] for _, _, turn in all_turns(records)
                  if turn["meta"]["event"] == "error"]
        assert 0.2 <= errors.count("silent") / len(errors) <= 0.3
    assert 0.4 <= success["base"][40] <= 0.55
    assert success["rl"][40] > success["base"][40] + 0.1
    gains = [success["rl"][T] - success["base"][T] for T in (5, 10, 20, 40)]
    assert gains == sorted(gains) and gains[0] < 0.03


def test_policy_params_validate():
    with pytest.raises(ValueError, match="p_error"):
        PolicyParams(p_error=1.5)
    with pytest.raises(ValueError, match="p_progress \\+ p_error"):
        PolicyParams(p_progress=0.7, p_error=0.4)
    with pytest.raises(ValueError, match="p_recover \\+ p_fatal"):
        PolicyParams(p_recover=0.9, p_fatal=0.2)
    with pytest.raises(ValueError, match="kind_weights"):
        PolicyParams(kind_weights=(1.0, 0.0))
    with pytest.raises(ValueError, match="domains"):
        TaskParams(domains=("space",))
    with pytest.raises(ValueError, match="budgets"):
        SimConfig(budgets=[10, 10])


# --------------------------------------------------------------------------------------------
# Config files and the command line.

TOML_CONFIG = """
seed = 7
n_tasks = 9
n_samples = 2
budgets = [6, 12]

[tasks]
length_min = 2
length_max = 5
error_spread = 0.0

[policies.base]
preset = "base"

[policies.careful]
preset = "base"
p_recover = 0.7
kind_weights = [1.0, 0.0, 0.0]
"""


def test_load_config_toml_and_json_agree(tmp_path):
    toml_path = tmp_path / "sim.toml"
    toml_path.write_text(TOML_CONFIG)
    import tomllib

    json_path = tmp_path / "sim.json"
    json_path.write_text(json.dumps(tomllib.loads(TOML_CONFIG)))
    from_toml, from_json = load_config(toml_path), load_config(json_path)
    assert from_toml == from_json
    assert from_toml.seed == 7 and from_toml.budgets == [6, 12]
    assert from_toml.tasks == TaskParams(length_min=2, length_max=5, error_spread=0.0)
    assert from_toml.policies["base"] == PRESETS["base"]
    assert from_toml.policies["careful"] == dataclasses.replace(
        PRESETS["base"], p_recover=0.7, kind_weights=(1.0, 0.0, 0.0))


def test_load_config_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[policies.x]\np_recovr = 0.5\n')
    with pytest.raises(UsageProblem, match=r"bad\.toml.*policies\.x.*p_recovr"):
        load_config(bad)
    bad.write_text('[policies.x]\npreset = "nope"\n')
    with pytest.raises(UsageProblem, match="unknown preset 'nope'"):
        load_config(bad)
    bad.write_text("n_taks = 3\n")
    with pytest.raises(UsageProblem, match="n_taks"):
        load_config(bad)
    with pytest.raises(FileNotFoundError, match=r"packaged configs: .*demo"):
        load_config(tmp_path / "missing.toml")


def test_packaged_configs_load():
    demo = load_config("demo")
    assert demo.policies == {"base": PRESETS["base"], "rl": PRESETS["rl"]}
    assert (demo.n_tasks, demo.n_samples, demo.budgets, demo.seed) == (200, 8, [40], 0)
    only_recovery = load_config("recovery-only")
    a, b = only_recovery.policies.values()
    assert {k for k, v in dataclasses.asdict(a).items()
            if dataclasses.asdict(b)[k] != v} == {"p_recover", "p_fatal"}
    only_error = load_config("error-only")
    a, b = only_error.policies.values()
    assert {k for k, v in dataclasses.asdict(a).items()
            if dataclasses.asdict(b)[k] != v} == {"p_error"}
    aware = load_config("budget-aware")
    assert aware.policies["aware"].budget_aware and len(aware.budgets) == 3


def test_cli_writes_files_that_ingest_accepts(tmp_path):
    from agent_recovery_cli.recovery import main
    from recovery.store import open_store

    runner = CliRunner()
    out = tmp_path / "runs"
    result = runner.invoke(main, ["simulate", "--out", str(out), "--tasks", "6", "--samples",
                                  "2", "--budgets", "5,10", "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "rl.jsonl" in result.output
    files = sorted(out.glob("*.jsonl"))
    assert [f.name for f in files] == ["base.jsonl", "rl.jsonl"]
    store = tmp_path / "runs.duckdb"
    result = runner.invoke(main, ["ingest", *map(str, files), "--store", str(store)])
    assert result.exit_code == 0, result.output
    opened = open_store(store)
    try:
        rows = opened.con.execute(
            "SELECT run, budget, count(*), max(n_turns) FROM trajectories GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        assert [(r[0], r[1], r[2]) for r in rows] == [
            ("base", 5, 12), ("base", 10, 12), ("rl", 5, 12), ("rl", 10, 12)]
        assert all(r[3] <= r[1] for r in rows)
        n_truth = opened.con.execute(
            "SELECT count(*) FROM turns WHERE meta->>'true_error' IS NOT NULL"
        ).fetchone()[0]
        assert n_truth == sum(
            turn["meta"]["true_error"] is not None
            for f in files for rec in read_jsonl(f) for turn in rec["turns"]
        )
    finally:
        opened.close()


def test_cli_config_policies_and_errors(tmp_path):
    from agent_recovery_cli.recovery import main

    config = tmp_path / "sim.toml"
    config.write_text(TOML_CONFIG)
    runner = CliRunner()
    out = tmp_path / "out"
    result = runner.invoke(main, ["simulate", "--out", str(out), "--config", str(config),
                                  "--policies", "careful", "--budget", "7"])
    assert result.exit_code == 0, result.output
    records = read_jsonl(out / "careful.jsonl")
    assert not (out / "base.jsonl").exists()
    assert len(records) == 9 * 2 and {r["budget"] for r in records} == {7}
    assert records[0]["meta"]["params"]["p_recover"] == 0.7 and records[0]["meta"]["seed"] == 7
    both = runner.invoke(main, ["simulate", "--out", str(out), "--budget", "5", "--budgets",
                                "5,10"])
    assert both.exit_code == 2 and "not both" in both.output
    unknown = runner.invoke(main, ["simulate", "--out", str(out), "--policies", "sft"])
    assert unknown.exit_code == 2 and "unknown policy 'sft'" in unknown.output


@pytest.mark.slow
def test_a_million_turns_well_under_a_minute(tmp_path):
    """CPU time, so that other work on the machine does not count (docs/simulator.md)."""
    config = SimConfig(n_tasks=2000, n_samples=20, budgets=[40], seed=0)
    start = time.process_time()
    paths = write_runs(config, tmp_path)
    elapsed = time.process_time() - start
    n_turns = 0
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            n_turns += sum(len(json.loads(line)["turns"]) for line in fh)
    assert n_turns >= 1_000_000
    assert elapsed < 40, f"{n_turns} turns took {elapsed:.1f} s of CPU"


def test_builtin_rules_mark_exactly_the_visible_errors(con, memory_store, tmp_path):
    """The claim in docs/simulator.md: marking finds every visible error with its kind, and
    nothing else (silent errors need more than rules)."""


    config = SimConfig(n_tasks=60, n_samples=4, seed=1)
    for path in write_runs(config, tmp_path):
        memory_store.ingest_file(path)
    python_run = simulate(dataclasses.replace(config, policies={"py": PRESETS["rl"]}))["py"]
    memory_store.ingest_trajectories(python_run)
    rows = con.execute(
        "SELECT meta->>'true_error', meta->>'true_kind', error_kind, count(*) FROM turns "
        "GROUP BY ALL"
    ).fetchall()
    counted = Counter()
    for true_error, true_kind, marked, n in rows:
        if true_error == "visible":
            assert marked == true_kind, (true_kind, marked, n)
        else:
            assert marked is None, (true_error, marked, n)
        counted[true_error] += n
    assert counted["visible"] > 500 and counted["silent"] > 100
    spells = con.execute(
        """
        WITH truth AS (
            SELECT traj_id, (meta->>'spell_start')::INT AS start_t, max(t) AS end_t
            FROM turns WHERE meta->>'true_error' = 'visible' GROUP BY ALL)
        SELECT count(*), count(s.traj_id) FILTER (WHERE s.end_t = truth.end_t),
               (SELECT count(*) FROM error_spells)
        FROM truth LEFT JOIN error_spells s USING (traj_id, start_t)
        """
    ).fetchone()
    assert spells[0] == spells[1] == spells[2]


# --- Monte Carlo process labels -------------------------------------------------------------


def exact_values(policy: PolicyParams, probs, hurry_probs, length: int, budget: int):
    """``V[t][(progress, in_spell)]``: the exact success probability after turn ``t``."""
    values = {budget: {(p, s): 0.0 for p in range(length) for s in (False, True)}}

    def done_or(t: int, p: int, s: bool) -> float:
        return 1.0 if p >= length else values[t][(p, s)]

    for t in range(budget - 1, -1, -1):
        hurry = policy.budget_aware and budget - (t + 1) < policy.hurry_turns
        pp, pe = hurry_probs if hurry else probs
        q = pp / (1.0 - pe)
        values[t] = {}
        for p in range(length):
            values[t][(p, False)] = (pp * done_or(t + 1, p + 1, False) + pe * values[t + 1][(p, True)]
                                     + (1.0 - pp - pe) * values[t + 1][(p, False)])
            recover = q * done_or(t + 1, p + 1, False) + (1.0 - q) * values[t + 1][(p, False)]
            values[t][(p, True)] = (policy.p_recover * recover
                                    + (1.0 - policy.p_recover - policy.p_fatal)
                                    * values[t + 1][(p, True)])
    return values


@pytest.mark.parametrize("aware", [False, True])
def test_rollout_values_equal_the_exact_dynamic_programme(aware):
    import numpy as np

    from recovery.simulate import EpisodeDynamics, rollout_values

    policy = dataclasses.replace(POLICY_A, budget_aware=aware, hurry_turns=3)
    probs = turn_probabilities(policy, FLAT, 0.5)
    hurry_probs = turn_probabilities(policy, FLAT, 0.5, hurry=True)
    length, budget, n = 4, 9, 40_000
    dynamics = EpisodeDynamics(probs, hurry_probs, length, budget)
    exact = exact_values(policy, probs, hurry_probs, length, budget)
    after = [(0, False, False), (1, False, False), (1, True, False), (2, True, False),
             (3, False, False), (3, True, False), (3, False, False), (3, False, False),
             (3, True, False)]
    got = rollout_values(policy, dynamics, after, n, np.random.default_rng(0))
    for t, ((p, s, _), value) in enumerate(zip(after, got, strict=True), start=1):
        want = exact[t][(p, bool(s))]
        assert abs(value - want) <= Z * math.sqrt(max(want * (1 - want), 1e-4) / n), (t, value, want)
    assert got[-1] == 0.0  # after the last turn of the budget nothing is left
    # an episode that ended at a turn has the value of its outcome
    ended = rollout_values(policy, dynamics, [(1, False, False), (4, False, True)], 8,
                           np.random.default_rng(0))
    assert ended[1] == 1.0 and 0.0 <= ended[0] <= 1.0
    fatal = rollout_values(policy, dynamics, [(2, True, True)], 8, np.random.default_rng(0))
    assert fatal[0] == 0.0


def test_mc_rollouts_label_turns_without_changing_the_trajectories():
    plain = SimConfig(n_tasks=30, n_samples=3, budgets=[12], seed=3)
    labelled = dataclasses.replace(plain, mc_rollouts=32)
    by_event: dict[str, list[float]] = {}
    for name in plain.policies:
        for a, b in zip(simulate(plain)[name], simulate(labelled)[name], strict=True):
            assert [(t.action, t.observation, t.meta) for t in a.turns] == [
                (t.action, t.observation, t.meta) for t in b.turns
            ]
            assert all(t.label is None for t in a.turns)
            assert all(-1.0 <= t.label <= 1.0 for t in b.turns)
            # the last turn's value is the outcome: success, a fatal turn, or no turns left
            assert b.turns[-1].label == (1.0 if b.success else -1.0)
            for turn in b.turns:
                key = turn.meta["true_error"] or turn.meta["event"]
                by_event.setdefault(key, []).append(turn.label)
    mean = {k: sum(v) / len(v) for k, v in by_event.items()}
    # an error (silent ones included) lowers the value of the state after it
    assert mean["silent"] < mean["progress"] and mean["visible"] < mean["progress"]
    with pytest.raises(ValueError, match="mc_rollouts"):
        SimConfig(mc_rollouts=-1)


def test_cli_mc_rollouts_and_config_key(tmp_path):
    from agent_recovery_cli.recovery import main

    result = CliRunner().invoke(main, ["simulate", "--out", str(tmp_path / "a"), "--tasks", "5",
                                       "--samples", "2", "--mc-rollouts", "4"])
    assert result.exit_code == 0, result.output
    rows = read_jsonl(tmp_path / "a" / "base.jsonl")
    assert all(t["label"] is not None for r in rows for t in r["turns"])
    (tmp_path / "c.toml").write_text("mc_rollouts = 3\nn_tasks = 2\n")
    assert load_config(tmp_path / "c.toml").mc_rollouts == 3
