"""Numbers out: Pass@(K,T), the gain decomposition, budget curves, BudgetMix planning and
reward shaping, reports and plots."""
