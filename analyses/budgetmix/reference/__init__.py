"""The reference BudgetMix trainer: a small torch policy on a simulated agent task, trained at
fixed budgets, with BudgetMix, and with BudgetMix + PRM shaping (``recovery budgetmix
train-sim``).

Modules: :mod:`~analyses.budgetmix.reference.env` (the task and its dynamics, the optimum by
dynamic programming), :mod:`~analyses.budgetmix.reference.policy` (the network and its
inputs), :mod:`~analyses.budgetmix.reference.rollout` (running a policy on a batch of
episodes), :mod:`~analyses.budgetmix.reference.text` (episodes as canonical trajectories),
:mod:`~analyses.budgetmix.reference.textenv` (the task as an interactive tool environment for
LLM trainers) and :mod:`~analyses.budgetmix.reference.train` (the training loop and
``train_sim``). torch is imported only inside the functions that need it.
"""
