"""The training course of each mode: ``recovery analyze --series run`` (the library call) over
each seed's checkpoint rollouts, summarised as means over seeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.budgetmix_lm.report import _cell, t_interval


def seed_series(folder: Path, budgets: list[int], n_boot: int, seed: int) -> list[dict[str, Any]]:
    """The ``series`` points of one mode's checkpoints in ``folder`` (``<mode>-<step>.jsonl``)."""
    from analyses.report.analyze import AnalyzeConfig, analyze

    files = sorted(folder.glob("*.jsonl"))
    if len(files) < 2:
        return []
    report = analyze(AnalyzeConfig(files=files, mode="budgeted", series="run", k=[1],
                                   t=[str(t) for t in budgets], n_boot=n_boot, seed=seed,
                                   quiet=True))
    return report.to_dict()["series"]


def series_table(work: Path, seeds: list[int], budgets: list[int], modes: list[str],
                 n_boot: int = 200) -> str:
    """Per mode and checkpoint step: Pass@(1,T) at each budget and the change at the long
    budget against the first checkpoint (single-step / recovery), means over seeds
    [95% t-interval over seeds]."""
    from bench.budgetmix_trl import mode_slug

    long_ = budgets[-1]
    lines = [f"Training course (checkpoint rollouts; `recovery analyze --series run`), mean over "
             f"seeds [95% t-interval over seeds]; change = Pass@(1,{long_}) minus step 0's.", "",
             "| mode | step | " + " | ".join(f"T={t}" for t in budgets)
             + f" | change at T={long_} | single-step | recovery |",
             "|---" * (len(budgets) + 5) + "|"]
    for mode in modes:
        by_step: dict[int, list[dict[str, Any]]] = {}
        for seed in seeds:
            folder = work / f"seed-{seed}" / "series" / mode_slug(mode)
            for point in seed_series(folder, budgets, n_boot, seed):
                by_step.setdefault(int(point["step"]), []).append(point)
        for step in sorted(by_step):
            points = by_step[step]
            cells = [_cell([_pass(p, t) for p in points]) for t in budgets]
            parts = [_signed([_part(p, long_, key) for p in points]) if step else "-"
                     for key in ("delta", "single_step", "recovery")]
            lines.append(f"| {mode} | {step} | " + " | ".join(cells + parts) + " |")
    return "\n".join(lines)


def _pass(point: dict[str, Any], t: int) -> float:
    return next(c["value"] for c in point["pass_at_1"] if c["t"] == t)


def _part(point: dict[str, Any], t: int, key: str) -> float:
    return next((c[key] for c in point.get("components") or [] if c["t"] == t), float("nan"))


def _signed(values: list[float]) -> str:
    mean, lo, hi = t_interval(values)
    return f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]"
