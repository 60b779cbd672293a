"""The data-quality table of the terminal report, within the width of the plain lines, also
when piped (where the report's other tables print at their full width): the runs side by
side while they fit, in further tables beyond; a long cell (a step cap's note) wraps at words.

Cells arrive as rich markup, already escaped by the caller; widths are their printed widths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

Columns = dict[str, dict[str, str]]
"""Run label -> (check label -> cell), all as markup."""


def print_quality(console: Console, width: int, table_cls: Any, columns: Columns) -> None:
    """Print the table(s) of ``columns`` within ``width`` columns of ``console``."""
    for i, group in enumerate(quality_groups(columns, width)):
        title = "data quality per run" + (" (continued)" if i else "")
        console.print(quality_table(table_cls, group, title, width), width=width)


def _cells(text: str) -> int:
    from rich.text import Text

    return Text.from_markup(text).cell_len


def quality_widths(columns: Columns, width: int) -> tuple[int, int]:
    """The labels' column width, and the most a run's column takes: what the labels leave of
    ``width`` for one run, half of it for more, so that two runs always fit side by side."""
    labels = next(iter(columns.values())).keys() if columns else []
    label_width = min(max((_cells(label) for label in labels), default=0), width // 2)
    # the table's two edges and a gap of 2 before each run's column
    return label_width, max(12, (width - label_width - 6) // (1 if len(columns) == 1 else 2))


def quality_groups(columns: Columns, width: int) -> list[Columns]:
    """Consecutive runs whose columns (each as wide as its widest cell, at most the cap of
    :func:`quality_widths`) fit ``width`` beside the labels."""
    label_width, cap = quality_widths(columns, width)

    def natural(name: str) -> int:
        widest = max(_cells(cell) for cell in [name, *columns[name].values()])
        return min(widest, cap) + 2   # and the gap before it

    groups: list[Columns] = []
    used = 0
    for name, rows in columns.items():
        if groups and 2 + label_width + used + natural(name) <= width:
            groups[-1][name] = rows
            used += natural(name)
        else:
            groups.append({name: rows})
            used = natural(name)
    return groups


def quality_table(table_cls: Any, columns: Columns, title: str, width: int) -> Any:
    """One table: a row per check, a column per run (widths from :func:`quality_widths`)."""
    label_width, cap = quality_widths(columns, width)
    table = table_cls(title)
    table.add_column("", min_width=label_width)
    for name in columns:
        table.add_column(name, justify="right", max_width=cap)
    for label in next(iter(columns.values())).keys() if columns else []:
        table.add_row(label, *(columns[name].get(label, "") for name in columns))
    return table
