"""The PRM's inputs: step examples and the task split (examples), the label sources (labels),
the structural features of each turn (features, families, siblings), and the neural kinds'
token windows (tokenize, tokenizer_checks, windows, novelty)."""
