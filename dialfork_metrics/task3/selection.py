"""Choosing the streaming detectors' settings on train data only, and the trade-off curve.

Selection (ours; see ``docs/task3_detectors.md``). The paper fixes one protocol (``preset="paper"``
of :class:`~dialfork_metrics.task3.streaming.StreamingDetector`). Which calibration, back-off,
clustering threshold, fitting scope, N-gram order and position weight work best depends on the
encoder, so
:func:`select_settings` chooses them by K-fold cross-validation over the *train sources*:

1. the train sources are split into ``n_folds`` folds, stratified by task and seeded;
2. for each fold, every setting of the grid is fitted on the conformant dialogues of the other
   folds (nodes, N-gram LM, threshold at ``false_alarm_rate``) and predicts the held-out fold's
   dialogues: its conformant dialogues and the forks of its sources (at most
   ``max_forks_per_source`` per source at distinct fork positions drawn uniformly, seeded);
3. each (detector, setting) is scored (SPEC 8 Score) on the pooled held-out predictions; the
   choice is the best Score among the settings whose held-out false-alarm rate is at most
   ``false_alarm_rate + tolerance`` (``tolerance`` 0 by default); if none qualifies, the lowest
   false-alarm rate.

Inside each fit the threshold is calibrated as :meth:`StreamingDetector.fit` does it: the same
``cross_fit`` folds, out-of-fold nodes (``cross_fit_nodes``) and ``threshold_rule``, so each
held-out row is the prediction of a detector fitted on the other folds (tested).

Only train records are read: the test split's dialogues and labels never enter (tested by
shuffling the test labels). The detectors themselves still fit on conformant dialogues only; the
train forks' labels are used for this hyperparameter search, as any supervised model selection.

Speed: the clustering dendrogram depends on neither the threshold nor the LM, so it is built once
per (fold, task group, speaker) with :func:`dialfork_metrics.flowgraph.cluster_tree` and cut at
every threshold; node assignment is shared by every (order, back-off, calibration); the four
detectors share every LM.

Trade-off curve: a detector raises an alarm on a dialogue at operating point ``a`` exactly when
the dialogue's statistic (IT ``min p_t``, SS ``max Delta_t``) crosses
``calibrate_threshold(calibration_stats, method, a)`` of the model watching it
(:meth:`StreamingDetector.dialogue_statistics`). :func:`tradeoff_curve` sweeps ``a`` and gives
the conformant false-alarm rate and the hallucinated coverage at each point;
:func:`coverage_at` reads the coverage at a given false-alarm rate off the curve.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .baselines.ngram import NgramLM
from .streaming import (
    CALIBRATIONS,
    DEFAULT_CONFIDENCE,
    DEFAULT_FALSE_ALARM_RATE,
    DEFAULT_K,
    DEFAULT_TAU,
    DEFAULT_THRESHOLD_RULE,
    SCOPES,
    SELECTABLE,
    SPEAKERS,
    StreamingDetector,
    calibrate_threshold,
    calibration_fold_ids,
    calibration_statistic,
    system_turn_index,
    turn_scores,
)

logger = logging.getLogger(__name__)

DETECTORS: tuple[str, ...] = ("it", "ss", "it+nc", "ss+nc")
#: The default search grid (2 x 2 x 4 x 2 x 3 x 6 = 576 settings per detector).
DEFAULT_GRID: dict[str, tuple[Any, ...]] = {
    "calibration": CALIBRATIONS,
    "backoff": (False, True),
    "distance_threshold": (0.4, 0.55, 0.7, 0.85),
    "scope": SCOPES,
    "order": (2, 3, 6),
    "position_weight": (0.0, 0.5, 1.0, 2.0, 3.0, 4.0),
}
#: Widest 95% interval half-width, at the target rate, of a held-out false-alarm rate the selection
#: accepts without a warning: 1 point needs about 2,000 held-out conformant dialogues at a 5% rate.
MAX_FALSE_ALARM_HALF_WIDTH = 0.01
#: Operating points the coverage table reports.
FALSE_ALARM_POINTS: tuple[float, ...] = (0.01, 0.05, 0.10)


# --------------------------------------------------------------------------------------------
# pure helpers
# --------------------------------------------------------------------------------------------
def source_folds(records: Sequence[Mapping[str, Any]], n_folds: int = 3, seed: int = 0) -> dict[str, int]:
    """Fold of every source id: within each task, a seeded permutation of its sources dealt
    round-robin, so every fold holds sources of every task with enough sources.

    Args:
        records: Records with ``task`` and ``source_id`` (or ``dialogue_id`` for a source).
        n_folds: The number of folds (>= 2).
        seed: Seed of the permutations.

    Returns:
        dict[str, int]: source id -> fold in ``0..n_folds-1``.

    Raises:
        ValueError: ``n_folds`` < 2.
    """
    if n_folds < 2:
        raise ValueError(f"n_folds must be >= 2, got {n_folds}")
    by_task: dict[str, set[str]] = {}
    for r in records:
        by_task.setdefault(str(r.get("task")), set()).add(_source(r))
    rng = np.random.default_rng(seed)
    out: dict[str, int] = {}
    offset = 0
    for task in sorted(by_task):
        srcs = sorted(by_task[task])
        for j, i in enumerate(rng.permutation(len(srcs))):
            out[srcs[i]] = (j + offset) % n_folds
        offset += len(srcs)
    return out


def _source(r: Mapping[str, Any]) -> str:
    return str(r.get("source_id") or r["dialogue_id"])


def first_alarms(
    p_list: Sequence[np.ndarray],
    sys_turns: Sequence[np.ndarray],
    method: str,
    threshold: float,
    position_weight: float = 0.0,
) -> list[int | None]:
    """The streaming prediction of each dialogue from its ``p_t``: the system turn of the first alarm.

    Args:
        p_list: Per dialogue, ``p_t`` of every turn.
        sys_turns: Per dialogue, the system turn index of every turn position.
        method: ``"it"`` (alarm below the threshold) or ``"ss"`` (above).
        threshold: The alarm threshold.
        position_weight: ``gamma``, as :func:`~dialfork_metrics.task3.streaming.turn_scores`.

    Returns:
        Per dialogue, the system turn index of the first alarm, or ``None``.
    """
    out: list[int | None] = []
    for p, st in zip(p_list, sys_turns):
        s = turn_scores(p, method, st, position_weight)
        a = (s < threshold) if method == "it" else (s > threshold)
        out.append(int(st[int(np.argmax(a))]) if a.any() else None)
    return out


def tradeoff_curve(
    stats: np.ndarray,
    keys: Sequence[Any],
    is_fork: Sequence[bool],
    calibration_stats: Mapping[Any, np.ndarray],
    method: str,
    levels: Sequence[float] | None = None,
    percentile_method: str = "linear",
    threshold_rule: str = "percentile",
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict[str, np.ndarray]:
    """Conformant false-alarm rate and hallucinated coverage of a fitted detector at each
    operating point ``a`` in ``levels``.

    The two end points ``(0, 0)`` and ``(1, 1)`` (never / always alarm) are included.

    Args:
        stats: Per test dialogue, the statistic of
            :meth:`StreamingDetector.dialogue_statistics`.
        keys: Per test dialogue, the key of the model that watched it (from the same call).
        is_fork: Per test dialogue, whether it is a fork (hallucinated).
        calibration_stats: Each key's stored calibration statistics
            (``{k: m.calibration_stats_ for k, m in det.models().items()}``).
        method: ``"it"`` or ``"ss"``.
        levels: The operating points; None: 0..1 in 401 steps plus 1%, 5% and 10%.
        percentile_method: ``numpy.percentile``'s method.
        threshold_rule: Maps each level to a threshold (:func:`calibrate_threshold`); the default,
            ``"percentile"``, sweeps the thresholds most finely; the detector's own rule puts its
            operating point on the curve at ``a = false_alarm_rate``.
        confidence: The confidence of ``threshold_rule="upper_bound"``.

    Returns:
        ``{"level", "cov_c", "cov_h"}``: arrays of the levels (NaN at the two end points), the
        conformant false-alarm rates and the hallucinated coverages.

    Raises:
        ValueError: The test dialogues are all forks or all conformant.
    """
    stats = np.asarray(stats, dtype=np.float64)
    fork = np.asarray(is_fork, dtype=bool)
    if fork.all() or not fork.any():
        raise ValueError("the trade-off curve needs both conformant and forked dialogues")
    keys = list(keys)
    if levels is None:
        levels = np.unique(np.concatenate([np.linspace(0.0, 1.0, 401), FALSE_ALARM_POINTS]))
    levels = np.asarray(levels, dtype=np.float64)
    groups = {k: np.asarray([kk == k for kk in keys]) for k in set(keys)}
    cov_c, cov_h = [], []
    for a in levels:
        flagged = np.zeros(len(stats), dtype=bool)
        for k, mask in groups.items():
            thr = calibrate_threshold(
                calibration_stats[k],
                method,
                float(min(max(a, 0.0), 1.0)),
                percentile_method,
                threshold_rule,
                confidence,
            )
            flagged[mask] = (stats[mask] < thr) if method == "it" else (stats[mask] > thr)
        cov_c.append(flagged[~fork].mean())
        cov_h.append(flagged[fork].mean())
    cov_c = np.concatenate([[0.0], cov_c, [1.0]])
    cov_h = np.concatenate([[0.0], cov_h, [1.0]])
    levels = np.concatenate([[np.nan], levels, [np.nan]])
    return {"level": levels, "cov_c": cov_c, "cov_h": cov_h}


def coverage_at(curve: Mapping[str, np.ndarray], false_alarm_rate: float) -> float:
    """Hallucinated coverage at ``false_alarm_rate`` on the curve: the best coverage among
    points with at most that false-alarm rate, linearly interpolated towards the next point
    (the usual ROC reading; the curve is monotone in both coordinates).

    Args:
        curve: A :func:`tradeoff_curve` result.
        false_alarm_rate: The conformant false-alarm rate to read the coverage at.

    Returns:
        The coverage in [0, 1].
    """
    x = np.asarray(curve["cov_c"], dtype=np.float64)
    y = np.asarray(curve["cov_h"], dtype=np.float64)
    order = np.lexsort((y, x))
    x, y = x[order], np.maximum.accumulate(y[order])
    return float(np.interp(false_alarm_rate, x, y))


# --------------------------------------------------------------------------------------------
# selection
# --------------------------------------------------------------------------------------------
@dataclass
class Selection:
    """Result of :func:`select_settings`.

    Attributes:
        chosen: Per detector, the chosen settings.
        table: One row per (detector, setting): the settings, held-out cov_c, cov_h, mae_h, Score.
        meta: How the selection ran (folds, seed, operating point, ...).
    """

    chosen: dict[str, dict[str, Any]]
    """Per detector, the chosen :data:`SELECTABLE` settings."""
    table: list[dict[str, Any]] = field(default_factory=list)
    """One row per (detector, setting): the settings, held-out cov_c, cov_h, mae_h, Score."""
    meta: dict[str, Any] = field(default_factory=dict)

    def settings_for(self, detector: str) -> dict[str, Any]:
        """The chosen settings of one detector.

        Args:
            detector: A streaming detector name (``"it"``, ``"ss+nc"``, ...).

        Returns:
            A copy of its :data:`SELECTABLE` settings.
        """
        return dict(self.chosen[detector])

    def to_json(self) -> dict[str, Any]:
        """The selection as JSON-ready data.

        Returns:
            ``{"chosen", "table", "meta"}``.
        """
        return {"chosen": self.chosen, "table": self.table, "meta": self.meta}


def _grid_settings(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    bad = sorted(set(grid) - set(SELECTABLE))
    if bad:
        raise ValueError(f"unknown grid key(s) {bad}; selectable settings: {SELECTABLE}")
    full = {k: tuple(grid.get(k, DEFAULT_GRID[k])) for k in SELECTABLE}
    for k, vals in full.items():
        if not vals:
            raise ValueError(f"grid[{k!r}] is empty")
    return [dict(zip(SELECTABLE, combo)) for combo in itertools.product(*full.values())]


def _subsample_forks(
    records: Sequence[Mapping[str, Any]], max_per_source: int | None, seed: int
) -> list[int]:
    """Indices of the records kept: every conformant one and, per source, at most
    ``max_per_source`` forks at distinct fork positions drawn uniformly (seeded), one fork type
    per drawn position (seeded). Drawing the positions, not taking the earliest, keeps the held-out
    forks spread over the dialogue as the test forks are: early forks leave more turns to detect
    them and shift cov_h and MAE_h."""
    if max_per_source is None:
        return list(range(len(records)))
    rng = np.random.default_rng(seed)
    keep, by_src = [], {}
    for i, r in enumerate(records):
        if r.get("hallucination_type") is None:
            keep.append(i)
        else:
            by_src.setdefault(_source(r), []).append(i)
    for src in sorted(by_src):
        idx = sorted(
            by_src[src], key=lambda i: (records[i].get("fork_position") or 0, records[i]["dialogue_id"])
        )
        by_pos: dict[Any, list[int]] = {}
        for i in idx:
            by_pos.setdefault(records[i].get("fork_position"), []).append(i)
        groups = [grp for _, grp in sorted(by_pos.items(), key=lambda kv: str(kv[0]))]
        chosen = sorted(rng.choice(len(groups), min(max_per_source, len(groups)), replace=False).tolist())
        keep += [groups[g][int(rng.integers(len(groups[g])))] for g in chosen]
    return sorted(keep)


def _node_model(distance_threshold: float, K: int, tau: float) -> StreamingDetector:
    """An unfitted single model used only for its nodes (``node_confidence=True``: the assignment
    returns the confidences the NC detectors use)."""
    return StreamingDetector(
        "it",
        True,
        order=1,
        K=K,
        tau=tau,
        distance_threshold=distance_threshold,
        backoff=False,
        calibration="in_sample",
        encoder=None,
        scope="pooled",
        preset="paper",
    )._resolve_params()


def _speaker_trees(
    turns_list: Sequence[Sequence[Mapping[str, str]]], emb: Sequence[np.ndarray]
) -> dict[str, np.ndarray | None]:
    """Per speaker, the dendrogram of its utterances (``None`` for a single utterance)."""
    from dialfork_metrics.flowgraph import cluster_tree

    trees: dict[str, np.ndarray | None] = {}
    for sp in SPEAKERS:
        E = [e[j] for turns, e in zip(turns_list, emb) for j, t in enumerate(turns) if t["speaker"] == sp]
        if E:
            trees[sp] = cluster_tree(np.stack(E)) if len(E) > 1 else None
    return trees


def _inner_folds(turns_list, emb, calibration_folds: int, calibration_seed: int, cross_fit_nodes: str):
    """The ``cross_fit`` calibration folds of a fit set (the same folds as
    :meth:`StreamingDetector.fit`): per fold, (its mask over the fit set, the other folds' indices,
    the fold's indices, the other folds' trees when ``cross_fit_nodes="recluster"``)."""
    fold = calibration_fold_ids(len(turns_list), calibration_folds, calibration_seed)
    out = []
    for f in range(int(fold.max()) + 1):
        rest, held = np.flatnonzero(fold != f).tolist(), np.flatnonzero(fold == f).tolist()
        trees = (
            _speaker_trees([turns_list[i] for i in rest], [emb[i] for i in rest])
            if cross_fit_nodes == "recluster"
            else None
        )
        out.append((fold != f, rest, held, trees))
    return out


def _inner_assign(
    turns_list, emb, inner_fold, labels, thr: float, K: int, tau: float, cross_fit_nodes: str, split_nodes
):
    """One ``cross_fit`` fold's nodes as :meth:`StreamingDetector._cross_fit_p` builds them:
    (V, nodes of the other folds, nodes and confidences of the fold). ``labels``: the fit set's
    clusters at ``thr``; ``split_nodes``: (V, nodes, confidences) of the whole fit set."""
    from dialfork_metrics.flowgraph import cut_cluster_tree

    keep, rest, held, trees = inner_fold
    V, n_all, c_all = split_nodes
    if cross_fit_nodes == "fixed":
        return V, [n_all[i] for i in rest], [n_all[i] for i in held], [c_all[i] for i in held]
    m = _node_model(thr, K, tau)
    if cross_fit_nodes == "recluster":
        lab = {
            sp: (np.zeros(1, np.int64) if Z is None else cut_cluster_tree(Z, thr)) for sp, Z in trees.items()
        }
        Vi = m._fit_nodes([turns_list[i] for i in rest], [emb[i] for i in rest], labels=lab)
    else:
        Vi = m._set_nodes(turns_list, emb, labels, keep=keep)
    try:
        n_rest, _ = m._assign_many([turns_list[i] for i in rest], [emb[i] for i in rest])
        n_held, c_held = m._assign_many([turns_list[i] for i in held], [emb[i] for i in held])
    except ValueError:  # as the detector: a speaker only the fold has keeps the split's nodes
        return V, [n_all[i] for i in rest], [n_all[i] for i in held], [c_all[i] for i in held]
    return Vi, n_rest, n_held, c_held


def select_settings(
    records: Sequence[Mapping[str, Any]],
    embeddings: Sequence[np.ndarray],
    *,
    detectors: Sequence[str] = DETECTORS,
    grid: Mapping[str, Sequence[Any]] | None = None,
    n_folds: int = 3,
    seed: int = 0,
    false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE,
    tolerance: float = 0.0,
    max_forks_per_source: int | None = 4,
    K: int = DEFAULT_K,
    tau: float = DEFAULT_TAU,
    calibration_folds: int = 5,
    calibration_seed: int = 0,
    max_sources_per_task: int | None = None,
    threshold_rule: str = DEFAULT_THRESHOLD_RULE,
    confidence: float = DEFAULT_CONFIDENCE,
    cross_fit_nodes: str = "restrict",
    progress: bool = False,
) -> Selection:
    """Choose each detector's settings by cross-validation over the train sources (module doc).

    Each table row carries the 95% Clopper-Pearson interval of its held-out false-alarm rate
    (``cov_c_ci``, over ``n_conformant`` held-out conformant dialogues); a warning is logged when
    the interval of a rate equal to the target is wider than +/- :data:`MAX_FALSE_ALARM_HALF_WIDTH`,
    where the selection cannot tell settings near the target apart (16 sources per task of the
    full template corpus give 384 held-out conformant dialogues, +/- 2.3 points; all its 2,328
    give +/- 0.9).

    Args:
        records: The *train* split, conformant dialogues and their forks (fields ``dialogue_id``,
            ``source_id``, ``task``, ``turns``, ``num_system_turns``, ``hallucination_type``,
            ``fork_turn``).
        embeddings: One ``(n_turns, d)`` array per record (any encoder).
        detectors: The streaming detectors to select for.
        grid: Candidate values per selectable setting; None: :data:`DEFAULT_GRID`.
        n_folds: Cross-validation folds over the sources.
        seed: Seed of the folds and of the source caps.
        false_alarm_rate: The operating point the detectors are fitted at.
        tolerance: A setting qualifies when its held-out false-alarm rate is at most
            ``false_alarm_rate + tolerance`` (module doc).
        max_forks_per_source: Caps the forks evaluated per held-out source (None: all).
        K: The node confidence's number of nearest centroids.
        tau: The node confidence's temperature.
        calibration_folds: Folds of ``calibration="cross_fit"``.
        calibration_seed: Seed of those folds.
        max_sources_per_task: Caps the train sources used per task (seeded draw) to bound the
            cost on a large corpus (None: all).
        threshold_rule: The detectors' threshold rule.
        confidence: The confidence of ``threshold_rule="upper_bound"``.
        cross_fit_nodes: How ``cross_fit`` gets each fold's nodes.
        progress: Show progress bars.

    Returns:
        The :class:`Selection`: the chosen settings per detector and the full table.

    Raises:
        ValueError: ``records`` and ``embeddings`` differ in length, an unknown detector, an
            unknown or empty grid key, or no forks among the records.
    """
    from tqdm.auto import tqdm

    from dialfork_metrics.flowgraph import cut_cluster_tree

    from .scorer import score_predictions

    if len(records) != len(embeddings):
        raise ValueError(f"{len(embeddings)} embedding arrays for {len(records)} records")
    bad = [d for d in detectors if d not in DETECTORS]
    if bad:
        raise ValueError(f"unknown streaming detector(s) {bad}; known: {DETECTORS}")
    settings = _grid_settings(grid or DEFAULT_GRID)
    # a canonical order (by dialogue id): the choice does not depend on how the records were listed
    canon = sorted(range(len(records)), key=lambda i: str(records[i]["dialogue_id"]))
    records, embeddings = [records[i] for i in canon], [embeddings[i] for i in canon]
    if max_sources_per_task is not None:
        rng = np.random.default_rng(seed)
        by_task: dict[str, list[str]] = {}
        for r in records:
            by_task.setdefault(str(r.get("task")), [])
            if _source(r) not in by_task[str(r.get("task"))]:
                by_task[str(r.get("task"))].append(_source(r))
        kept = {
            src
            for t in sorted(by_task)
            for src in (
                sorted(by_task[t])
                if len(by_task[t]) <= max_sources_per_task
                else [
                    sorted(by_task[t])[i]
                    for i in rng.choice(len(by_task[t]), max_sources_per_task, replace=False)
                ]
            )
        }
        idx = [i for i, r in enumerate(records) if _source(r) in kept]
        records, embeddings = [records[i] for i in idx], [embeddings[i] for i in idx]
    keep = _subsample_forks(records, max_forks_per_source, seed)
    records = [records[i] for i in keep]
    embeddings = [np.asarray(embeddings[i], dtype=np.float64) for i in keep]
    if not any(r.get("hallucination_type") is not None for r in records):
        raise ValueError(
            "select_settings needs the forks of the train sources (labelled), got conformant only"
        )
    folds = source_folds(records, n_folds, seed)
    fold_of = np.asarray([folds[_source(r)] for r in records])
    sys_turns = [system_turn_index(r["turns"]) for r in records]
    gold = [
        {k: r.get(k) for k in ("dialogue_id", "num_system_turns", "hallucination_type", "fork_turn")}
        for r in records
    ]
    # predictions[(detector, setting index)][record index]
    preds: dict[tuple[str, int], list[int | None]] = {
        (d, s): [None] * len(records) for d in detectors for s in range(len(settings))
    }
    scopes = sorted({s["scope"] for s in settings})
    thresholds = sorted({float(s["distance_threshold"]) for s in settings})
    lm_keys = sorted({(s["order"], s["backoff"]) for s in settings})
    n_steps = n_folds * len(scopes)
    bar = tqdm(total=n_steps, desc="task3 selection", disable=not progress, unit="fold x scope")
    for f in range(n_folds):
        fit_idx = [
            i for i in range(len(records)) if fold_of[i] != f and records[i].get("hallucination_type") is None
        ]
        held_idx = [i for i in range(len(records)) if fold_of[i] == f]
        for scope in scopes:
            group_of = (lambda r: r.get("task")) if scope == "task" else (lambda r: None)
            fit_groups: dict[Any, list[int]] = {}
            for i in fit_idx:
                fit_groups.setdefault(group_of(records[i]), []).append(i)
            held_groups: dict[Any, list[int]] = {}
            for i in held_idx:
                held_groups.setdefault(group_of(records[i]), []).append(i)
            for g, gi in fit_groups.items():
                hi = held_groups.get(g, [])
                if not hi:
                    continue
                turns_fit = [records[i]["turns"] for i in gi]
                fit_sys = [sys_turns[i] for i in gi]
                emb_fit = [embeddings[i] for i in gi]
                trees = _speaker_trees(turns_fit, emb_fit)
                cals = sorted({s["calibration"] for s in settings})
                inner = (
                    _inner_folds(turns_fit, emb_fit, calibration_folds, calibration_seed, cross_fit_nodes)
                    if "cross_fit" in cals and len(gi) >= 2
                    else None
                )
                for thr in thresholds:
                    labels = {
                        sp: (np.zeros(1, np.int64) if Z is None else cut_cluster_tree(Z, thr))
                        for sp, Z in trees.items()
                    }
                    base = _node_model(thr, K, tau)
                    V = base._fit_nodes(turns_fit, emb_fit, labels=labels)
                    n_fit, c_fit = base._assign_many(turns_fit, emb_fit)
                    n_held, c_held = base._assign_many(
                        [records[i]["turns"] for i in hi], [embeddings[i] for i in hi]
                    )
                    # cross_fit: per inner fold, nodes refitted on the other inner folds (as fit() does)
                    inner_nodes = (
                        None
                        if inner is None
                        else [
                            (
                                fo[1],
                                fo[2],
                                *_inner_assign(
                                    turns_fit,
                                    emb_fit,
                                    fo,
                                    labels,
                                    thr,
                                    K,
                                    tau,
                                    cross_fit_nodes,
                                    (V, n_fit, c_fit),
                                ),
                            )
                            for fo in inner
                        ]
                    )
                    for order, backoff in lm_keys:
                        lm = NgramLM(order, V, backoff=backoff).fit(n_fit)
                        p_held = [lm.sequence_probs(n) for n in n_held]
                        # per calibration: (p_t, c_t) of every fit dialogue
                        calib: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
                        for cal in cals:
                            if cal == "in_sample" or inner_nodes is None:
                                calib[cal] = ([lm.sequence_probs(n) for n in n_fit], c_fit)
                                continue
                            ps: list[np.ndarray] = [np.empty(0)] * len(gi)
                            cs: list[np.ndarray] = [np.empty(0)] * len(gi)
                            for _rest, held, Vi, n_rest, n_in, c_in in inner_nodes:
                                lm_i = NgramLM(order, Vi, backoff=backoff).fit(n_rest)
                                for k_, nn, cc in zip(held, n_in, c_in):
                                    ps[k_], cs[k_] = lm_i.sequence_probs(nn), cc
                            calib[cal] = (ps, cs)
                        for si, s in enumerate(settings):
                            if (s["scope"], float(s["distance_threshold"]), s["order"], s["backoff"]) != (
                                scope,
                                thr,
                                order,
                                backoff,
                            ):
                                continue
                            for d in detectors:
                                method, nc = d.split("+")[0], d.endswith("+nc")
                                p_cal, c_cal = calib[s["calibration"]]
                                cp = [p * c for p, c in zip(p_cal, c_cal)] if nc else p_cal
                                g = float(s["position_weight"])
                                theta = calibrate_threshold(
                                    [calibration_statistic(p, method, j, g) for p, j in zip(cp, fit_sys)],
                                    method,
                                    false_alarm_rate,
                                    rule=threshold_rule,
                                    confidence=confidence,
                                )
                                ph = [p * c for p, c in zip(p_held, c_held)] if nc else p_held
                                out = first_alarms(ph, [sys_turns[i] for i in hi], method, theta, g)
                                row = preds[(d, si)]
                                for i, o in zip(hi, out):
                                    row[i] = o
            bar.update(1)
    bar.close()
    from scipy.stats import binomtest

    n_conf = sum(g["hallucination_type"] is None for g in gold)
    table = []
    for (d, si), row in preds.items():
        r = score_predictions({g["dialogue_id"]: p for g, p in zip(gold, row)}, gold)
        k = sum(p is not None for g, p in zip(gold, row) if g["hallucination_type"] is None)
        ci = binomtest(k, n_conf).proportion_ci(confidence_level=0.95, method="exact") if n_conf else None
        table.append(
            {
                "detector": d,
                **settings[si],
                "cov_c": r["cov_c"],
                "cov_h": r["cov_h"],
                "mae_h": r["mae_h"],
                "mae_c": r["mae_c"],
                "score": r["score"],
                "n_conformant": n_conf,
                "cov_c_ci": None if ci is None else [float(ci.low), float(ci.high)],
            }
        )
    # resolution at the target: the 95% interval of a held-out rate equal to the target
    at_target = (
        binomtest(int(round(false_alarm_rate * n_conf)), n_conf).proportion_ci(method="exact")
        if n_conf
        else None
    )
    half = float("inf") if at_target is None else (at_target.high - at_target.low) / 2
    if half > MAX_FALSE_ALARM_HALF_WIDTH:
        logger.warning(
            "the held-out false-alarm rates rest on %d conformant dialogues (95%% interval +/-%.1f "
            "points at the target): the selection cannot tell settings near the %.1f%% target apart; "
            "use more train sources (max_sources_per_task=None uses them all)",
            n_conf,
            100 * half,
            100 * false_alarm_rate,
        )
    chosen = {}
    for d in detectors:
        rows = [(i, t) for i, t in enumerate(table) if t["detector"] == d]
        ok = [(i, t) for i, t in rows if t["cov_c"] <= false_alarm_rate + tolerance]
        if ok:
            best = max(ok, key=lambda it: (it[1]["score"], -it[0]))[1]
        else:
            logger.warning(
                "%s: no setting meets the %.1f%% false-alarm target on held-out train folds; choosing "
                "the lowest false-alarm rate",
                d,
                100 * false_alarm_rate,
            )
            best = min(rows, key=lambda it: (it[1]["cov_c"], -it[1]["score"], it[0]))[1]
        chosen[d] = {k: best[k] for k in SELECTABLE}
    meta = {
        "n_records": len(records),
        "n_sources": len(folds),
        "n_folds": n_folds,
        "seed": seed,
        "max_sources_per_task": max_sources_per_task,
        "n_conformant": n_conf,
        "false_alarm_ci_half_width": half,
        "false_alarm_rate": false_alarm_rate,
        "tolerance": tolerance,
        "threshold_rule": threshold_rule,
        "confidence": confidence,
        "cross_fit_nodes": cross_fit_nodes,
        "max_forks_per_source": max_forks_per_source,
        "grid": {k: list(v) for k, v in (grid or DEFAULT_GRID).items()},
    }
    return Selection(chosen=chosen, table=table, meta=meta)
