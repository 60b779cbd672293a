"""The ``prm`` command line: one module per subcommand, imported when it runs."""

from __future__ import annotations

import click

from recovery.cli.lazy import LazyGroup

COMMANDS = {
    "train": "prm.cli.train:train",
    "score": "prm.cli.score:score",
    "eval": "prm.cli.evaluate:evaluate",
    "cv": "prm.cli.cv:cv",
    "export-trl": "prm.cli.export_trl:export_trl",
}


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
def main() -> None:
    """Train, score, evaluate and cross-validate process reward models over a recovery store."""
