"""Cross-validated step AUROC of the PRM backbones side by side (``prm cv`` on each).

Two data sets with known step labels:

- ``sim``: simulator runs (``recovery simulate``, policies base and rl) labelled from the
  simulator's ground truth as a human labeller would: -1 on a true error (visible or silent),
  0 on a stall (a turn that changes nothing), +1 else. Ternary, like AgentProcessBench.
  ``--p-error``, ``--p-silent`` and ``--p-progress`` set those policy parameters of both
  policies, e.g. to give the label mix of a human-labelled set (mostly +1, few -1).
- ``search``: synthetic search-agent runs shaped like a human-labelled search benchmark
  (:func:`search_store`): 50 questions x 5 samples, ternary labels, most first errors a wrong
  final answer, so that the outcome-aware rule is a hard floor in hindsight.
  ``--search-visible`` is the share of bad search steps whose result comes back empty (the
  rest show nothing: only the outcome hints at them).
- ``tau``: the tau-bench airline results in ../shared/data, with tool errors as the labels
  (``--tau-labels error``: a turn whose tool answered ``Error:`` is -1, every other turn +1;
  the error is in the observation, so this is easy) or the outcome (``--tau-labels outcome``:
  every turn of a failed episode is -1, of a successful one +1: whether the episode is on its
  way to success, from the turns so far).

For each backbone it runs the cross-validation of ``prm cv`` (grouped by task, 5 folds) and
prints the pooled step AUROC with its bootstrap interval over tasks, step and first-error
accuracy beside their floors, the seconds it took and the CPU seconds of this process
(``time.process_time``: all its threads). ``--setting hindsight`` adds the outcome-aware
floor (and lets ``structured`` read the outcome). Run one at a time on a shared machine:

    .venv/bin/python bench/prm_cv.py --data sim --backbones structured,tfidf,tiny,minilm
    .venv/bin/python bench/prm_cv.py --data tau --tau-labels outcome --backbones tfidf,tiny,minilm
    .venv/bin/python bench/prm_cv.py --data sim --tasks 50 --backbones smollm2
    .venv/bin/python bench/prm_cv.py --data tau --tau-labels outcome \\
        --backbones structured,tfidf --fold-seeds 0,1,2,3,4
    .venv/bin/python bench/prm_cv.py --data search --search-visible 0 --backbones structured \\
        --setting hindsight

``--fold-seeds`` repeats each cross-validation over several fold assignments (the data stay
the same) and prints the mean step AUROC and mean paired difference over them: on 50 tasks one
fold assignment's luck moves a backbone's AUROC by a few hundredths.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TAU_AIRLINE = ROOT.parent / "shared" / "data" / "tau-bench" / "gpt-4o-airline.json"
TRUTH_LABELS_SQL = (
    "UPDATE turns SET label = CASE "
    "WHEN json_extract_string(meta, '$.true_error') IS NOT NULL THEN -1.0 "
    "WHEN json_extract_string(meta, '$.event') = 'stall' THEN 0.0 ELSE 1.0 END"
)


def sim_store(folder: Path, tasks: int, seed: int, overrides: dict[str, float] | None = None,
              samples: int = 1) -> Path:
    """Simulator runs (``samples`` per task and policy, budget 30) with ternary truth labels;
    ``overrides`` replaces policy parameters (``p_error``, ...) of both policies."""
    from dataclasses import replace

    from recovery.simulate import PRESETS, SimConfig, simulate
    from recovery.store import open_store

    store = folder / f"sim-{tasks}.duckdb"
    opened = open_store(store)
    policies = {name: replace(PRESETS[name], **(overrides or {})) for name in ("base", "rl")}
    config = SimConfig(policies=policies, n_tasks=tasks, n_samples=samples,
                       budgets=[30], seed=seed)
    for trajectories in simulate(config).values():
        opened.ingest_trajectories(trajectories)
    opened.con.execute(TRUTH_LABELS_SQL)
    opened.close()
    return store


SEARCH_WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
                "kappa", "lambda", "mu", "nu", "xi", "omicron", "pi", "rho", "sigma", "tau",
                "upsilon", "phi", "chi", "psi", "omega")


def search_trajectories(seed: int = 0, visible: float = 0.5, questions: int = 50,
                        samples: int = 5, p_bad: float = 0.12, p_neutral: float = 0.15
                        ) -> list:
    """Search-agent runs: per question a hidden difficulty; per sample a few searches (their
    number grows with the difficulty), each -1 with ``p_bad`` (its result empty with
    probability ``visible``, else looking like any other; a bad search sends the sample astray
    half the time), 0 with ``p_neutral``, else +1; then a final answer, right (+1, success)
    with a probability that falls with the difficulty and with going astray, else -1."""
    import random

    from recovery.schema import Trajectory, Turn

    rng = random.Random(seed)
    out = []
    for q in range(questions):
        topic = " ".join(rng.sample(SEARCH_WORDS, 3))
        answer = f"{rng.choice(SEARCH_WORDS)} {rng.randint(1, 99)}"
        wrongs = [f"{rng.choice(SEARCH_WORDS)} {rng.randint(1, 99)}" for _ in range(3)]
        difficulty = rng.random()
        for k in range(samples):
            turns, astray = [], False
            for _ in range(rng.randint(1, 3) + int(difficulty * 4 * rng.random())):
                draw = rng.random()
                value = answer if rng.random() < 0.6 else rng.choice(wrongs)
                observation = f"Result: {topic} ... the value is {value}"
                label = 1.0
                if draw < p_bad:
                    label = -1.0
                    observation = "" if rng.random() < visible else observation
                    astray = astray or rng.random() < 0.5
                elif draw < p_bad + p_neutral:
                    label = 0.0
                query = f"{topic} {rng.choice(SEARCH_WORDS)}"
                turns.append(Turn(action=f'search(query="{query}")', observation=observation,
                                  label=label))
            right = rng.random() < (0.85 - 0.6 * difficulty) * (0.4 if astray else 1.0)
            final = answer if right else rng.choice(wrongs)
            turns.append(Turn(action=f"The answer is {final}.", label=1.0 if right else -1.0,
                              done=True))
            out.append(Trajectory(run="agent", task_id=f"q{q}", turns=turns, success=right,
                                  sample=k))
    return out


def search_store(folder: Path, seed: int, visible: float) -> Path:
    """:func:`search_trajectories` ingested (labels as given)."""
    from recovery.store import open_store

    store = folder / "search.duckdb"
    opened = open_store(store)
    opened.ingest_trajectories(search_trajectories(seed, visible), source="bench-search")
    opened.close()
    return store


def tau_store(folder: Path, tasks: int | None = None) -> Path:
    """The tau-bench airline results, ingested (tool errors marked by the format's rules);
    with ``tasks``, only the first that many tasks (by id) are kept."""
    from recovery.store import open_store

    if not TAU_AIRLINE.exists():
        raise SystemExit(f"{TAU_AIRLINE} not found")
    store = folder / "tau-airline.duckdb"
    opened = open_store(store)
    opened.ingest_file(TAU_AIRLINE)
    if tasks is not None:
        keep = ("SELECT traj_id FROM trajectories WHERE task_id IN (SELECT DISTINCT task_id "
                f"FROM trajectories ORDER BY task_id LIMIT {int(tasks)})")
        for table in ("turns", "error_spells", "trajectories"):
            opened.con.execute(f"DELETE FROM {table} WHERE traj_id NOT IN ({keep})")
    opened.close()
    return store


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", choices=("sim", "search", "tau"), default="sim")
    parser.add_argument("--backbones", default="structured,tfidf,tiny,minilm",
                        help="kinds (structured, tfidf) or backbones (tiny, minilm, ...)")
    parser.add_argument("--setting", choices=("blind", "hindsight"), default="blind")
    parser.add_argument("--samples", type=int, default=1,
                        help="sim: samples per task and policy (siblings for structured)")
    parser.add_argument("--tasks", type=int, default=125, help="sim: tasks (x 2 policies)")
    parser.add_argument("--search-visible", type=float, default=0.5,
                        help="search: share of bad searches whose result comes back empty")
    parser.add_argument("--tau-labels", choices=("error", "outcome"), default="error")
    parser.add_argument("--tau-tasks", type=int, default=None,
                        help="tau: keep only the first N tasks (of 50; 4 trajectories each)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="the folds' seed (sim: the data's)")
    parser.add_argument("--fold-seeds", default=None,
                        help="comma-separated fold seeds to repeat the cross-validation over "
                             "(default: --seed only); the data stay those of --seed")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--json", type=Path, default=None, help="write every report here")
    for name in ("p_error", "p_silent", "p_progress"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=float, default=None,
                            help=f"sim: {name} of both policies (default: the presets')")
    return parser.parse_args()


def print_table(results: dict[tuple[str, int], dict]) -> None:
    print(f"{'backbone':<10} {'seed':>4} {'mode':<8} {'step AUROC [95% over tasks]':<30} "
          f"{'step acc':>9} {'floor':>6} {'first err':>9} {'floor':>6} {'seconds':>8} "
          f"{'CPU s':>7}")
    for (backbone, seed), r in results.items():
        low, high = r["intervals"].get("step_auroc") or (float("nan"), float("nan"))
        print(f"{backbone:<10} {seed:>4} {r['mode']:<8} {r['step_auroc']:.3f} "
              f"[{low:.3f}, {high:.3f}]{'':<12} {r['step_acc']:>9.3f} "
              f"{r['floor_all_correct_step_acc']:>6.3f} {r['first_error_acc']:>9.3f} "
              f"{r['floor_all_correct_first_error_acc']:>6.3f} {r['wall_s']:>8.0f} "
              f"{r['cpu_s']:>7.0f}")


def print_paired(predictions: dict[tuple[str, int], object], names: list[str],
                 seeds: list[int]) -> dict[str, dict]:
    """Each backbone against every one listed before it, per fold seed; with several seeds
    also the mean difference and AUROC over them (the folds' luck averaged out)."""
    from prm.evaluation.metrics import paired_auroc_difference

    paired: dict[str, dict] = {}
    for j, x in enumerate(names):
        for y in names[:j]:
            differences = []
            for seed in seeds:
                result = paired_auroc_difference(predictions[x, seed], predictions[y, seed],
                                                 seed=seed)
                paired[f"{x} - {y} (fold seed {seed})"] = result
                differences.append(result["difference"])
                low, high = result["interval"] or (float("nan"), float("nan"))
                print(f"step AUROC {x} - {y}, fold seed {seed}: {result['difference']:+.3f} "
                      f"[{low:+.3f}, {high:+.3f}] (paired bootstrap over tasks)")
            if len(seeds) > 1:
                ahead = sum(d > 0 for d in differences)
                mean = sum(differences) / len(differences)
                paired[f"{x} - {y} (mean over fold seeds)"] = {"difference": mean}
                print(f"step AUROC {x} - {y}, mean over {len(seeds)} fold seeds: {mean:+.3f} "
                      f"({x} ahead on {ahead} of {len(seeds)})")
    return paired


def import_shared_libraries() -> None:
    """Import what every backbone uses before any is timed, so that the first one listed does
    not pay the others' import time (torch, which only the neural backbones need, stays theirs).
    """
    import duckdb  # noqa: F401
    import pandas  # noqa: F401
    import scipy.sparse  # noqa: F401
    import sklearn.feature_extraction.text
    import sklearn.linear_model
    import sklearn.metrics  # noqa: F401


def main() -> None:
    args = parse_args()
    overrides = {name: getattr(args, name) for name in ("p_error", "p_silent", "p_progress")
                 if getattr(args, name) is not None}
    seeds = ([int(s) for s in args.fold_seeds.split(",")] if args.fold_seeds
             else [args.seed])
    names = args.backbones.split(",")

    from prm.evaluation.cv import CVConfig, cross_validate
    from prm.kinds import KIND_NAMES

    import_shared_libraries()
    results, predictions = {}, {}
    with tempfile.TemporaryDirectory(prefix="prm-cv-bench-") as tmp:
        folder = Path(tmp)
        if args.data == "sim":
            store, labels = sim_store(folder, args.tasks, args.seed, overrides,
                                      args.samples), "data"
        elif args.data == "search":
            store, labels = search_store(folder, args.seed, args.search_visible), "data"
        else:
            store, labels = tau_store(folder, args.tau_tasks), args.tau_labels
        for seed in seeds:
            for backbone in names:
                which = ({"model_kind": backbone} if backbone in KIND_NAMES
                         else {"backbone": backbone})
                config = CVConfig(store=store, labels=labels, **which,
                                  folds=args.folds, seed=seed, threads=args.threads,
                                  progress=False, max_length=args.max_length,
                                  setting=args.setting)
                cpu = time.process_time()
                report = cross_validate(config, echo=lambda line: print(line, file=sys.stderr))
                results[backbone, seed] = {**report.to_dict(),
                                           "cpu_s": time.process_time() - cpu}
                predictions[backbone, seed] = report.predictions
                for line in report.lines():
                    print(line, flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    print()
    print_table(results)
    if len(seeds) > 1:
        for backbone in names:
            aurocs = [results[backbone, seed]["step_auroc"] for seed in seeds]
            print(f"{backbone:<10} mean step AUROC over fold seeds {args.fold_seeds}: "
                  f"{sum(aurocs) / len(aurocs):.3f}")
    print()
    paired = print_paired(predictions, names, seeds)
    if args.json is not None:
        out = {f"{backbone} (fold seed {seed})": r for (backbone, seed), r in results.items()}
        args.json.write_text(json.dumps({**out, "paired": paired}, indent=1))


if __name__ == "__main__":
    main()
