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

plus any detector registered with :func:`~dialfork_metrics.task3.registry.register`.
The name lists below are live views of the registry.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..registry import NameView
from . import registry as detector_registry
from .registry import DetectorSpec, detector_for_format

#: The IT/SS N-gram detectors (``ngram=True``).
STREAMING_DETECTORS: Sequence[str] = NameView(lambda: detector_registry.names(ngram=True))
#: The trivial baselines (regime ``"baselines"``).
BASELINES: Sequence[str] = NameView(lambda: detector_registry.names(regime="baselines"))
#: The workflow-aware detectors (regime ``"workflow-aware"``).
WORKFLOW_DETECTORS: Sequence[str] = NameView(lambda: detector_registry.names(regime="workflow-aware"))
#: Every registered detector.
DETECTOR_NAMES: Sequence[str] = NameView(detector_registry.names)


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
    return detector_registry.get(name).build(**kwargs)


def saved_detector_spec(path: str | os.PathLike) -> DetectorSpec:
    """The registry entry that loads a saved detector folder: the one whose ``save_format`` is the
    ``"format"`` of the folder's ``config.json``.

    Args:
        path: The detector's folder (holding ``config.json``).

    Returns:
        The :class:`~dialfork_metrics.task3.registry.DetectorSpec`.

    Raises:
        FileNotFoundError: The folder has no ``config.json``.
        ValueError: ``config.json`` is not JSON, or names a format no registered detector saves (the
            message lists the registered formats).
    """
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        raise FileNotFoundError(f"{path}: no config.json (not a saved Task 3 detector folder)")
    try:
        meta = json.loads(cfg.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{cfg}: not JSON ({e}); not a saved Task 3 detector folder") from None
    return detector_for_format(meta.get("format") if isinstance(meta, dict) else None, str(cfg))


def _takes(fn: Any, keyword: str) -> bool:
    """Whether ``fn`` can be called with ``keyword=`` (a parameter of that name, or ``**kwargs``)."""
    try:
        ps = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == keyword or p.kind is inspect.Parameter.VAR_KEYWORD for p in ps)


def load_detector(path: str | os.PathLike, encoder: Any = None):
    """Load a detector saved with ``.save(path)``, by its registry entry: the detector whose
    ``save_format`` is the folder's ``config.json`` ``"format"`` loads it with its ``loader``.

    Args:
        path: The detector's folder (holding ``config.json``).
        encoder: Encoder replacing the saved one (alias/path or object); None: the saved one.
            Passed only to a loader that takes ``encoder=`` (or of a detector that needs an
            encoder); ignored for the baselines.

    Returns:
        The fitted detector (a ``StreamingDetector``, a baseline, a workflow detector, or what a
        registered detector's loader returns).

    Raises:
        FileNotFoundError: The folder has no ``config.json``.
        ValueError: ``config.json`` names a format no registered detector saves (the message lists
            the registered formats), or the saved detector is invalid.
    """
    spec = saved_detector_spec(path)
    loader = spec.loader_fn()
    kw = {}
    if encoder is not None and ("encoder" in spec.needs or _takes(loader, "encoder")):
        kw["encoder"] = encoder
    return loader(path, **kw)
