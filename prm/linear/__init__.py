"""The linear PRMs, logistic regressions on CPU: the structured model over each turn's
features and text scores (structured, text_scores,
structured_rows) and the TF-IDF baseline (baseline);
their folders are checked value by value when read (folder_checks)."""
