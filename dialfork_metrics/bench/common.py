"""Shared pieces of the benchmark: its error, method checks, seeded per-unit RNGs and the
log filters that summarise per-unit lines once per stage."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


def _csv_list(s: str) -> list[str]:
    """The non-empty, stripped items of a comma-separated option value."""
    return [x.strip() for x in s.split(",") if x.strip()]


#: PRD in the benchmark (ours): SPEC 7's 10 clusterings averaged, each a full k-means (Lloyd) with one
#: k-means++ start: the run-averaging already smooths the initialisation, and it is ~10x cheaper than
#: Sajjadi et al.'s 10 mini-batch restarts per run (``--prd-kmeans minibatch --prd-n-init 10``).
DEFAULT_PRD: dict[str, Any] = {"num_runs": 10, "n_init": 1, "kmeans": "full"}


class _InfoSummary(logging.Filter):
    """Swallow a stage's per-unit INFO lines and count them by kind (``fragment -> label``);
    :func:`_summarised` then logs one line per stage instead of one per unit. Warnings pass."""

    def __init__(self, kinds: Mapping[str, str]):
        super().__init__()
        self.kinds = dict(kinds)
        self.counts: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        msg = record.getMessage()
        for fragment, label in self.kinds.items():
            if fragment in msg:
                self.counts[label] = self.counts.get(label, 0) + 1
                return False
        return True


#: Per-unit INFO lines of the set-level metrics, summarised once per stage by the benchmark.
UNIT_LINES = {
    "unbalanced sets": "PRD comparisons of unbalanced sets (reference and target sizes differ: the clustering "
    "leans towards the larger set)",
    "FBD = ": "FBD values",
    "FlowGraph: ": "FlowGraph node sets",
    "have no known transition": "sets with dialogues without a known FlowGraph transition (L = 0)",
    "has zero variance": "FlowKL sets of zero variance (Gaussian fallback)",
}


@contextmanager
def _summarised(
    stage: str,
    kinds: Mapping[str, str] = UNIT_LINES,
    loggers: Sequence[str] = ("dialfork_metrics.setlevel", "dialfork_metrics.flowgraph"),
):
    """One INFO line for ``stage`` counting the per-unit lines of ``kinds`` it swallowed."""
    f = _InfoSummary(kinds)
    for name in loggers:
        logging.getLogger(name).addFilter(f)
    try:
        yield f
    finally:
        for name in loggers:
            logging.getLogger(name).removeFilter(f)
    if f.counts:
        logger.info("%s: %s", stage, "; ".join(f"{n} {label}" for label, n in f.counts.items()))


class _CountingFilter(logging.Filter):
    """Swallow a repeated warning (e.g. FBD's small-n note, once per set) and count it."""

    def __init__(self, fragment: str):
        super().__init__()
        self.fragment = fragment
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if self.fragment in record.getMessage():
            self.count += 1
            return False
        return True


class BenchError(ValueError):
    """A bad benchmark request (unknown task, encoder or method; unusable corpus)."""


def _check_methods(methods: Sequence[str], known: Sequence[str], what: str) -> None:
    bad = [m for m in methods if m not in known]
    if bad:
        raise BenchError(f"unknown {what} method(s) {bad}; known: {', '.join(known)}")


def _unit_rng(seed: int, *key: Any) -> np.random.Generator:
    h = hashlib.sha256(json.dumps([seed, *key]).encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))
