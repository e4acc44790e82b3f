"""The learned reader (issue 50): which step of its workflow a system turn says.

:mod:`.data` builds the labelled reading set (SGD, STAR's workflow texts; STAR's human dialogues for
evaluation only); :mod:`.steps` holds :class:`~.steps.StepReader`, a head over the frozen packaged
MiniLM trained contrastively over a task's steps, calibrated, shipped in ``weights/``
(:func:`~.steps.default_reader`). Rebuild the shipped weights with
``python -m dialfork_metrics.task3.workflow.reader train`` (see :mod:`.__main__`).
"""

from __future__ import annotations

from dialfork_dataset.lazy import lazy_exports

_EXPORTS = {
    "FOLDS": "data",
    "ReadingTurn": "data",
    "default_training_turns": "data",
    "file_phrasings": "data",
    "sgd_turns": "data",
    "star_human_turns": "data",
    "star_workflow_turns": "data",
    "ReaderWeightsError": "steps",
    "StepReader": "steps",
    "default_reader": "steps",
    "WEIGHTS_DIR": "steps",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
__all__ = sorted(_EXPORTS)
