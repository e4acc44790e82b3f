"""Task 3 baselines that read no text: :mod:`.trivial` (first, last, random system turn) and
:mod:`.ngram` (the node-sequence N-gram model of the streaming detectors)."""
