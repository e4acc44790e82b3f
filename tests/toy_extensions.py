"""Toy extensions of every registry, registered at start-up for the whole suite (``tests/conftest.py``;
``DIALFORK_TEST_TOY_EXTENSIONS=0`` leaves them out): a pair and set metric, a fifth hallucination
type, a Task 3 detector, a generation backend and a source kind.

They stand for an extension built into DialFork: the suite must stay green with them registered,
so every test that lists types, metrics, detectors, backends or source kinds reads the registry
(paper facts stay literal only where they name the paper's four types, or take the
``paper_types_only`` fixture). Each toy is a few lines, and is named so that it collides with no
toy a test registers itself (``TOY``, ``vocab``, ``middle``, ``toy``).

The fifth type brings its variants in its entry (``HallucinationType(variants=[...])``), as a built-in
type's module names its variants file: the default pool then has them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: The environment variable that turns the toy extensions off when ``0`` (read by ``tests/conftest.py``).
ENV = "DIALFORK_TEST_TOY_EXTENSIONS"

METRIC = "toy_overlap"
TYPE = "PREM"
DETECTOR = "toy_middle"
BACKEND = "toy_echo"
SOURCE_KIND = "toyflow"


def enabled() -> bool:
    """Whether the suite registers the toy extensions: always, unless ``DIALFORK_TEST_TOY_EXTENSIONS=0``."""
    return os.environ.get(ENV, "1").strip() not in ("0", "false", "no")


# -- a metric: 1 - Jaccard of the word sets, at both levels ---------------------------------------
def _words(turns: list) -> set[str]:
    return {w for t in turns for w in (t["text"] if isinstance(t, dict) else t).lower().split()}


def overlap_core(refs: list, cands: list):
    """Pair core (``input="turns"``): one distance per pair of validated turn lists."""
    import numpy as np

    out = []
    for a, b in zip(refs, cands):
        wa, wb = _words(a), _words(b)
        out.append(1.0 - len(wa & wb) / len(wa | wb) if wa | wb else 0.0)
    return np.asarray(out, dtype=np.float64)


def set_overlap(ref_set: list, tgt_set: list) -> float:
    """Set function: 1 - Jaccard of the two sets' word sets."""
    from dialfork_dataset.turns import as_turns

    a = [t for i, d in enumerate(ref_set) for t in as_turns(d, where=f"reference set dialogue {i}")]
    b = [t for i, d in enumerate(tgt_set) for t in as_turns(d, where=f"target set dialogue {i}")]
    return float(overlap_core([a], [b])[0])


def set_overlap_unit(ctx: Any, task: str, ref: list, tgt: list) -> float:
    """The benchmark's Task 1 unit function of the set metric."""
    return set_overlap([d["turns"] for d in ref], [d["turns"] for d in tgt])


# -- a fifth hallucination type: the system jumps to its last step --------------------------------
def plan_premature(hal: Any, cx: Any) -> list:
    """The template planner: D+'s last remaining step at once (a premature close)."""
    return [("own", n) for n in cx.remaining[-1:]] or [("own", n) for n in cx.completed[-1:]]


def _variants() -> list[dict[str, Any]]:
    return [
        {
            "id": f"prem-{i}",
            "description": "close the task before its steps are done",
            "cue": "The assistant wraps up before the task is done.",
            "instruction": "From now on, skip the remaining steps of your workflow and close the conversation.",
        }
        for i in range(5)
    ]


# -- a Task 3 detector: always the middle system turn ---------------------------------------------
def _middle_detector_class() -> type:
    from dialfork_metrics.task3.baselines.trivial import _Baseline

    class ToyMiddleDetector(_Baseline):
        """Always the middle system turn (no training). A scikit-learn estimator like every detector
        (``_Baseline`` is a ``BaseEstimator``: no parameters, an empty ``_parameter_constraints``,
        ``fit`` sets ``n_train_``); tests/test_detector_conventions.py checks it when registered."""

        name = DETECTOR

        def _predict_T(self, T: int, dialogue: Any) -> int:
            return (T + 1) // 2

    ToyMiddleDetector.__module__, ToyMiddleDetector.__qualname__ = __name__, "ToyMiddleDetector"
    return ToyMiddleDetector


def __getattr__(name: str) -> Any:
    if name == "ToyMiddleDetector":  # made on first use: importing this module imports no detector code
        cls = _middle_detector_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- a backend: each agent says which turn it is ----------------------------------------------------
class EchoBackend:
    """Says the role and turn of each request; ends at turn 12 (an LLM-like backend without a model)."""

    uses_messages = True

    def __init__(self, prefix: str = "echo"):
        self.name = BACKEND
        self.prefix = prefix

    def decoding(self) -> dict:
        return {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 16}

    def generate(self, requests: list) -> list[str]:
        return [
            f"{self.prefix} {r.role} {r.turn_index}" + (" [END]" if r.turn_index >= 12 else "")
            for r in requests
        ]


# -- a source kind: a workflow file under another prefix --------------------------------------------
def open_toy_source(path: Path) -> Any:
    """The source kind's opener: the workflow file (or folder) at ``path``."""
    from dialfork_dataset.workflow.files import WorkflowCorpus

    return WorkflowCorpus(path)


def register() -> None:
    """Register the five toys (the fifth type with its variants in its entry)."""
    from dialfork_dataset import sources as source_kinds
    from dialfork_dataset import taxonomy
    from dialfork_dataset.sources import SourceKind
    from dialfork_dataset.taxonomy import HallucinationType
    from dialfork_metrics.registry import MetricSpec
    from dialfork_metrics.registry import register as register_metric
    from dialfork_metrics.task3 import registry as detector_registry
    from dialfork_metrics.task3.registry import DetectorSpec
    from generation import backends
    from generation.backends import BackendSpec

    register_metric(MetricSpec(METRIC, "pair", "Toy overlap", f"{__name__}:overlap_core", input="turns"))
    register_metric(
        MetricSpec(METRIC, "set", "Toy overlap", f"{__name__}:set_overlap_unit", f"{__name__}:set_overlap")
    )
    taxonomy.register(
        HallucinationType(
            TYPE,
            "premature closing",
            breaks_task=True,
            planner=f"{__name__}:plan_premature",
            variants=_variants(),
            example_line="That is all done, goodbye!",
        )
    )
    detector_registry.register(
        DetectorSpec(
            DETECTOR,
            "Toy middle",
            "baselines",
            f"{__name__}:ToyMiddleDetector",
            in_benchmark=True,
            description="always the middle system turn",
        )
    )
    backends.register(BackendSpec(BACKEND, f"{__name__}:EchoBackend", llm=True))
    source_kinds.register(
        SourceKind(SOURCE_KIND, f"{__name__}:open_toy_source", "a workflow file (toy kind)", title="toy")
    )
