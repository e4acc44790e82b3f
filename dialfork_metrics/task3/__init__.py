"""Task 3 of DialFork (SPEC section 8): at which system turn does a dialogue first go off its
workflow?

* scoring: :func:`score_predictions`, :func:`score_from_stats`, :func:`validate_predictions`,
  :class:`PredictionError`;
* streaming detectors (IT, SS, +NC): :class:`StreamingDetector`; trivial baselines;
  zero-shot LLM detectors: :class:`LLMDetector`; :func:`make_detector` and :func:`load_detector`;
* the detector registry (:mod:`dialfork_metrics.task3.registry`): :class:`DetectorSpec`,
  its verbs register, unregister, get and names;
* files: :func:`load_examples`, :func:`load_gold_rows`, :func:`read_predictions`,
  :func:`write_predictions`. CLI: ``python -m dialfork_metrics.task3 predict|score``.

Names resolve lazily (numpy/transformers load only when used).
"""

from __future__ import annotations

from dialfork_dataset.lazy import lazy_exports

from .registry import exports as _detector_exports

# public name -> submodule that defines it; the detector classes come from the registry (below)
_EXPORTS: dict[str, str] = {
    "PredictionError": "scorer",
    "SCORE_WEIGHTS": "scorer",
    "score_predictions": "scorer",
    "score_from_stats": "scorer",
    "score_from_components": "scorer",
    "validate_predictions": "scorer",
    "format_table": "scorer",
    "NgramLM": "baselines.ngram",
    "NotFittedError": "streaming",
    "TransformersChat": "llm.detector",
    "parse_turn_answer": "llm.parsing",
    "ParsedAnswer": "llm.parsing",
    "DETECTOR_NAMES": "detectors",
    "make_detector": "detectors",
    "load_detector": "detectors",
    "DetectorSpec": "registry",
    "load_examples": "io",
    "load_gold_rows": "io",
    "read_predictions": "io",
    "write_predictions": "io",
}

# every detector class the registry names as "dialfork_metrics.task3.<sub>:<Name>" (registry.exports)
_EXPORTS.update({k: v for k, v in _detector_exports().items() if k not in _EXPORTS})

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
