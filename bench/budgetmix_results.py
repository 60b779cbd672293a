"""The results table of docs/budgetmix.md: BudgetMix against fixed budgets on the reference trainer.

For each seed this runs exactly what a user types::

    recovery budgetmix train-sim --seed S --out WORK/seed-S            # four modes
    recovery ingest WORK/seed-S/fixed-24.jsonl --store WORK/seed-S/plan.duckdb
    recovery budgetmix plan --store WORK/seed-S/plan.duckdb --out WORK/seed-S/adaptive.json
    recovery budgetmix train-sim --seed S --mode budgetmix --schedule WORK/seed-S/adaptive.json \
        --out WORK/seed-S/adaptive                                      # a fifth policy
    recovery ingest WORK/seed-S/*.jsonl --store WORK/seed-S/eval.duckdb
    recovery ingest WORK/seed-S/adaptive/budgetmix.jsonl --run budgetmix-adaptive --store ...
    recovery analyze --store WORK/seed-S/eval.duckdb --mode budgeted --baseline fixed:24 --json ...
    recovery analyze --store WORK/seed-S/eval.duckdb --mode budgeted --baseline fixed:8 --json ...

The fifth policy closes the loop: its schedule is planned (adaptive, shortfall evidence) from the
``fixed:24`` policy's evaluation rollouts, and it is then trained from scratch on that schedule.

then prints, as markdown: Pass@(1,T) per mode and T (mean over seeds, with a 95% t-interval
over seeds, whose spread is mostly training variance) beside the optimum that dynamic
programming gives on the same tasks, each mode's worst T and its worst
shortfall against the best mode at the same T (robustness across budgets), and the gain
decomposition (single-step quality vs recovery) of each mode against each fixed budget.

Run: ``.venv/bin/python bench/budgetmix_results.py [--seeds 0,1,2,3,4] [--work bench-out/budgetmix]``.
Extra ``recovery budgetmix train-sim`` options go after ``--``, e.g. ``-- --iterations 100``.
Numbers land in ``WORK/results.json`` as well.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

MODES = ("fixed:8", "fixed:24", "budgetmix", "budgetmix+prm")
ADAPTIVE = "budgetmix-adaptive"
RUNS = (*MODES, ADAPTIVE)
BASELINES = ("fixed:24", "fixed:8")


def run_cli(args: list[str]) -> None:
    """Run ``recovery ARGS`` in this process (the same code path as the console script)."""
    from agent_recovery_cli.recovery import main

    try:
        main(args, standalone_mode=False)
    except SystemExit as exit_:  # pragma: no cover - click's normal exit
        if exit_.code:
            raise


def seed_results(seed: int, work: Path, extra: list[str], n_boot: int) -> dict[str, Any]:
    """Train, analyse and collect one seed's numbers."""
    out = work / f"seed-{seed}"
    started = time.perf_counter()
    run_cli(["budgetmix", "train-sim", "--seed", str(seed), "--out", str(out),
             "--mode", ",".join(MODES), *extra])
    train_s = time.perf_counter() - started
    files = [out / f"{m.replace(':', '-')}.jsonl" for m in MODES]
    plan_store, eval_store = out / "plan.duckdb", out / "eval.duckdb"
    for store in (plan_store, eval_store):
        store.unlink(missing_ok=True)
    run_cli(["ingest", str(out / "fixed-24.jsonl"), "--store", str(plan_store)])
    schedule_path = out / "adaptive.json"
    run_cli(["budgetmix", "plan", "--store", str(plan_store), "--out", str(schedule_path)])
    started = time.perf_counter()
    run_cli(["budgetmix", "train-sim", "--seed", str(seed), "--out", str(out / "adaptive"),
             "--mode", "budgetmix", "--schedule", str(schedule_path), *extra])
    adaptive_s = time.perf_counter() - started
    run_cli(["ingest", *map(str, files), "--store", str(eval_store)])
    run_cli(["ingest", str(out / "adaptive" / "budgetmix.jsonl"), "--run", ADAPTIVE,
             "--store", str(eval_store)])
    reports = {}
    for baseline in BASELINES:
        path = out / f"report-{baseline.replace(':', '-')}.json"
        run_cli(["analyze", "--store", str(eval_store), "--mode", "budgeted", "--baseline",
                 baseline, "--k", "1", "--n-boot", str(n_boot), "--seed", str(seed), "--json",
                 str(path), "--quiet"])
        reports[baseline] = json.loads(path.read_text())
    report = reports[BASELINES[0]]
    pass1 = {
        run: {str(c["t"]): (c["value"], c["lo"], c["hi"])
              for c in entry["pass_at_kt"] if c["k"] == 1}
        for run, entry in report["runs"].items()
    }
    decomposition = {
        baseline: {
            comp["candidate"]: {str(row["t"]): {"delta": row["delta"],
                                                "single_step": row["single_step"],
                                                "recovery": row["recovery"],
                                                "residual": row["residual"]}
                                for row in comp["by_t"]}
            for comp in rep["comparisons"]
        }
        for baseline, rep in reports.items()
    }
    summary = json.loads((out / "train_sim.json").read_text())
    optimal = optimal_pass(summary, [int(t) for t in report["ts"]], seed)
    schedule = json.loads(schedule_path.read_text())
    return {
        "behaviour": behaviour(eval_store),
        "seed": seed,
        "train_sim_wall_s": train_s,
        "adaptive_wall_s": adaptive_s,
        "adaptive_schedule": dict(zip(map(str, schedule["budgets"]), schedule["weights"],
                                      strict=True)),
        "mode_wall_s": {m["mode"]: m["wall_s"] for m in summary["modes"]},
        "ts": [int(t) for t in report["ts"]],
        "pass_at_1": pass1,
        "optimal": optimal,
        "decomposition": decomposition,
    }


def behaviour(store: Path) -> dict[str, dict[str, dict[str, float]]]:
    """Per run and budget, from the turns' ground truth: the share of ``fast`` among the
    choices outside a spell and of ``retry`` among those inside one."""
    from recovery.store import open_store

    opened = open_store(store, read_only=True)
    try:
        rows = opened.con.execute(
            """
            SELECT tr.run, tr.budget,
                   avg((c = 'fast')::INT) FILTER (WHERE c IN ('fast', 'safe'))     AS fast,
                   avg((c = 'retry')::INT) FILTER (WHERE c IN ('retry', 'repair')) AS retry
            FROM (SELECT traj_id, json_extract_string(meta, '$.choice') AS c FROM turns) u
            JOIN trajectories tr USING (traj_id)
            GROUP BY tr.run, tr.budget
            """
        ).fetchall()
    finally:
        opened.close()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for run, budget, fast, retry in rows:
        out.setdefault(run, {})[str(budget)] = {"fast": fast, "retry": retry}
    return out


def optimal_pass(summary: dict[str, Any], ts: list[int], seed: int) -> dict[str, float]:
    """Pass@(1,T) of the best budget-aware policy (dynamic programming) on the same tasks."""
    from analyses.budgetmix.reference.env import EnvParams, eval_tasks, optimal_success

    env = EnvParams(**summary["env"])
    length, difficulty = eval_tasks(env, seed, summary["config"]["eval_tasks"])
    return {str(t): float(optimal_success(env, length, difficulty, t).mean()) for t in ts}


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% Student-t interval over seeds."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


def tables(results: list[dict[str, Any]]) -> str:
    """The markdown tables of the aggregated numbers."""
    ts = results[0]["ts"]
    lines = [f"Pass@(1,T), mean over {len(results)} seeds [95% t-interval over seeds]; "
             "`recovery analyze --mode budgeted`.", ""]
    lines.append("| mode | " + " | ".join(f"T={t}" for t in ts) + " |")
    lines.append("|---|" + "---|" * len(ts))
    means: dict[str, dict[int, float]] = {}
    for mode in RUNS:
        cells = []
        for t in ts:
            mean, lo, hi = t_interval([r["pass_at_1"][mode][str(t)][0] for r in results])
            means.setdefault(mode, {})[t] = mean
            cells.append(f"{mean:.3f} [{lo:.3f}, {hi:.3f}]")
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    optimal = [np.mean([r["optimal"][str(t)] for r in results]) for t in ts]
    lines.append("| optimal (DP; knows each task's difficulty) | "
                 + " | ".join(f"{v:.3f}" for v in optimal) + " |")
    lines += ["", "Robustness across budgets (per seed, then mean [t-interval] over seeds): the worst "
              "Pass@(1,T) over T, and the worst shortfall against the best of the five policies at "
              "the same T (max over T of best(T) - own(T)).", ""]
    lines.append("| mode | worst Pass@(1,T) | T where worst | worst shortfall vs best mode | "
                 "T where worst shortfall |")
    lines.append("|---|---|---|---|---|")
    for mode in RUNS:
        worst, worst_gap, worst_t, gap_t = [], [], [], []
        for r in results:
            own = [r["pass_at_1"][mode][str(t)][0] for t in ts]
            best = [max(r["pass_at_1"][m][str(t)][0] for m in RUNS) for t in ts]
            gaps = [b - o for b, o in zip(best, own, strict=True)]
            worst.append(min(own))
            worst_t.append(ts[int(np.argmin(own))])
            worst_gap.append(max(gaps))
            gap_t.append(ts[int(np.argmax(gaps))])
        w = t_interval(worst)
        g = t_interval(worst_gap)
        lines.append(
            f"| {mode} | {w[0]:.3f} [{w[1]:.3f}, {w[2]:.3f}] | {_mode_of(worst_t)} | "
            f"{g[0]:.3f} [{g[1]:.3f}, {g[2]:.3f}] | {_mode_of(gap_t)} |"
        )
    for baseline in BASELINES:
        lines += ["", f"Gain over `{baseline}`: empirical change of Pass@(1,T) (the two-clock "
                  "model's single-step / recovery shares), means over seeds.", ""]
        lines.append("| candidate | " + " | ".join(f"T={t}" for t in ts) + " |")
        lines.append("|---|" + "---|" * len(ts))
        for mode in RUNS:
            if mode == baseline:
                continue
            cells = []
            for t in ts:
                rows = [r["decomposition"][baseline][mode][str(t)] for r in results]
                delta = np.mean([x["delta"] for x in rows])
                single = np.mean([x["single_step"] for x in rows])
                recovery = np.mean([x["recovery"] for x in rows])
                cells.append(f"{delta:+.3f} ({single:+.3f} / {recovery:+.3f})")
            lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    lines += ["", "Behaviour (turns' ground truth), mean over seeds: share of `fast` among the choices "
              "outside a spell / share of `retry` among those inside one.", ""]
    lines.append("| policy | " + " | ".join(f"T={t}" for t in ts) + " |")
    lines.append("|---|" + "---|" * len(ts))
    for mode in RUNS:
        cells = []
        for t in ts:
            fast = _nanmean([r["behaviour"][mode][str(t)]["fast"] for r in results])
            retry = _nanmean([r["behaviour"][mode][str(t)]["retry"] for r in results])
            cells.append(f"{fast:.2f} / {retry:.2f}")
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    budgets = list(results[0]["adaptive_schedule"])
    weights = [np.mean([r["adaptive_schedule"][b] for r in results]) for b in budgets]
    lines += ["", f"`{ADAPTIVE}` schedule (planned from `fixed:24`'s rollouts, shortfall evidence, "
              "floor 0.2), mean weights over seeds: "
              + ", ".join(f"T={b}: {w:.3f}" for b, w in zip(budgets, weights, strict=True)) + "."]
    walls = [r["train_sim_wall_s"] for r in results]
    per_mode = {m: np.mean([r["mode_wall_s"][m] for r in results]) for m in MODES}
    lines += ["", f"train-sim wall time per seed (four modes, training and evaluation): "
              f"mean {np.mean(walls):.0f} s (min {min(walls):.0f}, max {max(walls):.0f}); per "
              "mode: " + ", ".join(f"{m} {s:.0f} s" for m, s in per_mode.items()) + "."]
    return "\n".join(lines)


def _nanmean(values: list[float | None]) -> float:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else math.nan


def _mode_of(values: list[int]) -> str:
    """Most common value, with the per-seed list."""
    counts = {v: values.count(v) for v in values}
    top = max(counts, key=lambda v: (counts[v], -v))
    return f"{top} ({', '.join(map(str, values))})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4", help="Comma-separated seeds.")
    parser.add_argument("--work", type=Path, default=Path("bench-out/budgetmix"),
                        help="Folder for rollouts, reports and results.json.")
    parser.add_argument("--n-boot", type=int, default=1000,
                        help="Bootstrap resamples of recovery analyze.")
    parser.add_argument("extra", nargs="*", help="Options passed on to train-sim (after --).")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    args.work.mkdir(parents=True, exist_ok=True)
    results = [seed_results(seed, args.work, args.extra, args.n_boot) for seed in seeds]
    (args.work / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print(tables(results))


if __name__ == "__main__":
    main()
