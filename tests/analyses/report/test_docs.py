"""docs/concepts.md reads two whole reports; this recomputes every number it quotes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyses.report.analyze import AnalyzeConfig, analyze
from recovery.simulate import PRESETS, SimConfig, write_runs
from tests.conftest import REPO, TAU_AIRLINE

DOC = " ".join((REPO / "docs" / "concepts.md").read_text(encoding="utf-8").split())


def _in_doc(text: str) -> None:
    assert " ".join(text.split()) in DOC, text


def _f(value: float, digits: int = 3, signed: bool = False) -> str:
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    """`make demo`: simulate base and rl (200 tasks x 8 samples, budget 40, seed 0), analyse."""
    out = tmp_path_factory.mktemp("demo")
    files = write_runs(SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
                                 n_tasks=200, n_samples=8, budgets=[40], seed=0), out)
    return analyze(AnalyzeConfig(files=files, baseline="base"))


def test_the_demo_report_read_in_the_docs(demo):
    report = demo
    for line in report.headline:
        _in_doc(f"- {line}")
    _in_doc(f"mode: truncation: every trajectory is cut at each T (valid when the agent is not "
            f"told its budget) {report.mode_reason}")
    base, rl = report.runs["base"], report.runs["rl"]

    q = report.data_quality["base"]
    _in_doc(f"For the demo's base run: {q.n_trajectories} trajectories, {q.turns_median:.1f} "
            f"turns per trajectory (median; {q.turns_min} to {q.turns_max}), "
            f"{100 * q.empty_action_share:.1f}% empty actions, "
            f"{100 * q.repeated_observation_share:.1f}% of turns got the same observation as "
            f"the turn before, {100 * q.error_turn_share:.1f}% of turns are marked as errors, "
            f"{q.samples_max} samples per task")
    _in_doc(f"{q.n_budget_hit} trajectories ({100 * q.budget_hit_share:.1f}%) stopped at the "
            "turn limit, and the end reasons: " + ", ".join(
                f"{k} {v}" for k, v in q.end_reasons.items()))
    assert not report.data_warnings and not q.tasks_below_k
    _in_doc("The demo has none.")

    _in_doc(f"base: Pass@(1, no limit) {_f(base.pass_at(1, None))}, Pass@(8, no limit) "
            f"{_f(base.pass_at(8, None))}; at T = 10, {_f(base.pass_at(1, 10))} and "
            f"{_f(base.pass_at(8, 10))} (a drop of "
            f"{_f(base.pass_at(1, 10) - base.pass_at(1, None), signed=True)} and "
            f"{_f(base.pass_at(8, 10) - base.pass_at(8, None), signed=True)})")
    _in_doc(f"(base {100 * base.recovery.recovery_rate:.1f}%, rl "
            f"{100 * rl.recovery.recovery_rate:.1f}%)")
    _in_doc(f"base {100 * base.recovery.fatal_rate:.1f}%, rl {100 * rl.recovery.fatal_rate:.1f}%")
    _in_doc(f"mean {base.recovery.mean_latency:.2f} turns for base, "
            f"{rl.recovery.mean_latency:.2f} for rl")
    gap = max(abs(r.model - r.empirical) for run in (base, rl) for r in run.model_fit)
    assert 0.005 < gap <= 0.006
    _in_doc("The model is within 0.006 of the data at every T for both demo runs")
    d = next(x for x in base.descriptive if x.t is None)
    _in_doc(f"base at no limit: e = {_f(d.e)}, c = {_f(d.c)}, r = {_f(d.r)}")

    comp = report.comparisons[0]
    rows = {r.t: r for r in comp.by_t}
    r40, r6 = rows[40], rows[6]
    _in_doc(f"at T = 40: delta {_f(r40.delta, signed=True)}, model delta "
            f"{_f(r40.model_delta, signed=True)} = single step {_f(r40.single_step, signed=True)}"
            f" + recovery {_f(r40.recovery, signed=True)}, recovery share "
            f"{r40.recovery_share:.2f}")
    _in_doc(f"at T = 6 the same split gives {_f(r6.model_delta, signed=True)} = "
            f"{_f(r6.single_step, signed=True)} + {_f(r6.recovery, signed=True)} "
            f"(share {r6.recovery_share:.2f})")
    assert 0.003 < max(abs(r.residual) for r in comp.by_t) <= 0.004

    cells = {(c.k, c.t): c for c in comp.pass_at_difference}
    for k, t in ((4, None), (8, None), (8, 14)):
        c = cells[(k, t)]
        _in_doc(f"{_f(c.value, signed=True)} [{_f(c.lo, signed=True)}, {_f(c.hi, signed=True)}]")
    assert not cells[(8, 14)].excludes_zero() and cells[(8, None)].excludes_zero()

    h0 = base.hazards["h"][0]
    rho_rl, rho_base = rl.hazards["rho"][0], base.hazards["rho"][0]
    _in_doc(f"base's h(0) = {_f(h0.value)} rests on {h0.bin_at_risk} turns at risk, rl's "
            f"rho(1) = {_f(rho_rl.value)} on {rho_rl.bin_at_risk} (base's {_f(rho_base.value)} "
            f"on {rho_base.bin_at_risk})")


def test_the_real_comparison_without_a_share(tmp_path: Path):
    """tau-bench's gpt-4o airline trials 0-1 against trials 2-3: no share where the change
    may be 0 (skips without ../shared/data)."""
    if not TAU_AIRLINE.exists():
        pytest.skip(f"real data not found at {TAU_AIRLINE}")
    records = json.loads(TAU_AIRLINE.read_text())
    files = []
    for name, trials in (("trials-01", (0, 1)), ("trials-23", (2, 3))):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps([r for r in records if r["trial"] in trials]))
        files.append(path)
    report = analyze(AnalyzeConfig(files=files))
    _in_doc(f"- {report.headline[0]}")
    for row in report.comparisons[0].by_t:
        assert row.recovery_share != row.recovery_share        # NaN: not given
        assert not row.change_is_clear()
    _in_doc(report.comparisons[0].by_t[0].recovery_share_note.split(" (model delta")[0])


def test_the_budget_dependence_example_read_in_the_docs(tmp_path: Path):
    """docs/concepts.md's crossover example: the headline, its ranges and its crossover, and
    the simulator's exact crossover it is compared with."""
    import numpy as np

    from recovery.simulate import load_config
    from recovery.simulate.tasks import draw_tasks
    from recovery.simulate.truth import success_curve

    config = load_config("crossover")
    files = write_runs(config, tmp_path)
    report = analyze(AnalyzeConfig(files=files, baseline="hasty"))
    _in_doc(f"- {report.headline[0]}")
    shape = report.comparisons[0].budget_shape
    (worse, better) = shape.ranges
    _in_doc(f"up to {worse.last_t} turns (at worst {-100 * worse.extreme:.1f} points fewer, "
            f"at T = {worse.extreme_t}), more from {better.first_t} turns on "
            f"({100 * better.extreme:.1f} points more with no limit)")
    _in_doc(f"the two curves cross at T = {shape.crossover_t}")
    tasks = draw_tasks(config)
    truth = (success_curve(config.policies["careful"], config.tasks, tasks, 60)
             - success_curve(config.policies["hasty"], config.tasks, tasks, 60))
    true_crossover = int(np.argmax(truth > 0)) + 1
    _in_doc(f"exact curves cross at T = {true_crossover}")
    # the report's headline states the crossover, near the simulator's truth, and every range
    # it calls significant has the true sign
    assert f"crossover at T = {shape.crossover_t}" in report.headline[0]
    assert abs(shape.crossover_t - true_crossover) <= 5
    for r in shape.ranges:
        assert np.all(np.sign(truth[r.first_t - 1:r.last_t]) == r.sign)
    _in_doc(f"Between T = {worse.last_t + 1} and {better.first_t - 1} the band holds 0")
