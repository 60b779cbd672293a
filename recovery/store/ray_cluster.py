"""The Ray engine's connection to a cluster (``--engine ray``, the ``ray`` extra).

Ray is imported here only, inside functions: nothing of Ray is loaded unless the engine is
asked for. :func:`ray_workers` joins the cluster ``RAY_ADDRESS`` names (or the one this process
already joined with ``ray.init(address=...)``), else starts a local one for the duration.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from recovery.errors import InputProblem, UsageProblem

INSTALL = "pip install 'agent-recovery[ray]'"
"""How to install Ray for the engine (the project's ``ray`` extra)."""


class RayTaskFailed(InputProblem):
    """A Ray task stopped for a reason that is not its input's (a worker died, a node was
    lost, an unexpected error); nothing of the command's work was committed. An input
    problem: the store or the inputs could not be processed as asked."""


def import_ray() -> Any:
    """The ``ray`` module.

    Raises:
        UsageProblem: when Ray is not installed, saying how to install it.
    """
    try:
        import ray
    except ImportError:
        raise UsageProblem(f"--engine ray needs Ray, which is not installed: {INSTALL}") from None
    return ray


def check_workers(workers: int | None) -> None:
    """Refuse a number of workers below 1 (``None``: what the cluster has)."""
    if workers is not None and workers < 1:
        raise UsageProblem(f"--workers: give 1 or more (or leave it out for every CPU of the "
                           f"cluster), got {workers}")


def check_folder_store(store: str | Path | None, command: str) -> None:
    """Refuse a store the Ray engine cannot use: it reads and writes a folder store only
    (a DuckDB file cannot be written by many processes)."""
    from recovery.store.folder_views import is_folder_store, is_url

    if store is None or not is_folder_store(store) or is_url(str(store)):
        raise UsageProblem(
            f"{command} --engine ray needs a folder store on a folder every node of the "
            "cluster sees (--store runs/); a DuckDB file (or an in-memory store) is written "
            "by one process only, and object storage is not supported: use --engine local")


@contextlib.contextmanager
def ray_workers(workers: int | None) -> Iterator[tuple[Any, int]]:
    """Ray, connected, and how many tasks to run at once (``workers``, else the cluster's
    CPUs). A local cluster this started is shut down on exit; a joined one is left running."""
    import logging

    check_workers(workers)
    ray = import_ray()
    started = not ray.is_initialized()
    if started:  # RAY_ADDRESS, when set, names the cluster to join
        ray.init(logging_level=logging.WARNING, log_to_driver=False)
    try:
        yield ray, workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    finally:
        if started:
            ray.shutdown()


def run_bounded(ray: Any, task: Callable[..., Any], calls: Sequence[tuple[Any, ...]],
                workers: int) -> tuple[list[Any], tuple[int, BaseException] | None]:
    """Run ``task(*call)`` for each call as Ray tasks of one CPU, at most ``workers`` at once.

    Returns:
        Each call's result in order (``None`` where it did not finish), and the first
        failure (the call's index and the error), after which no further call is started
        and every started one is waited for (so nothing runs on once this returns).
    """
    remote = ray.remote(num_cpus=1, max_retries=0)(task)
    results: list[Any] = [None] * len(calls)
    pending: dict[Any, int] = {}
    failure: tuple[int, BaseException] | None = None
    following = iter(range(len(calls)))
    while True:
        while failure is None and len(pending) < workers:
            index = next(following, None)
            if index is None:
                break
            pending[remote.remote(*calls[index])] = index
        if not pending:
            return results, failure
        (done,), _ = ray.wait(list(pending), num_returns=1)
        index = pending.pop(done)
        try:
            results[index] = ray.get(done)
        except Exception as err:  # a Ray task error, a dead worker: reported by the caller
            failure = failure or (index, err)
