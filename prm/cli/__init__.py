"""The ``prm`` command line."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Train, score and evaluate process reward models over a recovery store."""
