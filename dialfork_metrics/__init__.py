"""dialfork_metrics: encoders, Task 1/2 distances, Task 3 detectors and scoring, evaluate modules.

``import dialfork_metrics`` is fast: every public name is resolved lazily from its submodule
on first access (PEP 562), so numpy/scipy/torch load only when a function is used.
"""

from __future__ import annotations

from dialfork_dataset.lazy import lazy_exports

from .registry import exports as _metric_exports

# public name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    # encoders
    "Encoder": "encoders",
    "ENCODER_ALIASES": "encoders",
    "resolve_encoder_name": "encoders",
    "get_encoder": "encoders",
    # Task 2, embedding level
    "flowscore_from_embeddings": "distances",
    "flowdtw_from_embeddings": "distances",
    "mean_turn_distance": "distances",
    "flowscore_batch_from_embeddings": "distances",
    "flowdtw_batch_from_embeddings": "distances",
    # Task 2, dialogue level, and the set-level metric functions: from the registry (the update below)
    # Task 1, embedding level and set level
    "fbd_from_embeddings": "setlevel",
    "prd_from_embeddings": "setlevel",
    "set_turn_count_diff": "setlevel",
    "set_word_count_diff": "setlevel",
    "FlowGraph": "flowgraph",
    "flowkl_from_likelihoods": "flowgraph",
    # Task 3
    "score_predictions": "task3",
    "score_from_stats": "task3",
    "validate_predictions": "task3",
    "PredictionError": "task3",
    "make_detector": "task3",
    "load_detector": "task3",
    "StreamingDetector": "task3",
    # benchmark and statistics
    "run_benchmark": "bench",
    "ranking_tau": "stats",
    "kendall_tau": "stats",
    "kendall_tau_rows": "stats",
    # evaluate modules
    "load": "modules",
    "module_path": "modules",
}

# every metric function the registry names as "dialfork_metrics.<sub>:<name>" (dialfork_metrics.registry)
_EXPORTS.update({k: v for k, v in _metric_exports().items() if k not in _EXPORTS})

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
