"""``prm cv --store S --labels data --backbone B --folds 5``: grouped k-fold by task."""

from __future__ import annotations

import click

from prm.cv import CVConfig
from recovery.cli.options import command_options


@click.command()
@command_options(CVConfig)
def cv(config: CVConfig) -> None:
    """Cross-validate a PRM by task: every trajectory scored once, out of fold.

    Prints the pooled step accuracy, first-error accuracy and step AUROC with bootstrap
    intervals over tasks, beside the "every step correct" floors on the same turns. The
    default, minilm with a frozen backbone, fits 2 CPU cores: its features are computed once
    and only a head is fitted per fold.
    """
    from prm.cv import cross_validate

    report = cross_validate(config, echo=lambda line: click.echo(line, err=True))
    for line in report.lines():
        click.echo(line)
