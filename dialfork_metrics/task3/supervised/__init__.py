"""The supervised workflow detector ``wf-sup``: :mod:`.classifier` (causal per-turn features over the
workflow, turn labels, the classifier, as functions over arrays) and :mod:`.detector` (the estimator)."""
