"""The benchmark's method and detector names, their display labels and their regimes.

The one place that lists what ``dialfork_metrics.bench`` runs and how ``dialfork_metrics.report``
names it: both import from here (so neither imports the other). Metric names and labels are views
of :mod:`dialfork_metrics.registry`; detector names, labels and regimes of
:mod:`dialfork_metrics.task3.registry`.

>>> label("flowkl"), label("my_metric")
('FlowKL', 'my_metric')
>>> regime("ss+nc"), regime("first"), regime("mine")
('streaming', 'baselines', 'other')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .registry import LabelView, NameView, names
from .task3 import registry as detector_registry
from .task3.registry import RegimeView, detector_labels

#: Task 1 (SPEC 5) methods, in the order of the paper's Table 2: a live view of the registry's set
#: metrics (:mod:`dialfork_metrics.registry`), so a metric registered at run time is listed.
TASK1_METHODS: Sequence[str] = NameView(lambda: names("set"))
#: Task 2 (SPEC 6) methods, in the order of the paper's Table 3: the registry's pair metrics.
TASK2_METHODS: Sequence[str] = NameView(lambda: names("pair"))
#: Task 3 (SPEC 8) detectors of the benchmark's default run: the trivial baselines, the streaming
#: detectors, then the workflow-aware one; a live view of the detector registry
#: (:mod:`dialfork_metrics.task3.registry`, ``in_benchmark=True``).
TASK3_DETECTORS: Sequence[str] = NameView(lambda: detector_registry.names(in_benchmark=True))

#: The paper's Holm family for Task 1 (Appendix J): FlowKL against each other distance method.
#: The length controls and Random are sanity checks, not competitors, so they stay out of the
#: family (pass ``against=`` to :func:`dialfork_metrics.bench.task1_comparisons` to widen it).
TASK1_REFERENCE = "flowkl"
TASK1_COMPARED: tuple[str, ...] = ("fbd", "prd")

#: Display label of each method and detector in the reports (live views of both registries).
LABELS: Mapping[str, str] = LabelView(detector_labels)

#: Regimes whose winners Appendix I compares (regime -> detector names, a live view of the detector
#: registry); a name no detector has is in the regime "other".
TASK3_REGIMES: Mapping[str, tuple[str, ...]] = RegimeView()


def label(method: str) -> str:
    """The display label of a method or detector (a user metric keeps its own name).

    Args:
        method: A method or detector name.

    Returns:
        Its label in tables and figures.
    """
    return LABELS.get(method, method)


def regime(detector: str) -> str:
    """The Appendix I regime of a Task 3 detector.

    Args:
        detector: A Task 3 detector name.

    Returns:
        ``"baselines"``, ``"streaming"``, ``"workflow-aware"`` or ``"other"`` (also for an unknown name).
    """
    return next((r for r, ds in TASK3_REGIMES.items() if detector in ds), "other")
