"""The go / no-go pilot: ``fixed:S`` against ``fixed:L`` from one warm start, one seed.

It passes when the two policies learned different behaviour (teacher-forced P(fast | S turns
left) on a fixed bank of states at least 0.75 for ``fixed:S`` and at most 0.3 for
``fixed:L``) and their Pass@(1,S) differs by at least 0.1; otherwise it says "no test possible
at this size" with the numbers. The thresholds are fixed here, not tuned to the outcome.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

P_FAST_SHORT, P_FAST_LONG, PASS_GAP = 0.75, 0.3, 0.1


def cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads) and its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(model: Any, tokenizer: Any, tools: list, bank: list, rows: list,
            budgets: list[int], samples: int, seed: int) -> dict[str, Any]:
    """P(fast | S turns left) on the bank, Pass@(1,T) at each budget, the well-formed rate."""
    from bench.budgetmix_lm.probe import p_fast
    from bench.budgetmix_lm.rollout import rollouts

    trajectories, well_formed = rollouts(model, tokenizer, tools, rows, budgets, samples,
                                         "pilot", seed)
    pass1 = {str(b): float(np.mean([t.success for t in trajectories if t.budget == b]))
             for b in budgets}
    return {"p_fast_short": p_fast(model, tokenizer, tools, bank), "pass_at_1": pass1,
            "well_formed": well_formed, "episodes": len(trajectories)}


def summarise_log(log: list[dict[str, float]]) -> dict[str, float]:
    """Means over the GRPO steps of the bench's per-step stats, entropy first and last."""
    def mean(key: str) -> float:
        values = [row[key] for row in log if key in row]
        return float(np.mean(values)) if values else float("nan")

    entropy = [row["entropy"] for row in log if "entropy" in row]
    return {"steps_logged": len(log), "tied_groups": mean("tied_groups"),
            "well_formed": mean("well_formed"), "train_success": mean("success"),
            "skipped_steps": float(log[-1].get("skipped_steps", 0)) if log else 0.0,
            "entropy_first": entropy[0] if entropy else float("nan"),
            "entropy_last": entropy[-1] if entropy else float("nan")}


def verdict(record: dict[str, Any], short: int, long_: int) -> tuple[bool, str]:
    """Whether the pilot passes, and the line that says so."""
    s, lo = record[f"fixed:{short}"], record[f"fixed:{long_}"]
    gap = s["pass_at_1"][str(short)] - lo["pass_at_1"][str(short)]
    ok = (s["p_fast_short"] >= P_FAST_SHORT and lo["p_fast_short"] <= P_FAST_LONG
          and abs(gap) >= PASS_GAP)
    numbers = (f"P(fast | {short} turns left) fixed:{short} {s['p_fast_short']:.3f} "
               f"(needs >= {P_FAST_SHORT}), fixed:{long_} {lo['p_fast_short']:.3f} "
               f"(needs <= {P_FAST_LONG}); Pass@(1,{short}) difference {gap:+.3f} "
               f"(needs |d| >= {PASS_GAP})")
    return ok, ("pilot passes: " if ok else "no test possible at this size: ") + numbers


def run_pilot(config: Any, work: Path) -> int:
    """Run the pilot, print its numbers and verdict, write ``WORK/pilot.json``; returns 0."""
    from analyses.budgetmix.assign import with_budgets
    from bench.budgetmix_lm.probe import state_bank
    from bench.budgetmix_lm.splits import split_rows
    from bench.budgetmix_trl import train_policy, warm_start

    wall, cpu = time.perf_counter(), cpu_seconds()
    seed, short, long_ = config.seeds[0], config.budgets[0], config.budgets[-1]
    splits = split_rows(seed, config.sizes())
    tokenizer, start, tools = warm_start(config, seed, splits["warmup"])
    bank = state_bank(splits["bank"], short, long_, seed)
    args = (tokenizer, tools, bank, splits["eval"], [short, long_], config.eval_samples,
            seed + 1000)
    record: dict[str, Any] = {"config": {k: getattr(config, k) for k in (
        "seeds", "budgets", "steps", "batch", "generations", "learning_rate", "beta",
        "train_tasks", "eval_tasks", "eval_samples", "sft_tasks", "warmup_steps")},
        "bank_states": len(bank), "warm_start": measure(start, *args)}
    _show("warm start", record["warm_start"], short, long_)
    for budget in (short, long_):
        mode = f"fixed:{budget}"
        rows = with_budgets(splits["train"], [budget] * len(splits["train"]), trainer="trl")
        began = time.perf_counter()
        policy, log = train_policy(mode, start, tokenizer, rows, config, seed, work)
        record[mode] = {**measure(policy, *args), "train": summarise_log(log), "log": log,
                        "wall_s": time.perf_counter() - began}
        _show(mode, record[mode], short, long_)
    record["passed"], record["verdict"] = verdict(record, short, long_)
    record["wall_s"], record["cpu_s"] = time.perf_counter() - wall, cpu_seconds() - cpu
    (work / "pilot.json").write_text(json.dumps(record, indent=1, default=float) + "\n")
    print(record["verdict"])
    print(f"Pilot wall time {record['wall_s']:.0f} s, CPU time {record['cpu_s']:.0f} s "
          f"({len(bank)} bank states; {record['warm_start']['episodes']} evaluation episodes "
          "per policy).", flush=True)
    return 0


def _show(name: str, m: dict[str, Any], short: int, long_: int) -> None:
    train = m.get("train")
    extra = "" if not train else (
        f"; GRPO: tied groups {train['tied_groups']:.2f}, skipped steps "
        f"{train['skipped_steps']:.0f}, entropy {train['entropy_first']:.3f} -> "
        f"{train['entropy_last']:.3f}, well-formed {train['well_formed']:.3f}, "
        f"{m['wall_s']:.0f} s")
    print(f"  {name}: P(fast | {short} left) {m['p_fast_short']:.3f}, Pass@(1,{short}) "
          f"{m['pass_at_1'][str(short)]:.3f}, Pass@(1,{long_}) {m['pass_at_1'][str(long_)]:.3f}, "
          f"well-formed {m['well_formed']:.3f}{extra}", flush=True)
