"""annotation: the gated three-step human-study tool of DialFork (paper, Appendix N) and its analyses.

Install with the ``annotation`` extra (FastAPI, SQLAlchemy, statsmodels, krippendorff, irrCAC...).

* ``python -m annotation serve --db URL --corpus DIR --star DIR``: the web app (admin panel at ``/admin``);
* ``python -m annotation analyse --db URL --out DIR``: every analysis, Markdown report, CSV/JSON, figure;
* ``python -m annotation judge --db URL --out DIR --model M``: the calibrated LLM judge next to the
  people (Table 11); ``python -m annotation reset-throttle --db URL``: clear the login throttle;
* :class:`Study` (the database and every operation on it), :func:`create_app` (the ASGI app),
  :func:`analyse` / :func:`run_analyses` (the statistics), :func:`assign_cue` / :func:`draw_blocks`
  (the design).

Imports are lazy: ``import annotation`` loads no web or statistics library.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Study": "store",
    "AnnotationError": "store",
    "Conflict": "store",
    "Invalid": "store",
    "NotFound": "store",
    "reconstruct_presentation": "store",
    "recompute_cue": "store",
    "create_app": "app",
    "analyse": "analysis",
    "prepare": "analysis",
    "first_judgments": "analysis",
    "kendall_tau_b": "analysis",
    "wilson": "analysis",
    "gwet_ac1": "analysis",
    "krippendorff_interval": "analysis",
    "probability_of_superiority": "analysis",
    "AnswersError": "analysis",
    "run_analyses": "report",
    "markdown_report": "report",
    "load_answers": "report",
    "load_distances": "report",
    "assign_cue": "design",
    "draw_blocks": "design",
    "latin_types": "design",
    "block_order": "design",
    "TaskPool": "design",
    "Cue": "design",
    "SamplingError": "design",
    "FOIL_SHARE_FORKED": "design",
    "load_corpus": "corpus",
    "task_workflow": "corpus",
    "task_descriptions": "corpus",
    "workflow_source": "corpus",
    "hash_password": "security",
    "verify_password": "security",
    "LoginThrottle": "security",
    "neutralize_cell": "security",
    "restore_cell": "security",
    "run_judge": "judge",
    "table11": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'annotation' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{mod}", __name__), name)
