"""``recovery analyze [FILES...]``: Pass@(K,T), errors, recoveries and the gain decomposition.

Parses the options into :class:`analyses.report.analyze.AnalyzeConfig`, calls
:func:`analyses.report.analyze.analyze` (ingest, report, JSON and HTML files) and prints the
tables. Ingest results and progress go to standard error (progress, with the bootstrap's
resamples counted, only when standard error is a terminal); standard output gets the tables
only; when it is not a terminal (piped, redirected) the tables are printed at their full width,
never cut at 80 columns. Every line quotes file names and run labels with their control characters escaped
(:func:`recovery.display.printable`), so no escape sequence from an input reaches the terminal.
"""

from __future__ import annotations

import sys

import click

from agent_recovery_cli.recovery.options import command_options
from analyses.report.analyze import AnalyzeConfig
from recovery.display import printable

PIPED_TABLE_WIDTH = 100_000
"""Width of the tables when standard output is not a terminal (as wide as they are)."""


@click.command()
@command_options(AnalyzeConfig)
def analyze(config: AnalyzeConfig) -> None:
    """Report Pass@(K,T), errors, recoveries and the gain decomposition of runs.

    FILES are ingested (into --store, else into memory) and their runs analysed; with no
    FILES, every run of --store is. With two or more runs, each is compared with the
    baseline: its change of S(T) split into single-step quality and recovery, per T.
    """
    from rich.console import Console

    from analyses.report.analyze import analyze as run_analyze
    from analyses.report.terminal import print_report
    from recovery.outputs import check_output_path

    # an output that cannot be written is refused before anything is ingested or computed
    for flag, path in (("--json", config.json_out), ("--html", config.html_out)):
        if path is not None:
            check_output_path(path, flag)
    log = Console(stderr=True)

    def echo(line: str) -> None:
        log.print(printable(line, keep_newlines=True), markup=False, highlight=False,
                  crop=False, soft_wrap=True)

    def progress(step: str) -> None:
        from rich.text import Text

        status.update(Text(f"{printable(step)} ..."))

    # a Problem is reported by command_options on one line; anything else is a bug
    with log.status("analyzing") as status:
        report = run_analyze(config, echo=echo, progress=progress)
    if not config.quiet:
        out = Console()
        width = out.width
        if not out.is_terminal:
            # piped or redirected: every table at its full width, never a column cut; the
            # plain lines and the rules keep the width the console chose
            out = Console(width=max(width, PIPED_TABLE_WIDTH))
        print_report(report, out, width=width)
        if getattr(report, "series", None) is not None:
            from analyses.report.series import print_series

            print_series(report, out)
    sys.stdout.flush()
