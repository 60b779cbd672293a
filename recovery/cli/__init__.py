"""The ``recovery`` command line: a thin click layer over the library.

One module per subcommand; each defines a config dataclass and a click command that builds the
config and calls a library function. Modules are imported only when their command runs.
"""

from __future__ import annotations

import click

from recovery.cli.lazy import LazyGroup

COMMANDS = {
    "ingest": "recovery.cli.ingest:ingest",
    "sql": "recovery.cli.sql:sql",
    "export": "recovery.cli.export:export",
    "simulate": "recovery.cli.simulate:simulate",
    "mark": "recovery.cli.mark:mark",
    "graph": "recovery.cli.graph:graph",
    "analyze": "recovery.cli.analyze:analyze",
    "budgetmix": "recovery.cli.budgetmix:budgetmix",
}


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="agent-recovery")
def main() -> None:
    """Read agent rollouts, mark errors and recoveries, and measure Pass@(K,T)."""
