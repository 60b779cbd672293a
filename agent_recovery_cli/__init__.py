"""The command line of the toolkit: the ``recovery`` and ``prm`` console scripts.

It sits on top of the house: it imports ``recovery``, ``analyses`` and ``prm``, and nothing
imports it. Each subcommand is its own module, imported only when that subcommand runs
(:class:`agent_recovery_cli.lazy.LazyGroup`).
"""
