"""Registry of Task 3 detectors by name, and loading of saved detectors.

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
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .baselines import FirstTurnBaseline, LastTurnBaseline, RandomTurnBaseline, load_baseline

STREAMING_DETECTORS: tuple[str, ...] = ("it", "ss", "it+nc", "ss+nc")
BASELINES: tuple[str, ...] = ("first", "last", "random")
WORKFLOW_DETECTORS: tuple[str, ...] = ("wf", "wf-sup")
DETECTOR_NAMES: tuple[str, ...] = (*STREAMING_DETECTORS, *WORKFLOW_DETECTORS, *BASELINES, "llm")


def make_detector(name: str, **kwargs: Any):
    """A new (unfitted) detector by registry name; ``kwargs`` go to its constructor.

    Args:
        name: A registry name (see the module doc; case and surrounding spaces ignored).
        **kwargs: Constructor options of the detector (e.g. ``encoder=``, ``order=`` for the
            streaming detectors, ``seed=`` for ``random``, ``model=`` for ``llm``).

    Returns:
        The unfitted detector: a ``StreamingDetector`` (``method`` and ``node_confidence`` set
        from the name), a baseline or an ``LLMDetector``.

    Raises:
        ValueError: An unknown name, or options the detector's constructor rejects.
        TypeError: An option the detector's constructor does not take.
    """
    key = str(name).strip().lower()
    if key in STREAMING_DETECTORS:
        from .streaming import StreamingDetector

        method, _, nc = key.partition("+")
        return StreamingDetector(method=method, node_confidence=bool(nc), **kwargs)
    if key == "wf":
        from .workflow_detector import WorkflowDetector

        return WorkflowDetector(**kwargs)
    if key == "wf-sup":
        from .workflow_supervised import SupervisedWorkflowDetector

        return SupervisedWorkflowDetector(**kwargs)
    if key == "first":
        return FirstTurnBaseline(**kwargs)
    if key == "last":
        return LastTurnBaseline(**kwargs)
    if key == "random":
        return RandomTurnBaseline(**kwargs)
    if key == "llm":
        from .llm import LLMDetector

        return LLMDetector(**kwargs)
    raise ValueError(f"unknown Task 3 detector {name!r}; known: {', '.join(DETECTOR_NAMES)}")


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
