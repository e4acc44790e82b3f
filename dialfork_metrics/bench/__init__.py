"""One-command benchmark: the paper's Tables 2, 3, 4, 7 and 9 on any DialFork corpus.

``python -m dialfork_metrics.bench --data DIR_or_HUB_ID --tasks 1,2,3 --encoders minilm --out reports/``

* Task 1 (SPEC 5): FlowKL, FBD, PRD and the controls per (task, type) unit, each set metric with
  its own encoder if asked (``--task1-encoder``, ``--pair-encoder``); Kendall tau per type and Avg
  with bootstrap CIs; exact recovery; each method against chance (exact per-unit permutation
  test, Fisher-combined); Appendix J: FlowKL against each method (paired bootstrap CI of
  Delta tau, paired Wilcoxon, Holm within that family).
* Task 2 (SPEC 6), per encoder: Mean, Full, FlowDTW, FlowScore, the controls and any user
  metric; Table 7: FlowScore against each method (one-sided Wilcoxon and paired t-test, Holm
  across encoders within each test, paired bootstrap 95% CI with 10,000 seeded resamples).
* Task 3 (SPEC 8): trivial baselines and the four streaming detectors per encoder (Table 9),
  MAEs in system turns and in all turns; Appendix I: the Score under a grid of weights.

Each encoder encodes every unique turn (and transcript) of the corpus once, up front; every
task then reads the encoder's cache. Outputs: Markdown tables in the paper's layout, CSV,
JSON (package versions, encoders, seeds, corpus fingerprint, timings), PNG plots, and the flow
graph of one task (PNG + GraphML). The pure computations live in the ``run_task*`` functions;
:func:`main` is the CLI.

Modules: :mod:`.common` (errors, method checks, log summaries), :mod:`.corpus` (loading and
encoding a corpus), :mod:`.task1`, :mod:`.task2`, :mod:`.task3` (one per task), :mod:`.runner`
(:func:`run_benchmark`), :mod:`.cli` (:func:`main`), :mod:`.protocols` (the same-source and
cross-reference protocols of Tasks 1 and 2, ``--task2-protocol``). Every name is re-exported here.
"""

from __future__ import annotations

from dialfork_dataset import taxonomy

from ..methods import (
    LABELS,
    TASK1_COMPARED,
    TASK1_METHODS,
    TASK1_REFERENCE,
    TASK2_METHODS,
    TASK3_DETECTORS,
    TASK3_REGIMES,
)
from .cli import build_parser, main, parse_pair_encoder
from .common import DEFAULT_PRD, UNIT_LINES, BenchError
from .corpus import Corpus, load_corpus, prepare_encoder
from .protocols import (
    DEFAULT_N_REFERENCES,
    TASK2_PROTOCOLS,
    cross_references,
    parse_task2_protocol,
    task1_cross_units,
)
from .runner import package_versions, run_benchmark
from .task1 import run_task1, summarise_task1, task1_comparisons, tau_confidence_intervals
from .task2 import distance_by_k, load_custom_metric, run_task2, summarise_task2, task2_significance
from .task3 import SWEEP_MAE_WEIGHTS, TABLE9_ORDER, TASK3_ABLATION_ORDERS, run_task3, task3_weight_sweep

__all__ = [
    "DEFAULT_N_REFERENCES",
    "DEFAULT_PRD",
    "LABELS",
    "SWEEP_MAE_WEIGHTS",
    "TABLE9_ORDER",
    "TASK1_COMPARED",
    "TASK1_METHODS",
    "TASK1_REFERENCE",
    "TASK2_METHODS",
    "TASK2_PROTOCOLS",
    "TASK3_ABLATION_ORDERS",
    "TASK3_DETECTORS",
    "TASK3_REGIMES",
    "UNIT_LINES",
    "BenchError",
    "Corpus",
    "build_parser",
    "cross_references",
    "distance_by_k",
    "load_corpus",
    "load_custom_metric",
    "main",
    "package_versions",
    "parse_pair_encoder",
    "parse_task2_protocol",
    "prepare_encoder",
    "run_benchmark",
    "run_task1",
    "run_task2",
    "run_task3",
    "summarise_task1",
    "summarise_task2",
    "task1_comparisons",
    "task2_significance",
    "task1_cross_units",
    "task3_weight_sweep",
    "tau_confidence_intervals",
]


def __getattr__(name: str):
    """``TYPES``: the registered hallucination types when read (:mod:`dialfork_dataset.taxonomy`)."""
    if name == "TYPES":
        return taxonomy.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
