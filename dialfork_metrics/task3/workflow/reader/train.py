"""Training the step reader on the reading set: the candidate tables, the examples, the
leave-services-out folds and the calibration (what ``python -m dialfork_metrics.task3.workflow.reader
train`` and ``benchmarks/bench_reader.py`` share)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .data import FOLDS, ReadingTurn, default_training_turns
from .steps import StepReader

logger = logging.getLogger("dialfork_metrics.task3.workflow.reader.train")

Table = tuple[np.ndarray, np.ndarray, int, list[str]]


def assigner_for(source: Any, encoder: Any, reader: Any = None) -> Any:
    """The node assigner of the workflow-aware detector fitted from the files alone (shared steps,
    two value variants per placeholder), whose own-step texts are the reader's candidates.

    Args:
        source: A workflow source (StarCorpus, a workflow corpus).
        encoder: The encoder object.
        reader: The assigner's step reader (None: cosine).

    Returns:
        NodeAssigner: Fitted, with ``min_similarity`` 0.
    """
    from ..nodes import DEFAULT_REJECT_MARGIN, NodeAssigner

    return NodeAssigner(encoder, 0.0, DEFAULT_REJECT_MARGIN, True, 2, reader=reader).fit(source)


def tables_of(assigner: Any) -> dict[str, Table]:
    """Task -> its candidate steps as the assigner holds them: ``(P, owners, n, names)``, the texts
    of the task's own nodes (generic ones included), the local step index of each, the step count
    and each step's name as the task reads it (a generic closing is the task's closing step).

    Args:
        assigner: A fitted NodeAssigner.

    Returns:
        dict[str, Table]: One table per task.
    """
    from ..generic import as_task_step

    out: dict[str, Table] = {}
    closings = getattr(assigner, "_closings", {})
    for task in assigner.tasks_:
        own = np.flatnonzero(assigner._own[task])
        local = {int(k): j for j, k in enumerate(own)}
        rows = np.flatnonzero(np.isin(assigner.owners_, own))
        names = [as_task_step(assigner.keys_[k][1], closings.get(task, [])) for k in own]
        owners = np.array([local[int(o)] for o in assigner.owners_[rows]], np.int64)
        out[task] = (np.asarray(assigner.P_[rows], np.float32), owners, len(own), names)
    return out


def examples(
    rows: Sequence[ReadingTurn], tables: Mapping[str, Table], vector: Callable[[str], np.ndarray]
) -> tuple[np.ndarray, list[str], list[list[int]], np.ndarray]:
    """The reader's training examples of labelled rows (rows of unknown tasks or steps are left out).

    Args:
        rows: Reading-set rows.
        tables: :func:`tables_of`.
        vector: Text -> its embedding.

    Returns:
        ``(E, table_of, targets, hide)`` for :meth:`StepReader.fit`.
    """
    E, tab, tg, hide = [], [], [], []
    for r in rows:
        if r.task not in tables or not r.text:
            continue
        names = tables[r.task][3]
        pos = [j for j, n in enumerate(names) if n == r.step] if r.step is not None else []
        if r.step is not None and not pos:
            continue
        E.append(vector(r.text))
        tab.append(r.task)
        tg.append(pos)
        hide.append(r.dialogue_id is None)
    d = len(next(iter(tables.values()))[0][0]) if tables else 0
    return (np.asarray(E, np.float32).reshape(-1, d), tab, tg, np.asarray(hide, bool))


def fit_reader(
    rows: Sequence[ReadingTurn],
    tables: Mapping[str, Table],
    vector: Callable[[str], np.ndarray],
    fingerprint: np.ndarray | None = None,
    **params: Any,
) -> StepReader:
    """Train a reader on rows.

    Args:
        rows: Training rows (:func:`~.data.default_training_turns`).
        tables: :func:`tables_of` of every task the rows name.
        vector: Text -> its embedding.
        fingerprint: The encoder's fingerprint, saved with the reader.
        **params: :class:`StepReader` parameters.

    Returns:
        StepReader: Fitted, uncalibrated.
    """
    E, tab, tg, hide = examples(rows, tables, vector)
    tabs = {k: v[:3] for k, v in tables.items()}
    return StepReader(**params).fit(E, tabs, tab, tg, hide=hide, fingerprint=fingerprint)


def fold_readers(
    sgd: Sequence[ReadingTurn],
    star: Sequence[ReadingTurn],
    tables: Mapping[str, Table],
    vector: Callable[[str], np.ndarray],
    folds: Sequence[Sequence[str]] = FOLDS,
    **params: Any,
) -> list[StepReader]:
    """One reader per fold, trained without the fold's SGD services.

    Args:
        sgd: SGD rows.
        star: STAR workflow rows (and file phrasings).
        tables: Candidate tables.
        vector: Text -> its embedding.
        folds: The held-out services of each fold.
        **params: StepReader parameters.

    Returns:
        list[StepReader]: In fold order.
    """
    out = []
    for f in folds:
        out.append(fit_reader(default_training_turns(sgd, star, f), tables, vector, **params))
        logger.info("fold %s: loss %s", ",".join(f), out[-1].info_["loss"][-1])
    return out


def read_rows(
    reader: StepReader | None, assigner: Any, rows: Sequence[ReadingTurn], vector: Callable[[str], np.ndarray]
) -> tuple[list[str | None], np.ndarray]:
    """The step (``best``) each row is read as through the assigner, and its probability.

    Args:
        reader: The reader (None: the assigner's cosine).
        assigner: A fitted NodeAssigner of the rows' tasks.
        rows: Rows, each of a task of the assigner.
        vector: Text -> its embedding.

    Returns:
        ``(steps, prob)``: per row.
    """
    assigner.reader_ = reader
    steps: list[str | None] = [None] * len(rows)
    prob = np.full(len(rows), np.nan)
    by: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by.setdefault(r.task, []).append(i)
    for task, ix in by.items():
        E = np.stack([vector(rows[i].text) for i in ix])
        a = assigner.assign(task, E, [rows[i].text for i in ix])
        for k, i in enumerate(ix):
            steps[i] = a.best[k]
            prob[i] = a.prob[k]
    return steps, prob


def raw_confidence(reader: StepReader, assigner: Any, rows: Sequence[ReadingTurn], vector) -> np.ndarray:
    """The uncalibrated probability of the chosen step per row (what the calibration is fitted on).

    Args:
        reader: The reader (its calibration is ignored).
        assigner: A fitted NodeAssigner.
        rows: Rows.
        vector: Text -> its embedding.

    Returns:
        np.ndarray: Per row.
    """
    cal = reader.cal_x_, reader.cal_y_
    reader.cal_x_ = reader.cal_y_ = np.zeros(0, np.float32)
    try:
        return read_rows(reader, assigner, rows, vector)[1]
    finally:
        reader.cal_x_, reader.cal_y_ = cal


__all__ = [
    "assigner_for",
    "examples",
    "fit_reader",
    "fold_readers",
    "raw_confidence",
    "read_rows",
    "tables_of",
]
