"""Parts of ``bench/budgetmix_trl.py`` (the BudgetMix language-model bench): the task splits,
the mixed-strategy warm start, the GRPO trainer settings, evaluation rollouts and the pilot."""
