"""The reports ``bench/html_check.py --reports FOLDER`` builds and checks.

Each is written by ``recovery simulate`` and ``recovery analyze --html``:

- ``demo``: the packaged demo config (two runs);
- ``seven-runs``: seven runs with checkpoint-like labels and 100-turn caps;
- ``six-long-names``: six tau-bench-shaped runs with long names, three of which differ only
  at their end (``...-agent-v1``, ``-v2``, ``-v3``);
- ``four-runs-by-env``: four runs with long names over three environments (the simulator's
  domains ``airline``, ``retail``, ``telecom`` put in front of the task ids as ``env/``),
  analysed with ``--by env``.

Besides the page checks of :func:`html_check.check_html`, every figure a report draws (as the
page draws it: run names as their labels) must have no overlapping text and none off the
image (:func:`analyses.report.plot_layout.layout_problems`), and every comparison its "change of
S(T) at every T" figure on the page.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


def _policies_toml(names: list[str] | tuple[str, ...], *, fatal: bool = True) -> str:
    """``[policies."<name>"]`` tables of runs of growing skill."""
    return "".join(
        f'\n[policies."{name}"]\npreset = "base"\np_progress = {0.3 + 0.05 * i:.2f}\n'
        f"p_recover = {0.3 + 0.05 * i:.2f}\n"
        + (f"p_fatal = {0.14 - 0.01 * i:.2f}\n" if fatal else "")
        for i, name in enumerate(names))


SEVEN_RUNS_TOML = """# Seven runs with checkpoint-like labels and 100-turn caps (bench/html_check.py --reports).
n_tasks = 60
n_samples = 4
budgets = [100]
seed = 1
""" + _policies_toml((
    "qwen2.5-7b-instruct", "qwen2.5-7b-rl-step200", "qwen2.5-7b-rl-step400",
    "llama-3.1-8b-instruct", "gpt-4o-mini-2024-07-18", "claude-3-5-haiku", "mistral-nemo-12b"))
"""The seven-run config (a ``recovery simulate --config`` TOML)."""

LONG_NAMES = (
    "gpt-4o-2024-08-06-airline-tool-calling-agent-v1",
    "gpt-4o-2024-08-06-airline-tool-calling-agent-v2",
    "gpt-4o-2024-08-06-airline-tool-calling-agent-v3",
    "gpt-4o-mini-2024-07-18-airline-tool-calling-agent-v1",
    "claude-3-5-sonnet-20241022-airline-tool-calling-agent-v1",
    "claude-3-5-sonnet-20241022-airline-react-agent-with-assertions-v1",
)
"""Six run names as long as tau-bench runs have, three differing only at their end."""

SIX_LONG_TOML = """# Six runs with long names (bench/html_check.py --reports).
n_tasks = 40
n_samples = 4
budgets = [30]
seed = 2
""" + _policies_toml(LONG_NAMES, fatal=False)
"""The six-run config."""

ENV_RUN_NAMES = (
    "gpt-4o-2024-08-06-tool-calling-agent", "gpt-4o-mini-2024-07-18-tool-calling-agent",
    "claude-3-5-sonnet-20241022-tool-calling-agent", "claude-3-5-sonnet-20241022-react-agent",
)
"""The four runs of the grouped report."""

FOUR_BY_ENV_TOML = """# Four runs over three environments (bench/html_check.py --reports, --by env).
n_tasks = 48
n_samples = 3
budgets = [30]
seed = 3
""" + _policies_toml(ENV_RUN_NAMES, fatal=False)
"""The four-run config; its tasks fall in the simulator's three domains."""

CHANGE_ALT = "change of S(T) at every T"
"""How the HTML names the dense budget-difference figure of a comparison (its ``alt``)."""


def report_figures(report: object, labels: dict[str, str] | None = None) -> dict[str, object]:
    """Every figure the HTML page of ``report`` (a :class:`analyses.report.Report`) draws,
    by a name that says which; run names as ``labels`` (default: the page's,
    :func:`analyses.report.names.run_labels`)."""
    from analyses.report import budget_plots, decomposition_plots, hazard_plots, heatmap_plots
    from analyses.report.names import relabel_report, run_labels

    report = relabel_report(report, labels or run_labels(list(report.runs)))
    figures: dict[str, object] = {
        "budget curves": budget_plots.budget_curves(report),
        "hazards": hazard_plots.hazard_figure(report),
        "latency": hazard_plots.latency_figure(report),
    }
    for name, run in report.runs.items():
        figures[f"Pass@(K,T) {name}"] = heatmap_plots.pass_heatmap(run, report.ks, report.ts)
        figures[f"pass^(K,T) {name}"] = heatmap_plots.pass_heatmap(run, report.ks, report.ts,
                                                           "pass_hat")
    for comp in report.comparisons:
        pair = f"{comp.candidate} vs {comp.baseline}"
        figures[f"difference surface {pair}"] = heatmap_plots.difference_heatmap(comp, report.ks,
                                                                         report.ts)
        figures[f"decomposition {pair}"] = decomposition_plots.decomposition_bars(comp)
        figures[f"{CHANGE_ALT} {pair}"] = budget_plots.budget_difference_figure(comp)
    return figures


def figure_problems(report: object, labels: dict[str, str] | None = None) -> list[str]:
    """Each overlapping pair of texts and each text off the image, in every figure of the
    report (:func:`analyses.report.plot_layout.layout_problems`), prefixed with the figure."""
    from analyses.report.plot_layout import layout_problems

    out = []
    for name, figure in report_figures(report, labels).items():
        out += [f"figure {name!r}: {problem}" for problem in layout_problems(figure)]
    return out


def _reports_of(result: object) -> list[object]:
    groups = getattr(result, "groups", None)
    if groups is None:
        return [result]
    return [g.report for g in groups if g.report is not None]


def _recovery_cli() -> list[str]:
    local = Path(sys.executable).with_name("recovery")
    return [str(local)] if local.exists() else [shutil.which("recovery") or "recovery"]


def _simulate(out: Path, *args: str) -> list[Path]:
    subprocess.run([*_recovery_cli(), "simulate", "--out", str(out), *args], check=True,
                   capture_output=True, text=True)
    return sorted(out.glob("*.jsonl"))


def _simulate_config(folder: Path, name: str, toml: str) -> list[Path]:
    config = folder / f"{name}.toml"
    config.write_text(toml, encoding="utf-8")
    return _simulate(folder / name, "--config", str(config))


def env_inputs(files: list[Path], out: Path) -> list[Path]:
    """Copies of simulated ``files`` whose task ids start with the task's domain
    (``airline/task0003``), for ``--by env``."""
    out.mkdir(parents=True, exist_ok=True)
    copies = []
    for path in files:
        lines = []
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            domain = record.get("meta", {}).get("task", {}).get("domain", "none")
            record["task_id"] = f"{domain}/{record['task_id']}"
            lines.append(json.dumps(record))
        copy = out / path.name
        copy.write_text("\n".join(lines) + "\n", encoding="utf-8")
        copies.append(copy)
    return copies


REPORTS = ("demo", "seven-runs", "six-long-names", "four-runs-by-env")
"""The reports of the module docstring, in the order they are built."""


def report_inputs(folder: Path, name: str, demo_tasks: int | None = None
                  ) -> tuple[list[Path], dict[str, object]]:
    """Simulate the inputs of report ``name`` (one of :data:`REPORTS`) in ``folder``: its
    files, and the extra :class:`analyses.report.analyze.AnalyzeConfig` fields."""
    if name == "demo":
        demo_args = ["--config", "demo"] + (["--tasks", str(demo_tasks)] if demo_tasks else [])
        return _simulate(folder / "demo-runs", *demo_args), {}
    if name == "four-runs-by-env":
        four = _simulate_config(folder, "four-runs", FOUR_BY_ENV_TOML)
        return env_inputs(four, folder / name), {"by": "env"}
    toml = {"seven-runs": SEVEN_RUNS_TOML, "six-long-names": SIX_LONG_TOML}[name]
    return _simulate_config(folder, name, toml), {}


def check_reports(folder: str | Path, check_html: Callable[..., Any], *, n_boot: int = 50,
                  demo_tasks: int | None = None, chromium: str | None = None,
                  window_size: str = "1400,4000",
                  only: Sequence[str] = REPORTS) -> dict[str, Any]:
    """Build the reports of the module docstring (those named in ``only``) in ``folder``
    and check each page with ``check_html`` (:func:`bench.html_check.check_html`).

    Returns:
        Report name -> its ``HtmlCheck`` (figure problems added to its problems).
    """
    from analyses.report.analyze import AnalyzeConfig, analyze
    from analyses.report.names import run_labels

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in only:
        files, extra = report_inputs(folder, name, demo_tasks)
        page = folder / f"{name}.html"
        report = analyze(AnalyzeConfig(files=files, html_out=page, n_boot=n_boot, **extra),
                         echo=lambda *_a, **_k: None)
        result = check_html(page, folder / f"{name}.png", chromium=chromium,
                            window_size=window_size)
        labels = run_labels(list(report.runs))
        reports = _reports_of(report)
        for each in reports:
            result.problems.extend(figure_problems(each, labels))
        result.problems.extend(_change_figure_problems(reports, page))
        results[name] = result
    return results


def _change_figure_problems(reports: list[object], page: Path) -> list[str]:
    wanted = sum(1 for each in reports for comp in each.comparisons
                 if comp.budget is not None and not comp.shares_no_task())
    drawn = len(re.findall(r'<img alt="' + re.escape(CHANGE_ALT),
                           page.read_text(encoding="utf-8")))
    if drawn != wanted or not wanted:
        return [f"{drawn} '{CHANGE_ALT}' figures on the page, {wanted} comparisons with a "
                "budget curve"]
    return []
