"""Task 3 detectors by name (:mod:`dialfork_metrics.task3.registry`), and loading of saved detectors.

=========  ===========================================================================
name       detector
=========  ===========================================================================
``it``     :class:`StreamingDetector` ``method="it"`` (Improbable Transition)
``ss``     :class:`StreamingDetector` ``method="ss"`` (Surprisal Spike)
``it+nc``  IT with node confidence
``ss+nc``  SS with node confidence
``first``  :class:`FirstTurnBaseline`
``last``   :class:`LastTurnBaseline`
``random`` :class:`RandomTurnBaseline` (``seed=``)
``llm``    :class:`LLMDetector` (``model=``, ``backend=``, ``with_workflow=``...)
``wf``     :class:`WorkflowDetector` (workflow-aware: node assignment with rejection, repeats)
``wf-sup`` :class:`SupervisedWorkflowDetector` (per-turn classifier fitted on forked dialogues)
=========  ===========================================================================

plus any detector registered with :func:`~dialfork_metrics.task3.registry.register_detector`.
The name lists below are live views of the registry.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..registry import NameView
from .baselines import load_baseline
from .registry import detector_names, get_detector

#: The IT/SS N-gram detectors (``ngram=True``).
STREAMING_DETECTORS: Sequence[str] = NameView(lambda: detector_names(ngram=True))
#: The trivial baselines (regime ``"baselines"``).
BASELINES: Sequence[str] = NameView(lambda: detector_names(regime="baselines"))
#: The workflow-aware detectors (regime ``"workflow-aware"``).
WORKFLOW_DETECTORS: Sequence[str] = NameView(lambda: detector_names(regime="workflow-aware"))
#: Every registered detector.
DETECTOR_NAMES: Sequence[str] = NameView(detector_names)


def make_detector(name: str, **kwargs: Any):
    """A new (unfitted) detector by registry name; ``kwargs`` go to its constructor.

    Args:
        name: A registered name (see the module doc; case and surrounding spaces ignored).
        **kwargs: Constructor options of the detector (e.g. ``encoder=``, ``order=`` for the
            streaming detectors, ``seed=`` for ``random``, ``model=`` for ``llm``).

    Returns:
        The unfitted detector: a ``StreamingDetector`` (``method`` and ``node_confidence`` set
        from the name), a baseline, a workflow detector, an ``LLMDetector``, or what a registered
        detector's factory builds.

    Raises:
        ValueError: An unknown name (the message lists the registered ones), or options the
            detector's constructor rejects.
        TypeError: An option the detector's constructor does not take, or one its name fixes.
    """
    return get_detector(name).build(**kwargs)


def load_detector(path: str | os.PathLike, encoder: Any = None):
    """Load a detector saved with ``.save(path)`` (streaming detectors and baselines).

    Args:
        path: The detector's folder (holding ``config.json``).
        encoder: Encoder of a streaming detector (alias/path or object); None: the saved one.
            Ignored for baselines.

    Returns:
        The fitted ``StreamingDetector``, or the baseline.

    Raises:
        FileNotFoundError: The folder has no ``config.json``.
        ValueError: ``config.json`` names an unknown format, or the saved detector is invalid.
    """
    from .streaming import FORMAT as STREAMING_FORMAT
    from .streaming import StreamingDetector

    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        raise FileNotFoundError(f"{path}: no config.json (not a saved Task 3 detector folder)")
    fmt = json.loads(cfg.read_text(encoding="utf-8")).get("format")
    if fmt == STREAMING_FORMAT:
        return StreamingDetector.load(path, encoder=encoder)
    if fmt == "dialfork-task3-baseline":
        return load_baseline(path)
    if fmt == "dialfork-task3-workflow":
        from .workflow_detector import WorkflowDetector

        return WorkflowDetector.load(path, encoder=encoder)
    if fmt == "dialfork-task3-workflow-supervised":
        from .workflow_supervised import SupervisedWorkflowDetector

        return SupervisedWorkflowDetector.load(path, encoder=encoder)
    raise ValueError(f"{cfg}: unknown detector format {fmt!r}")
