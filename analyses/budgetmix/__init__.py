"""BudgetMix signals: budget schedules, PRM-shaped per-turn rewards, per-row budgets for real
trainers, and a reference trainer (``docs/budgetmix.md``).

Modules, one idea each:

- :mod:`~analyses.budgetmix.schedule`: :class:`BudgetSchedule` (uniform, mixture, adaptive),
  its JSON file, and the weights formula;
- :mod:`~analyses.budgetmix.evidence`: adaptive schedules from a store's Pass@(1,T) shortfall
  or unrecovered error spells;
- :mod:`~analyses.budgetmix.plan`: the options and library face of ``recovery budgetmix plan``;
- :mod:`~analyses.budgetmix.shaping`: the shaped reward
  ``r_t = R [t = last] + lambda (gamma phi(s_t+1) - phi(s_t))`` on arrays;
- :mod:`~analyses.budgetmix.alignment`: where each turn lies in a trajectory's text, and on
  which token its reward goes;
- :mod:`~analyses.budgetmix.rewards`: shaped rewards of a store's trajectories from
  ``step_scores``, written as JSONL or Parquet (``recovery budgetmix rewards``);
- :mod:`~analyses.budgetmix.assign`: a per-row ``max_turns`` drawn from a schedule, added to a
  training dataset (``recovery budgetmix assign``);
- :mod:`~analyses.budgetmix.scorer`: what BudgetMix needs from a PRM (a protocol; ``analyses``
  never imports ``prm``);
- :mod:`~analyses.budgetmix.adapters`: thin adapters for TRL, verl and SkyRL, each importing
  its trainer only inside;
- :mod:`~analyses.budgetmix.reference`: the reference trainer on a simulated task.

Example:
    >>> from analyses.budgetmix import (EvidenceOptions, ShapedRewardOptions, adaptive_schedule,
    ...                                 export_shaped_rewards)
    >>> schedule = adaptive_schedule(con, [8, 16, 32], EvidenceOptions(evidence="shortfall"))
    >>> schedule.save("schedule.json"); schedule.sample(0, 4)
    >>> export_shaped_rewards(con, "prm-ckpt", "rewards.parquet", ShapedRewardOptions(lam=1.0))
"""

from analyses.budgetmix.alignment import last_token_indices, render_offsets, render_trajectory
from analyses.budgetmix.assign import (
    BUDGET_KEY,
    AssignConfig,
    AssignOptions,
    AssignResult,
    assign_budgets,
    row_budget,
    with_budgets,
)
from analyses.budgetmix.evidence import (
    EVIDENCE_KINDS,
    EVIDENCE_MODES,
    EvidenceOptions,
    adaptive_schedule,
    budget_evidence,
    default_budgets,
)
from analyses.budgetmix.plan import PlanConfig, plan_schedule
from analyses.budgetmix.rewards import (
    REWARD_COLUMNS,
    REWARD_LAYOUTS,
    RewardsConfig,
    RewardsExport,
    ShapedRewardOptions,
    export_rewards,
    export_shaped_rewards,
    shaped_rewards_frame,
)
from analyses.budgetmix.schedule import (
    MAX_BUDGET,
    MAX_BUDGETS,
    SCHEDULE_FORMAT,
    SCHEDULE_VERSION,
    STRATEGIES,
    BudgetEvidence,
    BudgetSchedule,
    budget_range,
    check_budget,
    evidence_weights,
    mixture_schedule,
    parse_budget_range,
    uniform_schedule,
    validate_schedule,
)
from analyses.budgetmix.scorer import StepScorer, TurnScorer
from analyses.budgetmix.shaping import (
    DEFAULT_INITIAL_POTENTIAL,
    ShapedRewards,
    ShapingOptions,
    discounted_returns,
    shape_rewards,
)

__all__ = [
    "BUDGET_KEY",
    "DEFAULT_INITIAL_POTENTIAL",
    "EVIDENCE_KINDS",
    "EVIDENCE_MODES",
    "MAX_BUDGET",
    "MAX_BUDGETS",
    "REWARD_COLUMNS",
    "REWARD_LAYOUTS",
    "SCHEDULE_FORMAT",
    "SCHEDULE_VERSION",
    "STRATEGIES",
    "AssignConfig",
    "AssignOptions",
    "AssignResult",
    "BudgetEvidence",
    "BudgetSchedule",
    "EvidenceOptions",
    "PlanConfig",
    "RewardsConfig",
    "RewardsExport",
    "ShapedRewardOptions",
    "ShapedRewards",
    "ShapingOptions",
    "StepScorer",
    "TurnScorer",
    "adaptive_schedule",
    "assign_budgets",
    "budget_evidence",
    "budget_range",
    "check_budget",
    "default_budgets",
    "discounted_returns",
    "evidence_weights",
    "export_rewards",
    "export_shaped_rewards",
    "last_token_indices",
    "mixture_schedule",
    "parse_budget_range",
    "plan_schedule",
    "render_offsets",
    "render_trajectory",
    "row_budget",
    "shape_rewards",
    "shaped_rewards_frame",
    "uniform_schedule",
    "validate_schedule",
    "with_budgets",
]
