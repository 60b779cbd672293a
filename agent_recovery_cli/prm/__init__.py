"""The ``prm`` command line: one module per subcommand, imported when it runs."""

from __future__ import annotations

import click

from agent_recovery_cli.lazy import LazyGroup

COMMANDS = {
    "train": "agent_recovery_cli.prm.train:train",
    "score": "agent_recovery_cli.prm.score:score",
    "eval": "agent_recovery_cli.prm.evaluate:evaluate",
    "cv": "agent_recovery_cli.prm.cv:cv",
    "export-trl": "agent_recovery_cli.prm.export_trl:export_trl",
}


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
def main() -> None:
    """Train, score, evaluate and cross-validate process reward models over a recovery store."""
