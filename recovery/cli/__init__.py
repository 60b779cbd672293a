"""The ``recovery`` command line: a thin click layer over the library.

One module per subcommand; each defines a config dataclass and a click command that builds the
config and calls a library function.
"""

from __future__ import annotations

import click

from recovery.cli import export, ingest, sql


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agent-recovery")
def main() -> None:
    """Read agent rollouts, mark errors and recoveries, and measure Pass@(K,T)."""


main.add_command(ingest.ingest)
main.add_command(sql.sql)
main.add_command(export.export)


def fail(message: str) -> None:
    """Print an error in click's style and exit with status 1."""
    raise click.ClickException(message)
