"""``prm eval --store S --model DIR``: step, first-error, calibration and Best-of-K metrics."""

from __future__ import annotations

import json

import click

from agent_recovery_cli.recovery.options import command_options
from prm.evaluation.evaluate import EvalConfig
from recovery.jsonsafe import json_safe


@click.command()
@command_options(EvalConfig)
def evaluate(config: EvalConfig) -> None:
    """Evaluate a PRM on a split of the store's tasks (default: the test tasks)."""
    from prm.evaluation.evaluate import evaluate_model
    from prm.kinds import load_model
    from recovery.store import open_store

    # The model is loaded (and refused, if it must be) before the store is read.
    predictor = load_model(config.model, device=config.device, setting=config.setting,
                           trust_remote_code=config.trust_remote_code)
    store = open_store(config.store, read_only=True, must_exist=True)
    try:
        report = evaluate_model(store.con, predictor, config)
    finally:
        store.close()
    for line in report.lines():
        click.echo(line)
    if config.json_out is not None:
        config.json_out.parent.mkdir(parents=True, exist_ok=True)
        config.json_out.write_text(json.dumps(json_safe(report.to_dict()), indent=1))
