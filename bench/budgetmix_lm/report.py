"""The bench's tables: Pass@(1,T) per mode with t-intervals over seeds, robustness across
budgets, and the gain decomposition against the long fixed budget."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% Student-t interval over seeds (NaN bounds with one seed)."""
    from scipy import stats

    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    if x.size < 2:
        return float(x.mean()), math.nan, math.nan
    half = float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return float(x.mean()), float(x.mean()) - half, float(x.mean()) + half


def _cell(values: list[float]) -> str:
    mean, lo, hi = t_interval(values)
    return f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def tables(results: list[dict[str, Any]], config: Any) -> str:
    """Markdown tables: Pass@(1,T), robustness across budgets, the gain decomposition."""
    ts, modes = [str(t) for t in config.budgets], config.modes
    lines = [f"Pass@(1,T), mean over {len(results)} seeds [95% t-interval over seeds]; "
             "`recovery analyze --mode budgeted`.", "",
             "| mode | " + " | ".join(f"T={t}" for t in ts) + " |", "|---|" + "---|" * len(ts)]
    for mode in modes:
        lines.append(f"| {mode} | " + " | ".join(
            _cell([r["pass_at_1"][mode].get(t, math.nan) for r in results]) for t in ts) + " |")
    lines += ["", "| mode | worst Pass@(1,T) | T where worst (per seed) | worst shortfall vs best "
              "mode | T where (per seed) |", "|---|---|---|---|---|"]
    for mode in modes:
        worst, gap, worst_t, gap_t = [], [], [], []
        for r in results:
            own = [r["pass_at_1"][mode][t] for t in ts]
            gaps = [max(r["pass_at_1"][m][t] for m in modes) - o for t, o in zip(ts, own, strict=True)]
            worst.append(min(own))
            gap.append(max(gaps))
            worst_t.append(ts[int(np.argmin(own))])
            gap_t.append(ts[int(np.argmax(gaps))])
        lines.append(f"| {mode} | {_cell(worst)} | {', '.join(worst_t)} | {_cell(gap)} | "
                     f"{', '.join(gap_t)} |")
    lines += ["", f"Gain over `{modes[1]}`: change of Pass@(1,T) (single-step / recovery shares), "
              "means over seeds.", "", "| candidate | " + " | ".join(f"T={t}" for t in ts) + " |",
              "|---|" + "---|" * len(ts)]
    for mode in modes:
        if mode == modes[1]:
            continue
        cells = []
        for t in ts:
            rows = [r["decomposition"].get(mode, {}).get(t) for r in results]
            rows = [x for x in rows if x]
            parts = [np.nanmean([np.nan if x[k] is None else x[k] for x in rows]) if rows
                     else math.nan for k in ("delta", "single_step", "recovery")]
            cells.append(f"{parts[0]:+.3f} ({parts[1]:+.3f} / {parts[2]:+.3f})")
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    lines += paired_table(results, ts, modes) + mechanism_table(results, ts, modes)
    weights = {b: np.mean([r["adaptive_schedule"][b] for r in results])
               for b in results[0]["adaptive_schedule"]}
    lines += ["", "`budgetmix-adaptive` schedule (mean weights over seeds): "
              + ", ".join(f"T={b}: {w:.3f}" for b, w in weights.items()) + "."]
    walls = {m: np.mean([r["wall_s"][m] for r in results]) for m in modes}
    lines.append("Wall time per mode (training and evaluation, mean over seeds): "
                 + ", ".join(f"{m} {s:.0f} s" for m, s in walls.items()) + ".")
    cpus = {m: np.mean([r["cpu_s"][m] for r in results if "cpu_s" in r]) for m in modes}
    lines.append("CPU time per mode (mean over seeds): "
                 + ", ".join(f"{m} {s:.0f} s" for m, s in cpus.items()) + ".")
    return "\n".join(lines)


def paired_table(results: list[dict[str, Any]], ts: list[str], modes: list[str]) -> list[str]:
    """Paired differences against ``modes[1]`` (the long fixed budget), per budget: mean over
    seeds of (mode - baseline) on the same seed's tasks, 95% t-interval over seeds; and the
    smallest difference the size can detect (the interval's half-width)."""
    base = modes[1]
    lines = ["", f"Paired difference against `{base}` (same seed, same held-out tasks), mean over "
             f"{len(results)} seeds [95% t-interval]; * where the interval excludes 0.", "",
             "| mode | " + " | ".join(f"T={t}" for t in ts) + " |", "|---|" + "---|" * len(ts)]
    halves = []
    for mode in modes:
        if mode == base:
            continue
        cells = []
        for t in ts:
            diffs = [r["pass_at_1"][mode][t] - r["pass_at_1"][base][t] for r in results]
            mean, lo, hi = t_interval(diffs)
            halves.append((hi - lo) / 2)
            star = "*" if lo > 0 or hi < 0 else ""
            cells.append(f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]{star}")
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    finite = [h for h in halves if not math.isnan(h)]
    if finite:
        lines += ["", "Smallest detectable paired difference at this size (median interval "
                  f"half-width): {np.median(finite):.3f}."]
    else:
        lines += ["", "One seed: no interval over seeds."]
    return lines


def mechanism_table(results: list[dict[str, Any]], ts: list[str], modes: list[str]) -> list[str]:
    """Teacher-forced P(fast | T turns left) at the first turn, per mode, mean over seeds."""
    if not all("p_fast" in r for r in results):
        return []
    lines = ["", "Mechanism: P(fast tool | T turns left) at the first turn (bank tasks, "
             "teacher-forced), mean over seeds [95% t-interval].", "",
             "| policy | " + " | ".join(f"T={t}" for t in ts) + " |", "|---|" + "---|" * len(ts)]
    for mode in ["warm start", *modes]:
        lines.append(f"| {mode} | " + " | ".join(
            _cell([r["p_fast"][mode][t] for r in results]) for t in ts) + " |")
    return lines
