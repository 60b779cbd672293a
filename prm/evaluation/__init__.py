"""Measuring a PRM: the metrics of its step scores (metrics), its decisions and their error
threshold (decisions), the floors beside them (floors), ``prm eval`` (evaluate) and ``prm cv``
(cv)."""
