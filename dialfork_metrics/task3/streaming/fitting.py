"""Fitting a streaming detector: nodes (clustering), the N-gram LM and the calibrated threshold,
one model per task or pooled; the out-of-fold (``cross_fit``) calibration statistics; moving the
operating point (:meth:`recalibrate`). Mixed into :class:`~.detector.StreamingDetector`, which this
module does not import: its methods return the detector they are called on (``Self``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dialfork_dataset.turns import as_turns

from ..baselines.ngram import NgramLM
from ._common import _normalize_rows, _task_of, _where
from .decision import (
    alarms,
    calibrate_threshold,
    calibration_fold_ids,
    calibration_statistic,
    system_turn_index,
)
from .presets import SPEAKERS

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11

logger = logging.getLogger("dialfork_metrics.task3.streaming")


class FitMixin:
    """``fit`` and calibration of :class:`~.detector.StreamingDetector`."""

    def fit(
        self,
        dialogues: Sequence[Any],
        embeddings: Sequence[np.ndarray] | None = None,
        show_progress: bool = False,
    ) -> Self:
        """Fit nodes, the N-gram LM and the threshold on conformant train dialogues (one model per
        task with ``scope="task"``).

        Args:
            dialogues: Conformant train dialogues: records (with ``task`` for ``scope="task"``) or
                lists of turns; forks (a ``hallucination_type``) are refused.
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded with the encoder.
            show_progress: Show progress bars (encoding, one model per task).

        Returns:
            The detector itself, fitted.

        Raises:
            InvalidParameterError: A constructor parameter (or a setting its preset resolves to)
                breaks ``_parameter_constraints`` (scikit-learn's; a ``ValueError``).
            ValueError: No dialogue, a fork, a malformed or one-turn dialogue, or bad embeddings.
            TypeError: ``dialogues`` is not a list of dialogues.
        """
        self._resolve_params()
        if isinstance(dialogues, Mapping | str) or not isinstance(dialogues, Sequence):
            raise TypeError("fit() takes a list of conformant dialogues (records, or lists of turns)")
        if len(dialogues) == 0:
            raise ValueError("fit() needs at least one conformant train dialogue, got none")
        turns_list, names, tasks, errs = [], [], [], []
        for i, d in enumerate(dialogues):
            name = _where(d, i)
            if isinstance(d, Mapping) and d.get("hallucination_type") is not None:
                # SPEC 8: streaming detectors may use only the conformant train split
                errs.append(
                    f"{name}: is a fork ({d['hallucination_type']}); fit() takes conformant train "
                    "dialogues only (the task3 train split)"
                )
                continue
            try:
                turns = as_turns(d, where=name)
            except ValueError as e:
                errs.append(str(e))
                continue
            if len(turns) < 2:
                errs.append(
                    f"{name}: has {len(turns)} turn; fitting needs dialogues of at least two turns "
                    "(a transition, and a surprisal jump for SS)"
                )
            turns_list.append(turns)
            names.append(name)
            tasks.append(_task_of(d))
        if errs:
            raise ValueError(
                f"cannot fit on these dialogues ({len(errs)} problem(s)):\n  " + "\n  ".join(errs[:20])
            )
        self.task_models_ = {}
        emb = self._embeddings(turns_list, embeddings, names, show_progress)
        groups: dict[str | None, list[int]] = {}
        for i, t in enumerate(tasks if self.scope_ == "task" else [None] * len(tasks)):
            groups.setdefault(t, []).append(i)
        self.tasks_ = list(groups)
        if len(groups) == 1:
            self._fit_model(turns_list, emb)
            return self
        from tqdm.auto import tqdm

        for task, idx in tqdm(
            sorted(groups.items(), key=lambda kv: str(kv[0])),
            desc=f"fit {self.name} per task",
            disable=not show_progress,
            unit="task",
        ):
            sub = self._submodel()
            sub.tasks_ = [task]
            sub._fit_model([turns_list[i] for i in idx], [emb[i] for i in idx], where=f"task {task!r}")
            self.task_models_[task] = sub
        self.centroids_, self.node_offsets_, self.lm_, self.threshold_, self.calibration_stats_ = (
            {},
            {},
            None,
            None,
            None,
        )
        self.n_train_ = len(turns_list)
        self.train_false_alarm_rate_ = float(
            sum(m.train_false_alarm_rate_ * m.n_train_ for m in self.task_models_.values()) / self.n_train_
        )
        return self

    def _submodel(self) -> Self:
        """An unfitted single model with this detector's settings (one task of ``scope="task"``)."""
        sub = type(self)(
            method=self.method,
            node_confidence=self.node_confidence,
            order=self.order_,
            K=self.K,
            tau=self.tau,
            distance_threshold=self.distance_threshold_,
            false_alarm_rate=self.false_alarm_rate,
            percentile_method=self.percentile_method,
            backoff=self.backoff_,
            calibration=self.calibration_,
            calibration_folds=self.calibration_folds,
            calibration_seed=self.calibration_seed,
            encoder=None,
            scope="pooled",
            preset=self.preset,
            threshold_rule=self.threshold_rule_,
            confidence=self.confidence,
            cross_fit_nodes=self.cross_fit_nodes,
            position_weight=self.position_weight_,
        )
        sub._resolve_params()
        sub.settings_source_ = dict(self.settings_source_)
        sub.task_models_ = {}
        sub._parent = self
        return sub

    def _fit_model(
        self,
        turns_list: list[list[dict[str, str]]],
        emb: list[np.ndarray],
        where: str = "",
        labels: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """Fit one model (nodes, LM, threshold) on validated turns and their embeddings.
        ``labels`` (per speaker, the cluster label of each of that speaker's train turns in order)
        skips the clustering (the settings selection cuts one precomputed tree)."""
        offset = self._fit_nodes(turns_list, emb, labels)
        nodes, confs = self._assign_many(turns_list, emb)
        self.lm_ = NgramLM(self.order_, offset, backoff=self.backoff_).fit(nodes)
        p_train = [self._sequence_p(n, c) for n, c in zip(nodes, confs)]
        if self.calibration_ == "in_sample" or len(turns_list) < 2:
            if self.calibration_ == "cross_fit":
                logger.warning(
                    "%s: one train dialogue: cross_fit calibration falls back to in_sample", where or "fit"
                )
            p_calib = p_train
        else:
            p_calib = self._cross_fit_p(turns_list, emb, nodes, confs)
        sys_turns = [system_turn_index(t) for t in turns_list]
        self.calibration_stats_ = np.asarray(
            [
                calibration_statistic(p, self.method, j, self.position_weight_)
                for p, j in zip(p_calib, sys_turns)
            ]
        )
        self.threshold_ = self._threshold(self.calibration_stats_, self.false_alarm_rate)
        self.n_train_ = len(turns_list)
        self.train_false_alarm_rate_ = float(
            np.mean(
                [
                    alarms(p, self.method, self.threshold_, j, self.position_weight_).any()
                    for p, j in zip(p_train, sys_turns)
                ]
            )
        )
        logger.info(
            "fitted %s%s on %d dialogues: V=%d nodes, threshold=%.6g, train false-alarm rate %.3f",
            self.name,
            f" ({where})" if where else "",
            self.n_train_,
            offset,
            self.threshold_,
            self.train_false_alarm_rate_,
        )

    def _fit_nodes(
        self,
        turns_list: list[list[dict[str, str]]],
        emb: list[np.ndarray],
        labels: Mapping[str, np.ndarray] | None = None,
    ) -> int:
        """Cluster each speaker's utterances into nodes (centroids); returns the number of nodes.
        The cluster label of every utterance is kept in ``_node_labels`` (per speaker: labels and
        the index of the dialogue of each utterance) for the out-of-fold nodes of ``cross_fit``."""
        from dialfork_metrics.flowgraph import cluster_tree, cut_cluster_tree

        labels_by_sp: dict[str, np.ndarray] = {}
        for sp in SPEAKERS:
            E = _speaker_rows(turns_list, emb, sp)[0]
            if E is None:
                continue
            if labels is not None:
                labels_by_sp[sp] = np.asarray(labels[sp])
            elif len(E) > 1:
                # FlowKL's clustering (flowgraph.cluster_embeddings: the same partition, tested) as a cut
                # of the memoised dendrogram, so detectors at other thresholds reuse the tree
                labels_by_sp[sp] = cut_cluster_tree(cluster_tree(E), self.distance_threshold_)
            else:
                labels_by_sp[sp] = np.zeros(1, dtype=np.int64)
        return self._set_nodes(turns_list, emb, labels_by_sp)

    def _set_nodes(
        self,
        turns_list: list[list[dict[str, str]]],
        emb: list[np.ndarray],
        labels: Mapping[str, np.ndarray],
        keep: np.ndarray | None = None,
    ) -> int:
        """Nodes = the centroids of the clusters ``labels`` (per speaker, one label per utterance of
        ``turns_list``), computed from the utterances of the dialogues ``keep`` only (all when
        ``None``; clusters left without an utterance disappear)."""
        from dialfork_metrics.flowgraph import centroids_from_labels

        self.centroids_, self.node_offsets_, self._node_labels = {}, {}, {}
        offset = 0
        for sp in SPEAKERS:
            E, owner = _speaker_rows(turns_list, emb, sp)
            if E is None:
                continue
            lab = np.asarray(labels[sp])
            self._node_labels[sp] = (lab, owner)
            if keep is not None:
                m = keep[owner]
                if not m.any():
                    continue
                E, lab = E[m], np.unique(lab[m], return_inverse=True)[1]
            C = _normalize_rows(centroids_from_labels(E, lab))
            self.centroids_[sp] = C
            self.node_offsets_[sp] = offset
            offset += len(C)
        return offset

    def _cross_fit_p(
        self,
        turns_list: list[list[dict[str, str]]],
        emb: list[np.ndarray],
        nodes: list[np.ndarray],
        confs: list[np.ndarray],
    ) -> list[np.ndarray]:
        """Out-of-fold ``p_t`` of every train dialogue: ``calibration_folds`` folds (seeded
        permutation); for each, the N-gram LM and (``cross_fit_nodes``) the nodes are refitted on
        the other folds, and the fold's dialogues are scored as unseen ones, as test dialogues will
        be. With the nodes of the whole split (``"fixed"``), a held-out utterance has pulled its
        own centroid towards it, or made a node of its own: held-out dialogues look more familiar
        than test ones (higher node confidence, fewer unseen transitions) and the threshold lets
        more test dialogues alarm than the target. ``"restrict"`` (default) keeps the split's
        clusters but computes each centroid from the other folds' utterances only (clusters of the
        fold's utterances alone disappear); ``"recluster"`` clusters the other folds anew (exact,
        one clustering per fold)."""
        n = len(turns_list)
        fold = calibration_fold_ids(n, self.calibration_folds, self.calibration_seed)
        out: list[np.ndarray] = [np.empty(0)] * n
        split_labels = {sp: lab for sp, (lab, _) in self._node_labels.items()}
        for f in range(int(fold.max()) + 1):
            rest = np.flatnonzero(fold != f)
            held = np.flatnonzero(fold == f)
            V, n_rest = self.vocab_size, [nodes[i] for i in rest]
            n_held, c_held = [nodes[i] for i in held], [confs[i] for i in held]
            if self.cross_fit_nodes != "fixed":
                probe = self._probe()
                if self.cross_fit_nodes == "recluster":
                    Vp = probe._fit_nodes([turns_list[i] for i in rest], [emb[i] for i in rest])
                else:
                    Vp = probe._set_nodes(turns_list, emb, split_labels, keep=fold != f)
                try:
                    n_rest_p, _ = probe._assign_many([turns_list[i] for i in rest], [emb[i] for i in rest])
                    n_held, c_held = probe._assign_many([turns_list[i] for i in held], [emb[i] for i in held])
                    V, n_rest = Vp, n_rest_p
                except ValueError:  # a speaker only the held-out fold has: keep the split's nodes
                    logger.warning(
                        "cross_fit fold %d: a speaker absent from the other folds; the fold keeps the "
                        "nodes of the whole split",
                        f,
                    )
            lm = NgramLM(self.order_, V, backoff=self.backoff_).fit(n_rest)
            for i, nn, cc in zip(held.tolist(), n_held, c_held):
                p = lm.sequence_probs(nn)
                out[i] = p * cc if self.node_confidence else p
        return out

    def _probe(self) -> Self:
        """An unfitted single model with the node settings of this one (for out-of-fold nodes)."""
        return type(self)(
            method=self.method,
            node_confidence=self.node_confidence,
            order=self.order_,
            K=self.K,
            tau=self.tau,
            distance_threshold=self.distance_threshold_,
            backoff=self.backoff_,
            calibration="in_sample",
            encoder=None,
            scope="pooled",
            preset="paper",
            position_weight=self.position_weight_,
        )._resolve_params()

    def _sequence_p(self, nodes: np.ndarray, confs: np.ndarray) -> np.ndarray:
        p = self.lm_.sequence_probs(nodes)
        return p * confs if self.node_confidence else p

    def _threshold(self, stats: np.ndarray, false_alarm_rate: float) -> float:
        return calibrate_threshold(
            stats,
            self.method,
            false_alarm_rate,
            self.percentile_method,
            self.threshold_rule_,
            self.confidence,
        )

    def recalibrate(self, false_alarm_rate: float) -> Self:
        """Move the operating point without refitting: the threshold(s) become the percentile of the
        stored calibration statistics for the new target (exactly what ``fit`` would choose).

        Args:
            false_alarm_rate: The new target share of conformant dialogues that alarm, in (0, 1).

        Returns:
            The detector itself, with the new threshold(s).

        Raises:
            ValueError: ``false_alarm_rate`` is not in (0, 1).
            NotFittedError: The detector is not fitted.
        """
        if not 0 < false_alarm_rate < 1:
            raise ValueError(f"false_alarm_rate must be in (0, 1), got {false_alarm_rate!r}")
        self.check_is_fitted()
        self.false_alarm_rate = float(false_alarm_rate)
        for m in self.models().values():
            m.false_alarm_rate = float(false_alarm_rate)
            m.threshold_ = m._threshold(m.calibration_stats_, false_alarm_rate)
        return self

    # -- streaming ---------------------------------------------------------------------------


def _speaker_rows(
    turns_list: Sequence[Sequence[Mapping[str, str]]], emb: Sequence[np.ndarray], speaker: str
) -> tuple[np.ndarray | None, np.ndarray]:
    """The embeddings of ``speaker``'s utterances (``None`` if none) and each one's dialogue index."""
    rows = [
        (i, e[j])
        for i, (turns, e) in enumerate(zip(turns_list, emb))
        for j, t in enumerate(turns)
        if t["speaker"] == speaker
    ]
    if not rows:
        return None, np.empty(0, dtype=np.int64)
    return np.stack([r for _, r in rows]), np.asarray([i for i, _ in rows], dtype=np.int64)
