"""``--max-turns``: step caps the user gives, for a run, an environment or a run's environment.

Entries are ``NAME=N``; ``NAME`` is resolved against the runs and environments (the task id up
to its first ``/``) being analysed, in this order:

1. a run's label: ``RUN=N`` (every episode of the run);
2. an environment: ``ENV=N`` (its episodes in every run);
3. ``RUN/ENV``: split at a ``/`` so that the left part is a run and the right an environment
   (that environment's episodes in that run).

So a name that is both a run and an environment means the run (the older form keeps its
meaning), and a name matching neither, or ``RUN/ENV`` in two ways, is refused. Where entries
overlap, the narrower wins for an episode: ``RUN/ENV`` over ``ENV`` over ``RUN``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import numpy as np

from recovery.errors import UsageProblem


def parse_max_turns(values: list[str] | tuple[str, ...]) -> dict[str, int]:
    """``["rl=100", "babyai=64"]`` -> ``{"rl": 100, "babyai": 64}`` (a name may hold ``=``:
    the last one splits). Names are resolved later, against the data (:func:`resolve_max_turns`).

    Raises:
        UsageProblem: for an entry without ``=`` or a cap that is not a positive whole number.
    """
    out: dict[str, int] = {}
    for value in values:
        name, sep, cap = str(value).rpartition("=")
        if not sep or not name or not cap.strip().isdigit() or int(cap) < 1:
            raise UsageProblem(f"--max-turns {value!r}: give RUN=N, ENV=N or RUN/ENV=N with N "
                               "a whole number of turns, at least 1")
        out[name] = int(cap)
    return out


def _scope(name: str, runs: set[str], envs: set[str]) -> tuple[str | None, str | None]:
    """``(run, env)`` that ``name`` names (``None`` for "any"), by the order of the module docs."""
    if name in runs:
        return name, None
    if name in envs:
        return None, name
    splits = [(name[:i], name[i + 1:]) for i, c in enumerate(name) if c == "/"]
    matches = [(r, e) for r, e in splits if r in runs and e in envs]
    if len(matches) == 1:
        return matches[0]
    shown_envs = ", ".join(sorted(e or "(no environment)" for e in envs))
    if matches:
        raise UsageProblem(f"--max-turns {name}: names RUN/ENV in more than one way "
                           f"({', '.join('/'.join(m) for m in matches)})")
    raise UsageProblem(f"--max-turns names {name}, which is not among the runs "
                       f"({', '.join(sorted(runs))}) nor the environments ({shown_envs}), "
                       "nor RUN/ENV of them")


def resolve_max_turns(
    given: Mapping[str, int], runs: np.ndarray, envs: np.ndarray
) -> Iterator[tuple[np.ndarray, int]]:
    """``(rows, cap)`` per ``--max-turns`` entry, broadest first (``RUN``, then ``ENV``, then
    ``RUN/ENV``), so that assigning them in turn leaves the narrowest on each row.

    Args:
        given: Name -> cap (:func:`parse_max_turns`).
        runs: Each row's run.
        envs: Each row's environment.

    Raises:
        UsageProblem: for a name that is none of the forms, or a cap below 1.
    """
    run_set, env_set = {str(r) for r in runs}, {str(e) for e in envs}
    scoped = []
    for name, cap in given.items():
        if int(cap) < 1:
            raise UsageProblem(f"--max-turns {name}={cap}: a cap is at least 1 turn")
        run, env = _scope(str(name), run_set, env_set)
        scoped.append(((run is not None) + 2 * (env is not None), run, env, int(cap)))
    for _, run, env, cap in sorted(scoped, key=lambda s: s[0]):
        mask = np.ones(len(runs), dtype=bool)
        if run is not None:
            mask &= runs == run
        if env is not None:
            mask &= envs == env
        yield mask, cap


def applicable(given: Mapping[str, int], runs: Iterable[object], envs: Iterable[object]
               ) -> dict[str, int]:
    """The entries of ``given`` that name one of ``runs`` or ``envs`` (in any form): for a view
    of part of the data (one task's timeline), where the other entries name what it leaves out."""
    run_set, env_set = {str(r) for r in runs}, {str(e) for e in envs}
    out = {}
    for name, cap in given.items():
        try:
            _scope(str(name), run_set, env_set)
        except UsageProblem:
            continue
        out[name] = cap
    return out
