"""The process reward model: labels, datasets, models, training, scoring and evaluation."""
