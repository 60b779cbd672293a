"""The ``recovery`` command line: a thin click layer over the library.

One module per subcommand; each defines a config dataclass and a click command that builds the
config and calls a library function. Modules are imported only when their command runs.
"""

from __future__ import annotations

import click

from agent_recovery_cli.lazy import LazyGroup

COMMANDS = {
    "ingest": "agent_recovery_cli.recovery.ingest:ingest",
    "sql": "agent_recovery_cli.recovery.sql:sql",
    "export": "agent_recovery_cli.recovery.export:export",
    "simulate": "agent_recovery_cli.recovery.simulate:simulate",
    "mark": "agent_recovery_cli.recovery.mark:mark",
    "graph": "agent_recovery_cli.recovery.graph:graph",
    "analyze": "agent_recovery_cli.recovery.analyze:analyze",
    "budgetmix": "agent_recovery_cli.recovery.budgetmix:budgetmix",
}


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="agent-recovery")
def main() -> None:
    """Read agent rollouts, mark errors and recoveries, and measure Pass@(K,T)."""
