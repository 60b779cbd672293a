"""A run's hazard curves as report points, binned in one pass and summarised when long.

A curve lists one point per clock value with turns at risk. A trajectory of 80,000 turns gives
curves of about 70,000 values each, which the report (and its JSON) would carry point by point;
above :data:`MAX_POINTS` values a curve keeps one point per bin instead (the bin's rate, events
and turns at risk, placed at its first clock value), and the report says so in a note.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analyses.report.run_records import HazardPoint

if TYPE_CHECKING:
    import pandas as pd

MAX_POINTS = 2000
"""Clock values a hazard curve lists point by point; a longer curve keeps one point per bin."""


def with_bins(points: list[HazardPoint], min_at_risk: int) -> list[HazardPoint]:
    """Set each point's bin: clock values with turns at risk, in order, gathered until a bin
    holds ``min_at_risk`` of them, a last bin left smaller joining the previous one (the rule
    of :func:`analyses.hazards.bin_rates`; values without turns at risk add nothing).

    Linear in the points: the bins are gathered in one pass, then each bin's totals are set on
    its own members (no scan of every point per bin)."""
    threshold = max(min_at_risk, 1e-300)
    bins: list[list[HazardPoint]] = [[]]
    acc = 0
    for point in points:
        bins[-1].append(point)
        acc += point.at_risk
        if acc >= threshold:
            bins.append([])
            acc = 0
    if not bins[-1]:
        bins.pop()
    elif acc > 0 and len(bins) > 1:
        bins[-2].extend(bins.pop())
    for members in bins:
        events = sum(p.events for p in members)
        at_risk = sum(p.at_risk for p in members)
        for p in members:
            p.bin_start, p.bin_end = members[0].x, members[-1].x
            p.bin_events, p.bin_at_risk = events, at_risk
    return points


def per_bin(points: list[HazardPoint]) -> list[HazardPoint]:
    """One point per bin of binned ``points`` (as :func:`with_bins` leaves them): at the
    bin's first clock value, with the bin's value, events and turns at risk."""
    return [
        HazardPoint(x=p.bin_start, value=p.value, events=p.bin_events, at_risk=p.bin_at_risk,
                    bin_start=p.bin_start, bin_end=p.bin_end, bin_events=p.bin_events,
                    bin_at_risk=p.bin_at_risk)
        for i, p in enumerate(points) if i == 0 or p.bin_start != points[i - 1].bin_start
    ]


def curve_points(part: pd.DataFrame, min_at_risk: int) -> list[HazardPoint]:
    """The binned points of one curve: ``part`` holds its rows ``x, value, events, at_risk``
    (as :func:`analyses.descriptive.hazard_curves` gives them), in any order."""
    part = part.sort_values("x")
    columns = zip(part["x"].astype("int64").tolist(), part["value"].astype(float).tolist(),
                  part["events"].astype("int64").tolist(),
                  part["at_risk"].astype("int64").tolist(), strict=True)
    return with_bins([HazardPoint(x=x, value=v, events=e, at_risk=r)
                      for x, v, e, r in columns], min_at_risk)


def bin_starts(at_risk: list[int], min_at_risk: int) -> list[int]:
    """Index of the first value of each bin of :func:`with_bins`, for the turns at risk of a
    curve's values in order."""
    threshold = max(min_at_risk, 1e-300)
    starts, acc = [0], 0
    for i, risk in enumerate(at_risk):
        acc += risk
        if acc >= threshold:
            starts.append(i + 1)
            acc = 0
    # An empty last bin goes; a last bin left too small joins the one before (as in with_bins).
    if starts[-1] == len(at_risk) or (acc > 0 and len(starts) > 1):
        starts.pop()
    return starts


def curve_per_bin(part: pd.DataFrame, min_at_risk: int) -> list[HazardPoint]:
    """``per_bin(curve_points(part, min_at_risk))`` without a point per clock value: sums
    over each bin's slice of the sorted columns (the long curves of long trajectories)."""
    import numpy as np

    part = part.sort_values("x")
    x = part["x"].astype("int64").to_numpy()
    value = part["value"].astype(float).to_numpy()
    events = part["events"].astype("int64").to_numpy()
    at_risk = part["at_risk"].astype("int64").to_numpy()
    starts = bin_starts(at_risk.tolist(), min_at_risk)
    if not starts:
        return []
    ends = [*starts[1:], len(x)]
    bin_events = np.add.reduceat(events, starts).tolist()
    bin_at_risk = np.add.reduceat(at_risk, starts).tolist()
    xs, values = x.tolist(), value.tolist()
    return [
        HazardPoint(x=xs[s], value=values[s], events=e, at_risk=r, bin_start=xs[s],
                    bin_end=xs[t - 1], bin_events=e, bin_at_risk=r)
        for s, t, e, r in zip(starts, ends, bin_events, bin_at_risk, strict=True)
    ]


def run_curves(
    run: str, hazards: pd.DataFrame, min_at_risk: int, max_points: int = MAX_POINTS
) -> tuple[dict[str, list[HazardPoint]], list[str]]:
    """A run's curves (hazard name -> points) from its rows of the hazards frame, each curve
    of more than ``max_points`` clock values kept as one point per bin, and the note that
    says which curves were."""
    curves: dict[str, list[HazardPoint]] = {}
    summarised: list[str] = []
    for name, part in hazards.groupby("hazard", sort=False):
        if len(part) > max_points:
            summarised.append(f"{name} ({len(part):,} values)")
            curves[str(name)] = curve_per_bin(part, min_at_risk)
        else:
            curves[str(name)] = curve_points(part, min_at_risk)
    notes = [] if not summarised else [
        f"run {run}: the hazard curves {', '.join(summarised)} list one point per bin of "
        f"at least {min_at_risk} turns at risk (more than {max_points:,} clock values)"]
    return curves, notes
