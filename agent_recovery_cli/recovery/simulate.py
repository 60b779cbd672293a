"""``recovery simulate --out DIR``: synthetic runs with known ground truth (docs/simulator.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import click

from agent_recovery_cli.recovery.options import command_options, opt


@dataclass
class SimulateCliConfig:
    """Options of ``recovery simulate``."""

    out: Path | None = opt(None, "Folder to write <policy>.jsonl files into.", required=True)
    policies: list[str] | None = opt(
        None,
        "Policies to simulate, comma-separated: names from --config, or the presets base, rl "
        "[default: every policy of --config, else base,rl].",
    )
    config: str | None = opt(
        None,
        "TOML or JSON file defining policies, task parameters and sizes by the field names of "
        "docs/simulator.md, or the name of a packaged config (demo, recovery-only, error-only, "
        "budget-aware). Options given on the command line win.",
    )
    tasks: int | None = opt(None, "Number of tasks, shared by all policies [default: 200].")
    samples: int | None = opt(None, "Samples per policy, task and budget [default: 8].")
    budget: int | None = opt(None, "Turn budget [default: 40].")
    budgets: list[int] | None = opt(
        None, "Several budgets, comma-separated (e.g. 5,10,20); trajectories at each."
    )
    seed: int | None = opt(None, "Seed; the same seed gives byte-identical files [default: 0].")
    mc_rollouts: int | None = opt(
        None,
        "Give every turn a Monte Carlo process label from this many continuations of the "
        "policy from the state after it (label = 2v - 1; for PRM training with --labels data; "
        "note that labels below 0 are marked as 'labelled' errors) [default: 0, no labels].",
    )


def build_sim_config(options: SimulateCliConfig):
    """The :class:`~recovery.simulate.SimConfig` the options describe.

    Raises:
        click.UsageError: for conflicting or unknown options.
    """
    from recovery.simulate import PRESETS, SimConfig, load_config

    if options.budget is not None and options.budgets:
        raise click.UsageError("give either --budget or --budgets, not both")
    if options.config is not None:
        try:
            config = load_config(options.config)
        except OSError as err:  # a bad file is a UsageProblem, reported by command_options
            raise click.UsageError(str(err)) from None
        from_file = True
    else:
        config = SimConfig()
        from_file = False
    policies = dict(config.policies)
    if options.policies:
        chosen = {}
        for name in options.policies:
            if from_file and name in policies:
                chosen[name] = policies[name]
            elif name in PRESETS:
                chosen[name] = PRESETS[name]
            else:
                known = sorted(set(PRESETS) | (set(policies) if from_file else set()))
                raise click.UsageError(f"unknown policy {name!r}; known: {', '.join(known)}")
        policies = chosen
    changes = {"policies": policies}
    if options.tasks is not None:
        changes["n_tasks"] = options.tasks
    if options.samples is not None:
        changes["n_samples"] = options.samples
    if options.budget is not None:
        changes["budgets"] = [options.budget]
    elif options.budgets:
        changes["budgets"] = list(options.budgets)
    if options.seed is not None:
        changes["seed"] = options.seed
    if options.mc_rollouts is not None:
        changes["mc_rollouts"] = options.mc_rollouts
    try:
        return dataclasses.replace(config, **changes)
    except ValueError as err:  # SimConfig's check of the values the options gave
        raise click.UsageError(str(err)) from None


@click.command()
@command_options(SimulateCliConfig)
def simulate(config: SimulateCliConfig) -> None:
    """Write synthetic runs with known ground truth, one canonical JSONL file per policy.

    Policies share tasks; each turn's meta keeps the truth (true_error, true_kind, event,
    spell_start, recovers, progress_before, progress_after). See docs/simulator.md.
    """
    from recovery.outputs import check_output_path
    from recovery.simulate import draw_tasks, write_policy

    sim_config = build_sim_config(config)
    assert config.out is not None
    check_output_path(config.out, "--out", kind="folder",
                      children=[f"{name}.jsonl" for name in sim_config.policies])
    config.out.mkdir(parents=True, exist_ok=True)
    tasks = draw_tasks(sim_config)
    for name in sim_config.policies:
        summary = write_policy(sim_config, name, config.out / f"{name}.jsonl", tasks)
        click.echo(
            f"wrote {summary.path}: {summary.n_trajectories} trajectories, "
            f"{summary.n_turns} turns, success {summary.n_success / summary.n_trajectories:.3f}"
        )
