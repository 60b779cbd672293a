"""Thin adapters that hand BudgetMix's per-row budgets (and PRM-shaped rewards) to real trainers.

Each lives in its own module and imports its trainer only inside functions, so importing an
adapter needs no trainer installed:

- :mod:`~analyses.budgetmix.adapters.trl`: an environment wrapper for TRL's ``GRPOTrainer``
  (``environment_factory``) that ends the episode at the row's ``max_turns`` and returns the
  PRM-shaped reward;
- :mod:`~analyses.budgetmix.adapters.trl_credit`: a ``GRPOTrainer`` subclass that gives each
  turn's tokens that turn's advantage (the PRM as the value function);
- :mod:`~analyses.budgetmix.adapters.verl`: a verl agent loop, registered under a name, that
  sets its assistant-turn limit from the row's ``extra_info``;
- :mod:`~analyses.budgetmix.adapters.skyrl`: a SkyRL generator whose turn limit comes from the
  row's ``env_extras``.

The budgets come from ``recovery budgetmix assign`` (:mod:`analyses.budgetmix.assign`).
"""
