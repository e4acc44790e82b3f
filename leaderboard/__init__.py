"""leaderboard: from a submission file to a ranked row, offline-testable end to end.

``python -m leaderboard validate|score|render`` (see ``__main__``). Public names resolve
lazily (PEP 562), so ``import leaderboard`` stays cheap.
"""

from __future__ import annotations

from dialfork_dataset.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "BlindSet": "validate",
    "Problem": "validate",
    "SubmissionError": "validate",
    "ValidationReport": "validate",
    "validate_submission": "validate",
    "load_schema": "validate",
    "score_detector": "score",
    "score_metric": "score",
    "kendall_tau_b_rows": "score",
    "evaluate": "submissions",
    "submit": "submissions",
    "demo_round_trip": "submissions",
    "LocalStore": "store",
    "HubStore": "store",
    "RateLimitError": "store",
    "ResultExistsError": "store",
    "load_results": "store",
    "render_html": "render",
    "render_site": "render",
    "LeaderboardApp": "app",
    "write_predictions": "synthetic",
    "write_distances": "synthetic",
    "write_metadata": "synthetic",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
