"""The report's steps as they run: each told to the progress display and timed (wall and CPU)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

ProgressFn = Callable[[str], None]
"""Called with a short description before each step of
:func:`analyses.report.build.report_from_frames`, and again with the resamples done
(``"... 120/200 bootstrap resamples"``) while a bootstrap runs."""

_T = TypeVar("_T")


@dataclass
class Steps:
    """Runs the report's steps: tells the progress display, times each (wall and CPU)."""

    progress: ProgressFn | None
    timings: dict[str, float] = field(default_factory=dict)
    cpu_timings: dict[str, float] = field(default_factory=dict)

    def __call__(self, name: str, fn: Callable[[], _T]) -> _T:
        """``fn()``, its time added to the step ``name``."""
        if self.progress is not None:
            self.progress(name)
        began, cpu_began = time.perf_counter(), time.process_time()
        result = fn()
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - began
        self.cpu_timings[name] = (self.cpu_timings.get(name, 0.0) + time.process_time()
                                  - cpu_began)
        return result

    def counted(self, name: str) -> Callable[[int, int], None] | None:
        """A bootstrap's progress callback for the step ``name`` (``None``: no display)."""
        progress = self.progress
        if progress is None:
            return None
        return lambda done, total: progress(f"{name}: {done}/{total} bootstrap resamples")
