"""``prm cv --store S --labels data --backbone B --folds 5``: grouped k-fold by task."""

from __future__ import annotations

import click

from agent_recovery_cli.recovery.options import command_options
from prm.evaluation.cv import CVConfig


@click.command()
@command_options(CVConfig)
def cv(config: CVConfig) -> None:
    """Cross-validate a PRM by task: every trajectory scored once, out of fold.

    Prints the pooled step accuracy, first-error accuracy and step AUROC with bootstrap
    intervals over tasks, beside the floors on the same turns ("every step correct", and in
    the hindsight setting the outcome-aware rule), the paired differences and a verdict. The
    default, structured (features of each turn and its sibling samples, a logistic head),
    runs in seconds on one core.
    """
    from prm.evaluation.cv import cross_validate

    report = cross_validate(config, echo=lambda line: click.echo(line, err=True))
    for line in report.lines():
        click.echo(line)
