"""The structured PRM (hindsight) on Who&When: which step and which agent decided a failure.

Reads both folders of ``../shared/data/who-and-when/`` with :mod:`recovery.formats.whowhen`,
computes the hindsight features of every message (:mod:`prm.data.features`), and runs 5-fold
cross-validation grouped by question: per fold a structured model is fitted with the decisive
step as the error (target 0) and every other message as not (target 1), a one-against-the-rest
localisation target; the predicted decisive step of a run is its lowest-scored message (the
first such on ties), and the predicted agent is the agent of that message. Beside it: the
floor of always predicting the most common decisive step (and agent) of the other folds, the
expected accuracy of a uniformly random step, and the published GPT-4o results. The
cross-validation is repeated with fold seeds ``seed .. seed + repeats - 1`` and each run's
hits averaged over the repeats (repeated cross-validation: one assignment of questions to
folds does not decide the result). Intervals: 95% percentile bootstrap over questions of those
per-run averages (paired for the difference to the floor).

    .venv/bin/python bench/prm_whowhen.py [--folds 5] [--seed 0] [--repeats 5] [--n-boot 2000]
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "who-and-when"
PUBLISHED = {  # GPT-4o step-level accuracy (%), with ground truth: random, best method
    "Algorithm-Generated": {"random": 19.06, "best": 25.51, "best_method": "step-by-step"},
    "Hand-Crafted": {"random": 4.16, "best": 7.02, "best_method": "step-by-step"},
}


def agent_key(name: object) -> str:
    """An agent's name compared: lower case, a trailing ``(...)`` such as ``(thought)`` off."""
    return re.sub(r"\s*\(.*\)\s*$", "", str(name or "")).strip().lower()


def load(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Per message the hindsight features; per run its decisive step and agent."""
    from prm.linear.structured_rows import feature_rows
    from recovery.formats.base import ReadOptions
    from recovery.formats.whowhen import read
    from recovery.store import open_store

    store = open_store(None)
    store.ingest_trajectories([t for t in read(folder, ReadOptions()) if hasattr(t, "turns")])
    table, names, _ = feature_rows(store.con, "hindsight")
    facts = store.con.execute(
        """
        SELECT u.traj_id, u.t, json_extract_string(u.meta, '$.agent') AS agent,
               coalesce(u.label = -1, false) AS decisive, tr.n_turns,
               json_extract_string(tr.meta, '$.mistake_agent') AS mistake_agent
        FROM turns u JOIN trajectories tr USING (traj_id) ORDER BY u.traj_id, u.t
        """
    ).df()
    store.close()
    table = table.merge(facts[["traj_id", "t", "agent", "decisive"]], on=["traj_id", "t"])
    runs = facts.loc[facts["decisive"]].rename(columns={"t": "step"})[
        ["traj_id", "step", "n_turns", "mistake_agent"]]
    runs = runs.merge(table[["traj_id", "task_id"]].drop_duplicates(), on="traj_id")
    return table, runs.reset_index(drop=True), names


def cross_validate(table: pd.DataFrame, runs: pd.DataFrame, names: list[str], folds: int,
                   seed: int) -> pd.DataFrame:
    """Per run: predicted step and agent of the model and of the floor, out of fold."""
    from sklearn.model_selection import GroupKFold

    from prm.linear.structured import StructuredStepModel

    fold = np.zeros(len(runs), int)
    splitter = GroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    for k, (_, test) in enumerate(splitter.split(runs, groups=runs["task_id"])):
        fold[test] = k
    runs = runs.assign(fold=fold)
    table = table.merge(runs[["traj_id", "fold"]], on="traj_id")
    table["target"] = 1.0 - table["decisive"].astype(float)
    out = []
    for k in range(folds):
        train = table.loc[table["fold"] != k].reset_index(drop=True)
        test = table.loc[table["fold"] == k].reset_index(drop=True)
        model = StructuredStepModel(setting="hindsight", head="binary", seed=seed)
        model.fit(train, train["target"], names)
        test["score"] = model.score_steps(test)["score"].to_numpy()
        picked = test.sort_values(["traj_id", "score", "t"]).groupby("traj_id").first()
        other = runs.loc[runs["fold"] != k]
        common_step = int(other["step"].value_counts().sort_index().idxmax())
        common_agent = other["mistake_agent"].map(agent_key).value_counts().idxmax()
        part = runs.loc[runs["fold"] == k].set_index("traj_id")
        part["pred_step"] = picked["t"].reindex(part.index)
        part["pred_agent"] = picked["agent"].reindex(part.index).map(agent_key)
        part["floor_step"] = common_step
        part["floor_agent"] = common_agent
        out.append(part.reset_index())
    result = pd.concat(out, ignore_index=True)
    truth = result["mistake_agent"].map(agent_key)
    result["step_hit"] = (result["pred_step"] == result["step"]).astype(float)
    result["agent_hit"] = (result["pred_agent"] == truth).astype(float)
    result["floor_step_hit"] = (result["floor_step"] == result["step"]).astype(float)
    result["floor_agent_hit"] = (result["floor_agent"] == truth).astype(float)
    result["random_step_hit"] = 1.0 / result["n_turns"]
    return result


def repeated(table: pd.DataFrame, runs: pd.DataFrame, names: list[str], folds: int,
             seeds: list[int]) -> tuple[pd.DataFrame, list[float]]:
    """:func:`cross_validate` once per fold seed; per run (``runs``' columns) the share of the
    repeats that hit (step, agent and the floors'), and each repeat's step accuracy."""
    results = [cross_validate(table, runs, names, folds, seed) for seed in seeds]
    hits = ["step_hit", "agent_hit", "floor_step_hit", "floor_agent_hit", "random_step_hit"]
    mean = pd.concat([r.set_index("traj_id")[hits] for r in results]).groupby(level=0).mean()
    return (runs.set_index("traj_id").join(mean).reset_index(),
            [float(r["step_hit"].mean()) for r in results])


def intervals(result: pd.DataFrame, n_boot: int, seed: int) -> dict[str, list[float]]:
    """Percentile bootstrap over questions of each share and of the paired differences."""
    _, task = np.unique(result["task_id"], return_inverse=True)
    n = int(task.max()) + 1
    draws = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_boot)
    counts = draws @ np.bincount(task, minlength=n)
    columns = {c: result[c].to_numpy(float) for c in
               ("step_hit", "agent_hit", "floor_step_hit", "floor_agent_hit")}
    columns["step_minus_floor"] = columns["step_hit"] - columns["floor_step_hit"]
    columns["agent_minus_floor"] = columns["agent_hit"] - columns["floor_agent_hit"]
    out = {}
    for name, values in columns.items():
        series = draws @ np.bincount(task, values, n) / counts
        out[name] = [float(x) for x in np.percentile(series, [2.5, 97.5])]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="the first fold seed")
    parser.add_argument("--repeats", type=int, default=5,
                        help="repeated cross-validation: fold seeds seed, seed + 1, ...")
    parser.add_argument("--n-boot", type=int, default=2000)
    parser.add_argument("--data", type=Path, default=DATA)
    args = parser.parse_args()
    if not args.data.exists():
        raise SystemExit(f"Who&When not found at {args.data}")

    def pct(x: float) -> str:
        return f"{100 * x:5.2f}"

    def ci(pair: list[float], sign: str = "+") -> str:
        return f"[{100 * pair[0]:{sign}.1f}, {100 * pair[1]:{sign}.1f}]"

    print(f"| Who&When, hindsight, {args.folds}-fold by question x {args.repeats} | runs | structured step acc % [95%] | "
          "most common step (floor) % | structured - floor [95%] | random % | GPT-4o best "
          "(random) % | structured agent acc % [95%] | most common agent % | agent - floor "
          "[95%] | seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    repeats_line: list[str] = []
    for folder in ("Algorithm-Generated", "Hand-Crafted"):
        started = time.perf_counter()
        table, runs, names = load(args.data / folder)
        seeds = list(range(args.seed, args.seed + args.repeats))
        result, per_repeat = repeated(table, runs, names, args.folds, seeds)
        ci95 = intervals(result, args.n_boot, args.seed)
        published = PUBLISHED[folder]
        print(f"| {folder} | {len(result)} | {pct(result['step_hit'].mean())} "
              f"{ci(ci95['step_hit'], '')} | {pct(result['floor_step_hit'].mean())} | "
              f"{100 * (result['step_hit'] - result['floor_step_hit']).mean():+.2f} "
              f"{ci(ci95['step_minus_floor'])} | {pct(result['random_step_hit'].mean())} | "
              f"{published['best']:.2f} ({published['random']:.2f}) | "
              f"{pct(result['agent_hit'].mean())} {ci(ci95['agent_hit'], '')} | "
              f"{pct(result['floor_agent_hit'].mean())} | "
              f"{100 * (result['agent_hit'] - result['floor_agent_hit']).mean():+.2f} "
              f"{ci(ci95['agent_minus_floor'])} | {time.perf_counter() - started:.1f} |")
        repeats_line.append(f"{folder}: " + ", ".join(pct(x).strip() for x in per_repeat))
    print("step accuracy % of each repeat (fold seeds "
          f"{args.seed}..{args.seed + args.repeats - 1}): " + "; ".join(repeats_line))


if __name__ == "__main__":
    main()
