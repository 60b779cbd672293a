"""Synthetic agents with known ground truth (DESIGN 9): the oracle the analyses are tested on.

Each task needs ``L`` units of progress. At every turn outside an error spell a policy makes
progress, makes an error or stalls; an error is *visible* (the observation says so) or *silent*
(the observation looks normal; the action uses an id or a value that contradicts what earlier
observations said). Inside a spell the next turn recovers (a clean turn, which may itself make
progress and end the episode), repeats the failing action, or ends the episode in failure
(fatal). Episodes end on success (progress reached ``L``), on a fatal error, or at the budget.
Error rate and progress speed depend on the task as well as on the policy.

The truth is kept in every turn's ``meta`` (``true_error``, ``true_kind``, ``event``,
``spell_start``, ``recovers``, ``progress_before``, ``progress_after``) and in every
trajectory's ``meta`` (``policy``, ``params``, ``seed``, ``task``, ``end``). See
``docs/simulator.md`` for the model, every parameter, and SQL over the ground truth.

Randomness: a task is drawn from its own generator seeded with ``(seed, task)``; an episode
from a generator seeded with ``(seed, task, sample)`` whose draws are consumed one row per turn.
Neither depends on the policy or the budget, so policies see the same tasks and *common random
numbers*: two policies with equal parameters write identical turns, two policies that differ
only inside spells agree up to their first turn in a spell, and a budget-unaware policy run at
budget 10 is the run at budget 40 cut at turn 10.

Example:
    >>> import dataclasses
    >>> from recovery.simulate import PRESETS, SimConfig, simulate, write_runs
    >>> config = SimConfig(policies={"base": PRESETS["base"], "rl": PRESETS["rl"]},
    ...                    n_tasks=200, n_samples=8, budgets=[40], seed=0)
    >>> runs = simulate(config)                      # {"base": [Trajectory, ...], "rl": [...]}
    >>> paths = write_runs(config, "runs/")          # runs/base.jsonl, runs/rl.jsonl
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from recovery.schema import Trajectory, Turn, write_jsonl

# --------------------------------------------------------------------------------------------
# Ground-truth vocabulary.

VISIBLE_KINDS = ("tool_error", "invalid_action", "parse_error")
"""Kinds of visible errors, in the order of :attr:`PolicyParams.kind_weights`."""

EVENTS = ("progress", "stall", "error", "repeat", "recover", "fatal")
"""Values of a turn's ``meta.event``: the first three outside a spell, the last three inside."""

# --------------------------------------------------------------------------------------------
# Visible-error observations, one constant per kind. The rules engine (recovery/marking)
# recognises these; VISIBLE_ERROR_PATTERNS are regular expressions that match every template
# of their kind and nothing a normal observation says. Placeholders: {noun} the entity,
# {wrong} a wrong id, {tool} the tool called, {arg} an argument name, {line}/{code}/{req}/{col}
# numbers, {bad_tool} a tool that does not exist, {reason} a policy reason, {head} the start of
# the unparseable action.

TOOL_ERROR_TEMPLATES = (
    "Error: {noun} {wrong} not found",
    "Error: no {noun} with id {wrong} for this user",
    'Traceback (most recent call last):\n  File "tools/{tool}.py", line {line}, in {tool}\n'
    "    record = db[{arg}]\nKeyError: '{wrong}'",
    "Exception: {tool} did not complete: upstream service returned HTTP {code} (request {req})",
)
"""``tool_error``: the tool reported an error or raised. The first three answer an action that
uses a wrong id; the last answers a correct action (a transient failure: retrying recovers)."""

INVALID_ACTION_TEMPLATES = (
    "Invalid action: {tool} requires argument '{arg}'",
    "Invalid action: unknown tool '{bad_tool}'",
    "Action rejected: {reason}",
)
"""``invalid_action``: the environment rejected the action (missing argument, unknown tool,
not allowed by policy)."""

PARSE_ERROR_TEMPLATES = (
    "Could not parse action: unbalanced parentheses at column {col}",
    "Could not parse action: expected name(arg=value, ...), got '{head}'",
    "Could not parse action: arguments are not valid JSON (line 1, column {col})",
)
"""``parse_error``: the action text is not a well-formed tool call."""

VISIBLE_ERROR_TEMPLATES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "tool_error": TOOL_ERROR_TEMPLATES,
        "invalid_action": INVALID_ACTION_TEMPLATES,
        "parse_error": PARSE_ERROR_TEMPLATES,
    }
)
"""Every visible-error template, by kind."""

VISIBLE_ERROR_PATTERNS: Mapping[str, str] = MappingProxyType(
    {
        "tool_error": r"^(Error: |Traceback \(most recent call last\):|Exception: )",
        "invalid_action": r"^(Invalid action: |Action rejected: )",
        "parse_error": r"^Could not parse action: ",
    }
)
"""Regular expressions (Python and DuckDB/RE2 syntax) that recognise each kind's observations."""

NORMAL_TEXT_FORBIDDEN = (
    r"(?i)error|exception|traceback|invalid|reject|could not|cannot|parse|not found|fail|denied"
)
"""Wording no normal (clean or silent-error) observation ever contains; tests check it."""

INVALID_REASONS = (
    "the user has not confirmed this change",
    "basic economy fares cannot be modified",
    "the order is already being processed",
    "the account is locked pending identity verification",
    "this operation is not allowed after check-in",
    "a transfer is only allowed after the user asks for a human agent",
)

# --------------------------------------------------------------------------------------------
# Domains: tools, id formats, and the texts of normal turns.


@dataclass(frozen=True, slots=True)
class _Tool:
    name: str
    kind: str  # "lookup" or "mutate"
    verb: str
    amount: bool = False
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class _Domain:
    noun: str
    id_arg: str
    id_style: str  # "alnum6", "order", "ticket"
    tools: tuple[_Tool, ...]
    bad_tools: tuple[str, ...]
    topics: tuple[str, ...]


_DOMAINS: Mapping[str, _Domain] = MappingProxyType(
    {
        "airline": _Domain(
            noun="reservation",
            id_arg="reservation_id",
            id_style="alnum6",
            tools=(
                _Tool("get_reservation_details", "lookup", "lookup"),
                _Tool("update_reservation_flights", "mutate", "flight change", True,
                      (("cabin", ("economy", "business", "basic_economy")),)),
                _Tool("update_reservation_baggages", "mutate", "baggage update", True,
                      (("total_baggages", ("1", "2", "3")),)),
                _Tool("update_reservation_passengers", "mutate", "passenger update", False,
                      (("passengers", ("1", "2", "4")),)),
                _Tool("cancel_reservation", "mutate", "cancellation", False,
                      (("reason", ("change of plan", "airline cancelled flight")),)),
                _Tool("pay_balance", "mutate", "payment", True),
                _Tool("get_flight_status", "lookup", "status check"),
            ),
            bad_tools=("update_booking", "change_flight", "modify_reservation_seat"),
            topics=("baggage allowance", "cancellation", "cabin changes", "compensation"),
        ),
        "retail": _Domain(
            noun="order",
            id_arg="order_id",
            id_style="order",
            tools=(
                _Tool("get_order_details", "lookup", "lookup"),
                _Tool("exchange_delivered_order_items", "mutate", "exchange", True,
                      (("new_item", ("blue, size M", "black, size L", "white, 64GB")),)),
                _Tool("return_delivered_order_items", "mutate", "return", True),
                _Tool("cancel_pending_order", "mutate", "cancellation", False,
                      (("reason", ("no longer needed", "ordered by mistake")),)),
                _Tool("modify_pending_order_address", "mutate", "address change", False,
                      (("city", ("Denver", "Austin", "Seattle")),)),
                _Tool("refund_payment", "mutate", "refund", True),
                _Tool("get_shipping_status", "lookup", "tracking check"),
            ),
            bad_tools=("update_order", "return_items", "change_address_now"),
            topics=("returns", "exchanges", "refund timing", "shipping"),
        ),
        "telecom": _Domain(
            noun="account",
            id_arg="account_id",
            id_style="ticket",
            tools=(
                _Tool("get_account_details", "lookup", "lookup"),
                _Tool("change_plan", "mutate", "plan change", True,
                      (("plan", ("basic", "unlimited", "family")),)),
                _Tool("apply_credit", "mutate", "credit", True),
                _Tool("suspend_line", "mutate", "suspension", False,
                      (("reason", ("travel", "lost device")),)),
                _Tool("schedule_callback", "mutate", "callback", False,
                      (("slot", ("morning", "afternoon", "evening")),)),
                _Tool("settle_bill", "mutate", "bill payment", True),
                _Tool("get_usage_summary", "lookup", "usage check"),
            ),
            bad_tools=("update_plan", "add_credit", "close_account_now"),
            topics=("roaming", "plan changes", "billing cycle", "device insurance"),
        ),
    }
)
DOMAINS = tuple(_DOMAINS)
"""Names of the built-in task domains."""

# Normal observations. Progress turns (and silent errors, which must look the same) reveal the
# id and the amount the next step needs: {next} and {amount}.
_LOOKUP_OK = (
    "{Noun} on file: status {status}, items: {count}. Linked {noun}: {next}. Amount due: ${amount}.",
    '{{"status": "{status}", "linked_id": "{next}", "amount_due": {amount}, "updated": "{date}"}}',
    "Found it. Status: {status}. Next reference {next}; balance ${amount} as of {date}.",
    "Record retrieved ({count} entries). Related {noun} {next} shows ${amount} outstanding.",
)
_MUTATE_OK = (
    "Done: {verb} applied. Confirmation {next}. Remaining balance: ${amount}.",
    '{{"ok": true, "confirmation": "{next}", "balance": {amount}, "at": "{time}"}}',
    "{Verb} completed at {time}. Follow-up {noun} {next} opened; ${amount} left to settle.",
    "Success. The {noun} now reads status {status}. Reference {next}, balance ${amount}.",
)
# A lookup of a known entity (a stall, or a recovery that makes no progress).
_STATUS_OBS = (
    "{Noun} {id}: status {status}, no pending changes.",
    '{{"id": "{id}", "status": "{status}", "pending_changes": 0}}',
    "{Noun} {id} is {status}; last updated {date}.",
)
_RECHECK_OBS = (
    "{Noun} {id}: status {status}. Amount due: ${amount}.",
    '{{"id": "{id}", "status": "{status}", "amount_due": {amount}}}',
    "Current state of {id}: {status}, ${amount} still open.",
)
# The first observation after a silent spell says what went wrong (a clean recovery turn).
_RECONCILE_ID = (
    "Note: no changes were recorded for {wrong}; it is not on this account. ",
    "Checked again: the earlier request went to {wrong}, not {right}. ",
    "{wrong} does not belong to this user; applying to {right} instead. ",
)
_RECONCILE_AMOUNT = (
    "Note: the amount on file is ${right}, not ${wrong}. ",
    "Adjusted: ${wrong} did not match the quoted ${right}; using ${right}. ",
    "Checked again: the balance was ${right}, so nothing was charged for ${wrong}. ",
)
_STATUSES = ("confirmed", "pending", "active", "on hold", "scheduled", "open")
_THOUGHTS = (
    "The user wants this sorted today; let me check the details first.",
    "Before changing anything I should confirm which {noun} the user means.",
    "Let me review the policy on {topic} before acting.",
    "I have the {noun} details; next I need the user's confirmation.",
    "Looking at {id} again to be sure of its status.",
    "Plan: verify, then make the change, then summarise for the user.",
)
_THINK_OBS = ("Thought recorded.", "OK.", "(no output)")
_MESSAGES = (
    "Could you confirm that you want me to go ahead with this?",
    "Just to be sure: is {id} the {noun} you mean?",
    "Thanks for waiting, I am checking this now.",
    "Would you like a summary of the changes before I continue?",
    "Can you tell me the reason for the change?",
)
_USER_REPLIES = (
    "Yes, please go ahead.",
    "That's the one, thanks.",
    "Sure, take your time.",
    "Please just do it, I'm in a hurry.",
    "It's because my plans changed.",
    "Yes. And please keep me posted.",
)
_POLICY_TEXTS = (
    "Policy on {topic}: changes are allowed up to 24 hours before the scheduled date.",
    "Policy on {topic}: the user must confirm every change explicitly.",
    "Policy on {topic}: refunds go back to the original payment method within 7 days.",
    "Policy on {topic}: agents may act only on records that belong to the user.",
)
_PROMPTS = (
    "User: Hi, I need help with my {noun} {id}. I was told the amount is ${amount}.",
    "User: Hello. My {noun} is {id} and there is ${amount} to sort out. Can you help?",
    "User: I want to make some changes to {noun} {id} (quoted ${amount}).",
    "User: Please look at {id}, my {noun}. The last statement said ${amount}.",
)

# --------------------------------------------------------------------------------------------
# Parameters.


@dataclass(frozen=True)
class PolicyParams:
    """A synthetic policy: per-turn probabilities before task modulation.

    Outside a spell a turn makes progress (``p_progress``), an error (``p_error``) or stalls
    (the rest). Inside a spell the next turn recovers (``p_recover``), ends the episode with
    a fatal error turn (``p_fatal``) or repeats the failing action (the rest).

    Attributes:
        p_progress: Probability that a turn outside a spell makes one unit of progress.
        p_error: Probability that a turn outside a spell is an error (starts a spell).
        p_silent: Fraction of errors that are silent; the others are visible.
        p_recover: In a spell: probability that the next turn is the (clean) recovery turn.
            It makes progress with the probability a clean turn has,
            ``p_progress / (1 - p_error)`` (task-modulated), and may end the episode.
        p_fatal: In a spell: probability that the next turn is an error that ends the
            episode in failure.
        kind_weights: Relative weights of the visible kinds, in the order of
            :data:`VISIBLE_KINDS` (tool_error, invalid_action, parse_error).
        budget_aware: Whether the policy knows its budget: in the last ``hurry_turns`` turns
            it takes a faster, riskier path.
        hurry_turns: How many final turns of the budget are hurried.
        hurry_progress: Factor on the (task-modulated) progress probability when hurried.
        hurry_error: Factor on the (task-modulated) error probability when hurried.
    """

    p_progress: float = 0.5
    p_error: float = 0.18
    p_silent: float = 0.25
    p_recover: float = 0.35
    p_fatal: float = 0.14
    kind_weights: tuple[float, float, float] = (0.5, 0.3, 0.2)
    budget_aware: bool = False
    hurry_turns: int = 5
    hurry_progress: float = 1.5
    hurry_error: float = 2.0

    def __post_init__(self) -> None:
        for name in ("p_progress", "p_error", "p_silent", "p_recover", "p_fatal"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"PolicyParams.{name} must lie in [0, 1], got {value}")
        if self.p_progress + self.p_error > 1.0 + 1e-12:
            raise ValueError("PolicyParams: p_progress + p_error must not exceed 1")
        if self.p_recover + self.p_fatal > 1.0 + 1e-12:
            raise ValueError("PolicyParams: p_recover + p_fatal must not exceed 1")
        weights = tuple(float(w) for w in self.kind_weights)
        if len(weights) != len(VISIBLE_KINDS) or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(
                f"PolicyParams.kind_weights: expected {len(VISIBLE_KINDS)} non-negative weights "
                f"({', '.join(VISIBLE_KINDS)}) with a positive sum, got {self.kind_weights}"
            )
        object.__setattr__(self, "kind_weights", weights)
        if self.hurry_turns < 0 or self.hurry_progress < 0 or self.hurry_error < 0:
            raise ValueError("PolicyParams: hurry_* parameters must be non-negative")


@dataclass(frozen=True)
class TaskParams:
    """How tasks are drawn; shared by all policies.

    Each task has a length ``L`` (units of progress needed), uniform on
    ``[length_min, length_max]``, and a difficulty ``d`` uniform on [0, 1] (rounded to 4
    decimals). With ``m = 2 d - 1`` in [-1, 1], a policy's probabilities on that task are
    ``p_error * (1 + error_spread * m)`` and ``p_progress * (1 - progress_spread * m)``
    (both scaled down together if their sum exceeds 1): harder tasks, more errors and
    slower progress. Spreads of 0 switch task modulation off.

    Attributes:
        length_min: Smallest ``L``.
        length_max: Largest ``L``.
        error_spread: How much the error probability varies with difficulty, in [0, 1].
        progress_spread: How much the progress probability varies with difficulty, in [0, 1].
        length_follows_difficulty: Weight ``w`` in [0, 1] with which ``L`` follows the
            difficulty: ``L = round(w * (length_min + d * (length_max - length_min)) +
            (1 - w) * U)`` with ``U`` the uniform draw; 0 (default) = independent of ``d``.
        domains: Task domains to draw from (text flavour only): airline, retail, telecom.
    """

    length_min: int = 2
    length_max: int = 16
    error_spread: float = 0.6
    progress_spread: float = 0.3
    length_follows_difficulty: float = 0.0
    domains: tuple[str, ...] = DOMAINS

    def __post_init__(self) -> None:
        if not 1 <= self.length_min <= self.length_max:
            raise ValueError(
                f"TaskParams: need 1 <= length_min <= length_max, got "
                f"{self.length_min}, {self.length_max}"
            )
        for name in ("error_spread", "progress_spread", "length_follows_difficulty"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"TaskParams.{name} must lie in [0, 1], got {value}")
        domains = tuple(self.domains)
        unknown = [d for d in domains if d not in _DOMAINS]
        if not domains or unknown:
            raise ValueError(
                f"TaskParams.domains: unknown {unknown or 'empty list'}; known: {', '.join(DOMAINS)}"
            )
        object.__setattr__(self, "domains", domains)


PRESETS: Mapping[str, PolicyParams] = MappingProxyType(
    {
        "base": PolicyParams(
            p_progress=0.5, p_error=0.18, p_silent=0.25, p_recover=0.35, p_fatal=0.14
        ),
        "rl": PolicyParams(
            p_progress=0.51, p_error=0.17, p_silent=0.25, p_recover=0.5, p_fatal=0.07
        ),
    }
)
"""Built-in policies. ``rl`` differs from ``base`` mainly in recovery (higher ``p_recover``,
lower ``p_fatal``), with a slightly better single step."""


@dataclass
class SimConfig:
    """What to simulate.

    Attributes:
        policies: Policy name (the ``run`` label and file stem) -> parameters.
        n_tasks: Number of tasks, shared by all policies.
        n_samples: Samples per (policy, task, budget).
        budgets: Turn budgets; every budget gets ``n_samples`` samples per task.
        seed: Seed of everything.
        tasks: How tasks are drawn.
        mc_rollouts: When positive, every turn gets a Monte Carlo process label (DESIGN 3.2:
            ``2v - 1``): ``v`` is the success rate of this many continuations of the same
            policy from the hidden state right after the turn (Math-Shepherd-style rollouts,
            the labels a PRM is trained on where the environment can be restarted). 0 = no
            labels. The rollouts draw from their own random stream, so the trajectories are
            the same with or without them.
    """

    policies: dict[str, PolicyParams] = field(default_factory=lambda: dict(PRESETS))
    n_tasks: int = 200
    n_samples: int = 8
    budgets: list[int] = field(default_factory=lambda: [40])
    seed: int = 0
    tasks: TaskParams = field(default_factory=TaskParams)
    mc_rollouts: int = 0

    def __post_init__(self) -> None:
        if not self.policies:
            raise ValueError("SimConfig.policies is empty")
        for name, params in self.policies.items():
            if not isinstance(params, PolicyParams):
                raise TypeError(f"SimConfig.policies[{name!r}] is not a PolicyParams")
            if not name or "/" in name or "\\" in name:
                raise ValueError(f"SimConfig: policy name {name!r} cannot be a file name")
        if self.n_tasks < 1 or self.n_samples < 1:
            raise ValueError("SimConfig: n_tasks and n_samples must be at least 1")
        self.budgets = [int(b) for b in self.budgets]
        if not self.budgets or min(self.budgets) < 1:
            raise ValueError(f"SimConfig.budgets: expected positive budgets, got {self.budgets}")
        if len(set(self.budgets)) != len(self.budgets):
            raise ValueError(f"SimConfig.budgets: repeated budget in {self.budgets}")
        if self.seed < 0:
            raise ValueError("SimConfig.seed must be non-negative")
        if self.mc_rollouts < 0:
            raise ValueError("SimConfig.mc_rollouts must be non-negative")


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


def _new_id(style: str, value: int) -> str:
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


def _near_miss(ident: str, value: int) -> str:
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
    domain = _DOMAINS[domain_name]
    free_length = int(rng.integers(params.length_min, params.length_max + 1))
    difficulty = round(float(rng.random()), 4)
    w = params.length_follows_difficulty
    tied_length = params.length_min + difficulty * (params.length_max - params.length_min)
    length = free_length if w == 0 else round(w * tied_length + (1 - w) * free_length)
    ids: list[str] = []
    while len(ids) < length + 1:
        ident = _new_id(domain.id_style, int(rng.integers(1 << 62)))
        if ident not in ids:
            ids.append(ident)
    amounts = tuple(int(a) for a in rng.integers(20, 1000, length + 1))
    tools = tuple(int(k) for k in rng.integers(len(domain.tools), size=length))
    extras = tuple(
        tuple(choices[int(rng.integers(len(choices)))] for _, choices in domain.tools[k].extra)
        for k in tools
    )
    templates = tuple(int(k) for k in rng.integers(len(_LOOKUP_OK), size=length))
    details = tuple(int(k) for k in rng.integers(1 << 62, size=length))
    prompt = _PROMPTS[int(rng.integers(len(_PROMPTS)))].format(
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


# --------------------------------------------------------------------------------------------
# Episodes.

_TOKEN_RE = re.compile(r"#?\w+")
_ROWS = 64
_MASK64 = (1 << 64) - 1
_UNIT = 2.0**-53


def _turn_draws(seed: int, task_index: int, sample: int) -> Iterator[tuple[float, float, int]]:
    """One row of random numbers per turn: two uniforms in [0, 1) and one 64-bit integer."""
    bits = np.random.PCG64([seed, 2, task_index, sample])
    while True:
        for w0, w1, w2 in bits.random_raw((_ROWS, 3)).tolist():
            yield (w0 >> 11) * _UNIT, (w1 >> 11) * _UNIT, w2


class _Pick:
    """Small random choices from one seed: digits of a big integer, refilled by splitmix64."""

    __slots__ = ("state", "value")

    def __init__(self, value: int):
        self.state = value & _MASK64
        self.value = value

    def __call__(self, n: int) -> int:
        if self.value < n << 16:
            z = self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
            self.value = z ^ (z >> 31)
        self.value, r = divmod(self.value, n)
        return r


def _call(name: str, args: list[tuple[str, str | int]]) -> str:
    parts = [f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in args]
    return f"{name}({', '.join(parts)})"


class _Episode:
    """The text side of one episode: turns the events into actions and observations."""

    def __init__(self, task: SimTask, progress_texts: dict[int, tuple[str, str]]):
        self.task = task
        self.progress_texts = progress_texts
        self.domain = _DOMAINS[task.domain]
        self.noun = self.domain.noun
        self.turns: list[Turn] = []
        # The current spell's text state.
        self.visible_turn: tuple[str, str] | None = None
        self.silent_flavour = ""
        self.silent_wrong: str | int = ""
        self.fake_ids: set[str] = set()
        self._seen = set(_TOKEN_RE.findall(task.prompt))
        self._seen_turns = 0

    def seen_tokens(self) -> set[str]:
        """Every token (ids, numbers, words) of the prompt and the observations so far."""
        for turn in self.turns[self._seen_turns :]:
            self._seen.update(_TOKEN_RE.findall(turn.observation))
        self._seen_turns = len(self.turns)
        return self._seen

    # --- pieces -----------------------------------------------------------------------------
    def _args(self, step: int, ident: str, amount: int) -> list[tuple[str, str | int]]:
        tool = self.domain.tools[self.task.tools[step]]
        args: list[tuple[str, str | int]] = [(self.domain.id_arg, ident)]
        args.extend(
            (name, value) for (name, _), value in zip(tool.extra, self.task.extras[step], strict=True)
        )
        if tool.amount:
            args.append(("amount", amount))
        return args

    def _ok_obs(self, tool: _Tool, template: int, next_id: str, amount: int, pick: _Pick) -> str:
        templates = _LOOKUP_OK if tool.kind == "lookup" else _MUTATE_OK
        return templates[template].format(
            Noun=self.noun.capitalize(),
            noun=self.noun,
            next=next_id,
            amount=amount,
            status=_STATUSES[pick(len(_STATUSES))],
            count=1 + pick(5),
            date=f"2024-{1 + pick(12):02d}-{1 + pick(28):02d}",
            time=f"{pick(24):02d}:{pick(60):02d}",
            verb=tool.verb,
            Verb=tool.verb.capitalize(),
        )

    def _fake_id(self, value: int) -> str:
        while True:
            ident = _new_id(self.domain.id_style, value)
            if ident not in self.task.ids:
                self.fake_ids.add(ident)
                return ident
            value = value // 7 + 12345

    # --- turns ------------------------------------------------------------------------------
    def progress(self, step: int, note: str = "") -> tuple[str, str]:
        """Step ``step`` done right; its observation reveals the next id and amount."""
        cached = self.progress_texts.get(step)
        if cached is not None:
            return cached[0], note + cached[1]
        task = self.task
        tool = self.domain.tools[task.tools[step]]
        action = _call(tool.name, self._args(step, task.ids[step], task.amounts[step]))
        nxt = step + 1
        obs = self._ok_obs(tool, task.templates[step], task.ids[nxt], task.amounts[nxt],
                           _Pick(task.details[step]))
        self.progress_texts[step] = (action, obs)
        return action, note + obs

    def recheck(self, step: int, pick: _Pick, note: str = "") -> tuple[str, str]:
        """A lookup of the id step ``step`` needs, showing its amount (no progress)."""
        task = self.task
        ident = task.ids[step]
        lookup = self.domain.tools[0]
        action = _call(lookup.name, [(self.domain.id_arg, ident)])
        obs = _RECHECK_OBS[pick(len(_RECHECK_OBS))].format(
            Noun=self.noun.capitalize(), id=ident, amount=task.amounts[step],
            status=_STATUSES[pick(len(_STATUSES))],
        )
        return action, note + obs

    def stall(self, step: int, pick: _Pick) -> tuple[str, str]:
        """A clean turn that makes no progress; only uses what the history has shown."""
        task, domain = self.task, self.domain
        known = task.ids[pick(step + 1)]
        topic = domain.topics[pick(len(domain.topics))]
        kind = pick(4)
        if kind == 0:
            thought = _THOUGHTS[pick(len(_THOUGHTS))].format(noun=self.noun, topic=topic, id=known)
            return _call("think", [("thought", thought)]), _THINK_OBS[pick(len(_THINK_OBS))]
        if kind == 1:
            message = _MESSAGES[pick(len(_MESSAGES))].format(noun=self.noun, id=known)
            return _call("respond", [("message", message)]), _USER_REPLIES[pick(len(_USER_REPLIES))]
        if kind == 2:
            lookup = domain.tools[0]
            obs = _STATUS_OBS[pick(len(_STATUS_OBS))].format(
                Noun=self.noun.capitalize(), id=known, status=_STATUSES[pick(len(_STATUSES))],
                date=f"2024-{1 + pick(12):02d}-{1 + pick(28):02d}",
            )
            return _call(lookup.name, [(domain.id_arg, known)]), obs
        return (
            _call("search_policy", [("topic", topic)]),
            _POLICY_TEXTS[pick(len(_POLICY_TEXTS))].format(topic=topic),
        )

    def visible(self, step: int, kind: str, pick: _Pick) -> tuple[str, str]:
        """The first turn of a visible spell (later turns of the spell repeat it)."""
        task, domain = self.task, self.domain
        tool = domain.tools[task.tools[step]]
        right = task.ids[step]
        args = self._args(step, right, task.amounts[step])
        correct = _call(tool.name, args)
        variant = pick(len(VISIBLE_ERROR_TEMPLATES[kind]))
        template = VISIBLE_ERROR_TEMPLATES[kind][variant]
        if kind == "tool_error":
            if variant == 3:
                obs = template.format(tool=tool.name, code=(500, 502, 503, 504)[pick(4)],
                                      req=f"{pick(1 << 24):06x}")
                return correct, obs
            wrong = _near_miss(right, pick(1 << 20))
            action = _call(tool.name, [(domain.id_arg, wrong), *args[1:]])
            return action, template.format(noun=self.noun, wrong=wrong, tool=tool.name,
                                           line=20 + pick(200), arg=domain.id_arg)
        if kind == "invalid_action":
            if variant == 0:
                missing = args[pick(len(args))]
                action = _call(tool.name, [a for a in args if a is not missing])
                return action, template.format(tool=tool.name, arg=missing[0])
            if variant == 1:
                bad = domain.bad_tools[pick(len(domain.bad_tools))]
                return _call(bad, [(domain.id_arg, right)]), template.format(bad_tool=bad)
            return correct, template.format(reason=INVALID_REASONS[pick(len(INVALID_REASONS))])
        # parse_error
        if variant == 0:
            action = correct[:-1]
            return action, template.format(col=len(action) + 1)
        if variant == 1:
            action = f"{tool.name} " + " ".join(f"{k}={v}" for k, v in args)
            return action, template.format(head=action[:24])
        inner = ", ".join(f"{k}: {v}" for k, v in args)
        action = f'{{"name": "{tool.name}", "arguments": {{{inner}}}}}'
        return action, template.format(col=action.index("{", 1) + 2)

    def silent(self, step: int, first: bool, pick: _Pick) -> tuple[str, str]:
        """A silent-error turn: a normal-looking call with an id or amount no earlier
        observation supports, answered by a normal-looking observation."""
        task, domain = self.task, self.domain
        seen = self.seen_tokens()
        if first:
            tool = domain.tools[task.tools[step]]
            self.silent_flavour = "amount" if tool.amount and pick(2) else "id"
        if self.silent_flavour == "id":
            wrong = "" if first else str(self.silent_wrong)
            while not wrong or wrong in seen or wrong in task.ids or wrong in self.fake_ids:
                wrong = _near_miss(task.ids[step], pick(1 << 20))
            self.silent_wrong = wrong
            # The spell's later turns keep acting on the wrong id, with varied tools.
            k = task.tools[step] if first else pick(len(domain.tools))
            tool = domain.tools[k]
            if k == task.tools[step]:
                args = self._args(step, wrong, task.amounts[step])
            else:
                args = [(domain.id_arg, wrong)]
                args.extend((name, choices[pick(len(choices))]) for name, choices in tool.extra)
                if tool.amount:
                    args.append(("amount", task.amounts[step]))
        else:
            right = task.amounts[step]
            wrong_amount = right
            while wrong_amount == right or str(wrong_amount) in seen or wrong_amount <= 0:
                delta = (1 + pick(9)) * (10 if pick(2) else 1) * (1 if pick(2) else -1)
                wrong_amount = right + delta
            self.silent_wrong = wrong_amount
            tool = domain.tools[task.tools[step]]
            args = self._args(step, task.ids[step], wrong_amount)
        action = _call(tool.name, args)
        obs = self._ok_obs(tool, pick(len(_LOOKUP_OK)), self._fake_id(pick(1 << 40)),
                           20 + pick(980), pick)
        return action, obs

    def reconcile_note(self, step: int, pick: _Pick) -> str:
        """What the recovery turn after a silent spell says about the mismatch."""
        if self.silent_flavour == "id":
            return _RECONCILE_ID[pick(len(_RECONCILE_ID))].format(
                wrong=self.silent_wrong, right=self.task.ids[step])
        return _RECONCILE_AMOUNT[pick(len(_RECONCILE_AMOUNT))].format(
            wrong=self.silent_wrong, right=self.task.amounts[step])


def _run_episode(
    name: str,
    policy: PolicyParams,
    policy_dict: dict[str, Any],
    config: SimConfig,
    task: SimTask,
    budget: int,
    sample: int,
    progress_texts: dict[int, tuple[str, str]],
) -> Trajectory:
    draws = _turn_draws(config.seed, task.index, sample)
    episode = _Episode(task, progress_texts)
    turns = episode.turns
    task_params = config.tasks
    probs = turn_probabilities(policy, task_params, task.difficulty)
    hurry_probs = turn_probabilities(policy, task_params, task.difficulty, hurry=True)
    total_weight = sum(policy.kind_weights)
    kind_cut = [sum(policy.kind_weights[: i + 1]) / total_weight for i in range(2)]
    progress = 0
    spell_start: int | None = None
    spell_kind = ""
    end = "budget"
    # The hidden state after each turn: (progress, in a spell, episode over), for rollouts.
    after: list[tuple[int, bool, bool]] = []
    for t in range(1, budget + 1):
        u_event, u_sub, pick_seed = next(draws)
        pick = _Pick(pick_seed)
        hurry = policy.budget_aware and budget - t < policy.hurry_turns
        p_progress, p_error = hurry_probs if hurry else probs
        before = progress
        recovers: int | None = None
        if spell_start is None:
            if u_event < p_progress:
                event = "progress"
                action, obs = episode.progress(progress)
                progress += 1
            elif u_event < p_progress + p_error:
                event = "error"
                spell_start = t
                if u_sub < policy.p_silent:
                    spell_kind = "silent"
                    action, obs = episode.silent(progress, True, pick)
                else:
                    x = (u_sub - policy.p_silent) / (1.0 - policy.p_silent)
                    spell_kind = VISIBLE_KINDS[min(bisect.bisect_right(kind_cut, x), 2)]
                    action, obs = episode.visible(progress, spell_kind, pick)
                    episode.visible_turn = (action, obs)
            else:
                event = "stall"
                action, obs = episode.stall(progress, pick)
        else:
            if u_event < policy.p_recover:
                event = "recover"
                recovers = spell_start
                note = episode.reconcile_note(progress, pick) if spell_kind == "silent" else ""
                q = p_progress / (1.0 - p_error) if p_error < 1.0 else 0.0
                if u_sub < q:
                    action, obs = episode.progress(progress, note)
                    progress += 1
                else:
                    action, obs = episode.recheck(progress, pick, note)
            else:
                event = "fatal" if u_event < policy.p_recover + policy.p_fatal else "repeat"
                if spell_kind == "silent":
                    action, obs = episode.silent(progress, False, pick)
                else:
                    assert episode.visible_turn is not None
                    action, obs = episode.visible_turn
        is_error = event in ("error", "repeat", "fatal")
        if turns and not (is_error and spell_kind != "silent" and event != "error"):
            prev = turns[-1]
            tries = 0
            while action == prev.action and obs == prev.observation and tries < 8:
                # Only a repeated visible error may copy the previous turn (the repeat rule).
                tries += 1
                if event == "stall":
                    action, obs = episode.stall(before, pick)
                elif event in ("repeat", "fatal"):
                    action, obs = episode.silent(before, False, pick)
                else:  # pragma: no cover - progress/recover/error turns always differ
                    break
            if action == prev.action and obs == prev.observation:
                # The draws above ran out of variety (about once in a million turns); a clean
                # or silent turn must still never look like a repeat to the rules.
                obs = f"{obs} (as before)"
        meta: dict[str, Any] = {
            "true_error": (None if not is_error
                           else "silent" if spell_kind == "silent" else "visible"),
            "true_kind": spell_kind if is_error else None,
            "event": event,
            "spell_start": spell_start if is_error else None,
            "recovers": recovers,
            "progress_before": before,
            "progress_after": progress,
        }
        if policy.budget_aware:
            meta["hurry"] = hurry
        turns.append(Turn(action=action, observation=obs, meta=meta))
        if event == "recover":
            spell_start = None
            spell_kind = ""
            episode.visible_turn = None
        if progress >= task.length:
            end = "success"
        elif event == "fatal":
            end = "fatal"
        after.append((progress, spell_start is not None, end != "budget"))
        if end != "budget":
            break
    success = end == "success"
    if config.mc_rollouts:
        values = rollout_values(
            policy, probs, hurry_probs, task.length, budget, after, config.mc_rollouts,
            np.random.default_rng([config.seed, 3, task.index, sample, budget]),
        )
        for turn, value in zip(turns, values.tolist(), strict=True):
            turn.label = round(2.0 * value - 1.0, 6)
    return Trajectory(
        run=name,
        task_id=task.task_id,
        turns=turns,
        success=success,
        sample=sample,
        budget=budget,
        reward=1.0 if success else 0.0,
        prompt=task.prompt,
        meta={
            "policy": name,
            "params": policy_dict,
            "seed": config.seed,
            "task": {"length": task.length, "difficulty": task.difficulty,
                     "domain": task.domain},
            "end": end,
        },
    )


def rollout_values(
    policy: PolicyParams,
    probs: tuple[float, float],
    hurry_probs: tuple[float, float],
    length: int,
    budget: int,
    after: Sequence[tuple[int, bool, bool]],
    n_rollouts: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Monte Carlo value of the state after each turn of one episode.

    From the hidden state after turn ``t`` (progress, whether a spell is open), ``n_rollouts``
    continuations of the same policy run to success, a fatal turn or the budget, with the
    dynamics of the episode loop (text is irrelevant to the outcome, so it is not made); the
    value is their success rate. A turn that ended the episode has the value of its outcome.
    All continuations of all turns advance together, one turn per step.

    Args:
        policy: The policy.
        probs: ``(p_progress, p_error)`` of the task outside a spell.
        hurry_probs: The same when hurried (budget-aware policies).
        length: Progress the task needs.
        budget: The turn budget.
        after: Per turn ``t = 1..n``: ``(progress, in_spell, ended)`` after it.
        n_rollouts: Continuations per turn.
        rng: The random stream of the rollouts.

    Returns:
        One value in [0, 1] per turn.
    """
    n_turns = len(after)
    state = np.asarray(after, dtype=np.int64).reshape(n_turns, 3)
    turn = np.repeat(np.arange(1, n_turns + 1), n_rollouts)
    progress = np.repeat(state[:, 0], n_rollouts)
    in_spell = np.repeat(state[:, 1].astype(bool), n_rollouts)
    alive = ~np.repeat(state[:, 2].astype(bool), n_rollouts)
    won = progress >= length
    while True:
        turn = turn + 1
        alive &= turn <= budget
        if not alive.any():
            break
        hurry = policy.budget_aware & (budget - turn < policy.hurry_turns)
        p_progress = np.where(hurry, hurry_probs[0], probs[0])
        p_error = np.where(hurry, hurry_probs[1], probs[1])
        u_event = rng.random(turn.size)
        u_sub = rng.random(turn.size)
        clean = alive & ~in_spell
        spell = alive & in_spell
        recover = spell & (u_event < policy.p_recover)
        fatal = spell & ~recover & (u_event < policy.p_recover + policy.p_fatal)
        q = np.where(p_error < 1.0, p_progress / np.maximum(1.0 - p_error, 1e-300), 0.0)
        step = (clean & (u_event < p_progress)) | (recover & (u_sub < q))
        error = clean & (u_event >= p_progress) & (u_event < p_progress + p_error)
        progress = progress + step
        in_spell = (in_spell & ~recover) | error
        won |= alive & (progress >= length)
        alive &= ~(won | fatal)
    return won.reshape(n_turns, n_rollouts).mean(axis=1)


def _policy_dict(policy: PolicyParams) -> dict[str, Any]:
    out = dataclasses.asdict(policy)
    out["kind_weights"] = list(policy.kind_weights)
    return out


def iter_trajectories(
    config: SimConfig, policy: str, tasks: list[SimTask] | None = None
) -> Iterator[Trajectory]:
    """Yield the trajectories of one policy: budget by budget, task by task, sample by sample.

    Args:
        config: What to simulate.
        policy: A key of ``config.policies``.
        tasks: The drawn tasks (default: :func:`draw_tasks` of ``config``).
    """
    params = config.policies[policy]
    params_dict = _policy_dict(params)
    tasks = draw_tasks(config) if tasks is None else tasks
    texts: list[dict[int, tuple[str, str]]] = [{} for _ in tasks]
    for budget in config.budgets:
        for task, progress_texts in zip(tasks, texts, strict=True):
            for sample in range(config.n_samples):
                yield _run_episode(
                    policy, params, params_dict, config, task, budget, sample, progress_texts
                )


def simulate(config: SimConfig) -> dict[str, list[Trajectory]]:
    """Simulate every policy of ``config`` on the same tasks.

    Returns:
        Policy name -> its trajectories (``run`` = the policy name), ordered by budget, task
        and sample.
    """
    tasks = draw_tasks(config)
    return {name: list(iter_trajectories(config, name, tasks)) for name in config.policies}


@dataclass(frozen=True)
class RunSummary:
    """What :func:`write_policy` wrote.

    Attributes:
        policy: The policy name.
        path: The file.
        n_trajectories: Trajectories written.
        n_turns: Turns written.
        n_success: Successful trajectories.
    """

    policy: str
    path: Path
    n_trajectories: int
    n_turns: int
    n_success: int


def write_policy(
    config: SimConfig, policy: str, path: str | Path, tasks: list[SimTask] | None = None
) -> RunSummary:
    """Write one policy's trajectories (all budgets) to ``path`` as canonical JSONL."""
    path = Path(path)
    counts = {"turns": 0, "success": 0}

    def counted() -> Iterator[Trajectory]:
        for traj in iter_trajectories(config, policy, tasks):
            counts["turns"] += len(traj.turns)
            counts["success"] += bool(traj.success)
            yield traj

    n_traj = write_jsonl(counted(), path)
    n_turns, n_success = counts["turns"], counts["success"]
    return RunSummary(policy, path, n_traj, n_turns, n_success)


def write_runs(config: SimConfig, out_dir: str | Path) -> list[Path]:
    """Write one canonical JSONL file per policy, ``out_dir/<policy>.jsonl`` (all budgets).

    The same config always gives byte-identical files.

    Returns:
        The paths written, in the order of ``config.policies``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = draw_tasks(config)
    return [write_policy(config, name, out / f"{name}.jsonl", tasks).path
            for name in config.policies]


# --------------------------------------------------------------------------------------------
# Config files.

PRESETS_DIR = Path(__file__).parent / "presets"
"""Packaged example configs (``recovery simulate --config NAME`` finds ``NAME.toml`` here)."""

_POLICY_FIELDS = {f.name for f in dataclasses.fields(PolicyParams)}
_TASK_FIELDS = {f.name for f in dataclasses.fields(TaskParams)}
_CONFIG_FIELDS = {"policies", "n_tasks", "n_samples", "budgets", "seed", "tasks", "mc_rollouts"}


def policy_from_dict(data: Mapping[str, Any], where: str = "policy") -> PolicyParams:
    """A :class:`PolicyParams` from a mapping of its field names.

    ``preset = "base"`` starts from a preset; the other keys replace its fields.

    Raises:
        ValueError: naming an unknown key or preset, or a bad value.
    """
    values = dict(data)
    preset = values.pop("preset", None)
    unknown = sorted(set(values) - _POLICY_FIELDS)
    if unknown:
        raise ValueError(
            f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(_POLICY_FIELDS))}"
        )
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"{where}: unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    if "kind_weights" in values:
        values["kind_weights"] = tuple(values["kind_weights"])
    start = PRESETS[preset] if preset is not None else PolicyParams()
    try:
        return dataclasses.replace(start, **values)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {err}") from None


def config_from_dict(data: Mapping[str, Any], where: str = "config") -> SimConfig:
    """A :class:`SimConfig` from a mapping (the parsed TOML or JSON of a config file).

    Keys: ``policies`` (name -> policy fields, optionally ``preset``), ``tasks`` (TaskParams
    fields), ``n_tasks``, ``n_samples``, ``budgets``, ``seed``; all optional.
    """
    unknown = sorted(set(data) - _CONFIG_FIELDS)
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_CONFIG_FIELDS))}"
        )
    kwargs: dict[str, Any] = {k: data[k]
                              for k in ("n_tasks", "n_samples", "budgets", "seed", "mc_rollouts")
                              if k in data}
    if "policies" in data:
        policies = data["policies"]
        if not isinstance(policies, Mapping):
            raise ValueError(f"{where}: 'policies' must be a table of policy tables")
        kwargs["policies"] = {
            str(name): policy_from_dict(p, f"{where}: policies.{name}")
            for name, p in policies.items()
        }
    if "tasks" in data:
        tasks = dict(data["tasks"])
        bad = sorted(set(tasks) - _TASK_FIELDS)
        if bad:
            raise ValueError(
                f"{where}: tasks: unknown field(s) {', '.join(bad)}; known: {', '.join(sorted(_TASK_FIELDS))}"
            )
        if "domains" in tasks:
            tasks["domains"] = tuple(tasks["domains"])
        try:
            kwargs["tasks"] = TaskParams(**tasks)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: tasks: {err}") from None
    try:
        return SimConfig(**kwargs)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {err}") from None


def resolve_config_path(path: str | Path) -> Path:
    """``path`` itself when it exists, else the packaged preset config ``presets/<path>.toml``."""
    candidate = Path(path)
    if candidate.exists():
        return candidate
    packaged = PRESETS_DIR / f"{candidate.name}.toml"
    if candidate.suffix == "" and packaged.exists():
        return packaged
    known = ", ".join(sorted(p.stem for p in PRESETS_DIR.glob("*.toml")))
    raise FileNotFoundError(f"{path}: no such file (packaged configs: {known})")


def load_config(path: str | Path) -> SimConfig:
    """Read a simulator config from a TOML or JSON file (or a packaged config by name).

    Example file (TOML)::

        seed = 0
        budgets = [10, 20, 40]
        [tasks]
        error_spread = 0.0
        [policies.base]
        preset = "base"
        [policies.careful]
        preset = "base"
        p_recover = 0.7

    Raises:
        FileNotFoundError: when the file does not exist.
        ValueError: naming the file and the bad key or value.
    """
    resolved = resolve_config_path(path)
    text = resolved.read_text(encoding="utf-8")
    try:
        if resolved.suffix == ".json":
            data = json.loads(text)
        else:
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib

            data = tomllib.loads(text)
    except (json.JSONDecodeError, ValueError) as err:
        raise ValueError(f"{resolved}: cannot read config: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{resolved}: expected a table/object at the top level")
    return config_from_dict(data, str(resolved))
