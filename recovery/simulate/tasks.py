"""Tasks: ids, lengths and difficulty drawn per task from their own seeded generator."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recovery.simulate.params import PolicyParams, SimConfig, TaskParams
from recovery.simulate.text import DOMAIN_SPECS, LOOKUP_OK, PROMPTS

# --------------------------------------------------------------------------------------------
# Tasks.


@dataclass(frozen=True)
class SimTask:
    """One drawn task (the same for every policy).

    Attributes:
        index: 0-based task number.
        task_id: Its ``task_id`` in the output.
        length: ``L``, units of progress needed.
        difficulty: ``d`` in [0, 1].
        domain: Text domain.
        ids: ``ids[k]`` is the id step ``k`` acts on (``ids[0]`` is in the prompt, ``ids[k+1]``
            is revealed by step ``k``'s observation).
        amounts: ``amounts[k]`` is the amount step ``k`` uses, revealed with ``ids[k]``.
        tools: ``tools[k]`` is the index of the domain tool that step ``k`` calls.
        extras: ``extras[k]`` are the extra argument values of step ``k``.
        templates: ``templates[k]`` is the observation template of step ``k`` and
            ``details[k]`` the random integer that fills its details (the environment answers
            the same action the same way).
        details: See ``templates``.
        prompt: The user's request.
    """

    index: int
    task_id: str
    length: int
    difficulty: float
    domain: str
    ids: tuple[str, ...]
    amounts: tuple[int, ...]
    tools: tuple[int, ...]
    extras: tuple[tuple[str, ...], ...]
    templates: tuple[int, ...]
    details: tuple[int, ...]
    prompt: str


_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DIGITS = "0123456789"


def new_id(style: str, value: int) -> str:
    """An id of ``style`` from a non-negative random integer."""
    if style == "alnum6":
        chars = []
        for _ in range(6):
            value, r = divmod(value, 36)
            chars.append(_ALNUM[r])
        if not any(c in _DIGITS for c in chars):
            chars[value % 6] = _DIGITS[(value // 6) % 10]
        return "".join(chars)
    if style == "order":
        return f"#W{value % 10_000_000:07d}"
    return f"TK{value % 1_000_000:06d}"


def near_miss(ident: str, value: int) -> str:
    """``ident`` with one character changed to another of the same class (not the prefix)."""
    start = 2 if ident.startswith(("#W", "TK")) else 0
    pos = start + value % (len(ident) - start)
    value //= len(ident)
    old = ident[pos]
    alphabet = _DIGITS if old in _DIGITS else _LETTERS
    new = alphabet[(alphabet.index(old) + 1 + value % (len(alphabet) - 1)) % len(alphabet)]
    return ident[:pos] + new + ident[pos + 1 :]


def _task_id(index: int, n_tasks: int) -> str:
    return f"task{index:0{max(4, len(str(n_tasks - 1)))}d}"


def draw_task(params: TaskParams, seed: int, index: int, n_tasks: int) -> SimTask:
    """Draw task ``index``; it depends only on ``params``, ``seed`` and ``index``.

    Args:
        params: How tasks are drawn.
        seed: The simulation seed.
        index: 0-based task number.
        n_tasks: Number of tasks (only for the width of ``task_id``).
    """
    rng = np.random.default_rng([seed, 1, index])
    domain_name = params.domains[int(rng.integers(len(params.domains)))]
    domain = DOMAIN_SPECS[domain_name]
    free_length = int(rng.integers(params.length_min, params.length_max + 1))
    difficulty = round(float(rng.random()), 4)
    w = params.length_follows_difficulty
    tied_length = params.length_min + difficulty * (params.length_max - params.length_min)
    length = free_length if w == 0 else round(w * tied_length + (1 - w) * free_length)
    ids: list[str] = []
    while len(ids) < length + 1:
        ident = new_id(domain.id_style, int(rng.integers(1 << 62)))
        if ident not in ids:
            ids.append(ident)
    amounts = tuple(int(a) for a in rng.integers(20, 1000, length + 1))
    tools = tuple(int(k) for k in rng.integers(len(domain.tools), size=length))
    extras = tuple(
        tuple(choices[int(rng.integers(len(choices)))] for _, choices in domain.tools[k].extra)
        for k in tools
    )
    templates = tuple(int(k) for k in rng.integers(len(LOOKUP_OK), size=length))
    details = tuple(int(k) for k in rng.integers(1 << 62, size=length))
    prompt = PROMPTS[int(rng.integers(len(PROMPTS)))].format(
        noun=domain.noun, id=ids[0], amount=amounts[0]
    )
    return SimTask(
        index=index,
        task_id=_task_id(index, n_tasks),
        length=length,
        difficulty=difficulty,
        domain=domain_name,
        ids=tuple(ids),
        amounts=amounts,
        tools=tools,
        extras=extras,
        templates=templates,
        details=details,
        prompt=prompt,
    )


def draw_tasks(config: SimConfig) -> list[SimTask]:
    """The tasks of ``config``, shared by all its policies."""
    return [
        draw_task(config.tasks, config.seed, i, config.n_tasks) for i in range(config.n_tasks)
    ]


def turn_probabilities(
    policy: PolicyParams, task_params: TaskParams, difficulty: float, hurry: bool = False
) -> tuple[float, float]:
    """``(p_progress, p_error)`` of a turn outside a spell, after task modulation and hurry.

    Args:
        policy: The policy.
        task_params: The task parameters (spreads).
        difficulty: The task's difficulty ``d`` in [0, 1].
        hurry: Whether the policy is hurrying (budget-aware, in its last ``hurry_turns``).
    """
    m = 2.0 * difficulty - 1.0
    p_progress = policy.p_progress * (1.0 - task_params.progress_spread * m)
    p_error = policy.p_error * (1.0 + task_params.error_spread * m)
    if hurry:
        p_progress *= policy.hurry_progress
        p_error *= policy.hurry_error
    total = p_progress + p_error
    if total > 1.0:
        p_progress, p_error = p_progress / total, p_error / total
    return p_progress, p_error


