"""Streaming Task 3 detectors (SPEC section 8): Improbable Transition (IT) and Surprisal Spike
(SS), each with and without node confidence (NC).

Pipeline, fitted on conformant train dialogues only (no workflow):

1. nodes: per speaker, agglomerative clustering of the train utterances' embeddings
   (:func:`dialfork_metrics.flowgraph.cluster_embeddings`, FlowKL step 1) and their centroids;
   each turn maps to the nearest centroid of its speaker's nodes;
2. an N-gram LM over node sequences (:class:`~dialfork_metrics.task3.ngram.NgramLM`, Laplace
   smoothing as FlowKL): ``p_t = P(n_t | n_{t-N+1..t-1})``;
3. NC: ``c_t`` = softmax over the ``K`` nearest centroids of ``cos / tau``, taken at the nearest
   (:func:`dialfork_metrics.flowgraph.node_confidence`); ``p_t^NC = p_t * c_t``;
4. IT: the first ``t`` with ``p_t < theta_off``, ``theta_off`` = the ``100 * false_alarm_rate``-th
   percentile (5th) of ``min_t p_t`` over the conformant train dialogues;
   SS: ``s_t = -log p_t``, ``Delta_t = s_t - s_{t-1}`` (defined from the second turn on), the first
   ``t`` with ``Delta_t > theta_jump``, ``theta_jump`` = the ``100 * (1 - false_alarm_rate)``-th
   percentile (95th) of ``max_t Delta_t`` over the conformant train dialogues.
   (``calibration="in_sample"``, the default; ``"cross_fit"`` computes the statistic out of fold).
   Percentiles are ``numpy.percentile(..., method=percentile_method)`` (default ``"linear"``,
   numpy's default: linear interpolation between the two closest order statistics), so on the
   train dialogues themselves at most ``false_alarm_rate`` of them raise an alarm;
5. a flag raised at turn position ``t`` is reported as a system turn index with
   :func:`dialfork_dataset.forks.position_to_system_turn` (a user turn -> the latest system turn
   before it, or system turn 1 if none).

Every turn position counts (user and system turns are both nodes of the sequence).

The streaming interface sees one turn at a time and never looks ahead::

    det = make_detector("it+nc").fit(train_dialogues)
    stream = det.start()
    for turn in live_dialogue:
        alarm = stream.update(turn)      # system turn index or None
    stream.flag                           # the first alarm (what predict returns)

``predict(dialogue)`` is exactly that loop; ``predict_many`` runs it over many dialogues with one
encoder pass and batched node assignment.
Every streaming path takes its decision in :meth:`StreamingDetector.step`, a pure function of a
constant-size carried state (:class:`StepState`: the last ``N-1`` nodes, ``p_{t-1}``, the turn
counts); :mod:`dialfork_metrics.guard` runs the same step for live conversations.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dialfork_dataset.turns import as_turns

from .ngram import NgramLM

logger = logging.getLogger(__name__)

SPEAKERS: tuple[str, ...] = ("user", "system")
METHODS: tuple[str, ...] = ("it", "ss")
DEFAULT_ORDER = 6
DEFAULT_K = 64
DEFAULT_TAU = 0.05
DEFAULT_DISTANCE_THRESHOLD = 0.55
DEFAULT_FALSE_ALARM_RATE = 0.05
CALIBRATIONS: tuple[str, ...] = ("in_sample", "cross_fit")
FORMAT = "dialfork-task3-streaming-detector"
FORMAT_VERSION = 1


class NotFittedError(ValueError, AttributeError):
    """A detector was used before :meth:`fit` (mirrors ``sklearn.exceptions.NotFittedError``)."""


# --------------------------------------------------------------------------------------------
# pure decision functions
# --------------------------------------------------------------------------------------------
def surprisal(p: np.ndarray) -> np.ndarray:
    """``s_t = -log p_t`` (natural log; ``math.log`` per element, bit-identical to the streaming
    loop, so a threshold that equals a train statistic compares the same way in both)."""
    return np.asarray([-math.log(x) for x in np.asarray(p, dtype=np.float64).tolist()], dtype=np.float64)


def surprisal_jumps(p: np.ndarray) -> np.ndarray:
    """``Delta_t = s_t - s_{t-1}`` for ``t >= 2``; position 0 is ``-inf`` (no jump into the first turn)."""
    s = surprisal(p)
    d = np.full(s.shape, -np.inf)
    d[1:] = s[1:] - s[:-1]
    return d


def alarms(p: np.ndarray, method: str, threshold: float) -> np.ndarray:
    """Boolean alarm per turn position: IT ``p_t < threshold``; SS ``Delta_t > threshold``."""
    p = np.asarray(p, dtype=np.float64)
    if method == "it":
        return p < threshold
    if method == "ss":
        return surprisal_jumps(p) > threshold
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def calibration_statistic(p: np.ndarray, method: str) -> float:
    """Per-dialogue statistic the threshold is a percentile of: IT ``min_t p_t``, SS ``max_t Delta_t``."""
    p = np.asarray(p, dtype=np.float64)
    if method == "it":
        return float(p.min())
    if method == "ss":
        if len(p) < 2:
            raise ValueError("SS needs dialogues of at least two turns (Delta_t starts at the second turn)")
        return float(surprisal_jumps(p)[1:].max())
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def calibrate_threshold(stats: Sequence[float], method: str, false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE,
                        percentile_method: str = "linear") -> float:
    """IT: the ``100*a``-th percentile of ``min p_t``; SS: the ``100*(1-a)``-th of ``max Delta_t``."""
    stats = np.asarray(stats, dtype=np.float64)
    if stats.size == 0:
        raise ValueError("cannot calibrate a threshold on no dialogues")
    q = 100.0 * false_alarm_rate if method == "it" else 100.0 * (1.0 - false_alarm_rate)
    return float(np.percentile(stats, q, method=percentile_method))


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _normalize_rows(C: np.ndarray) -> np.ndarray:
    C = np.asarray(C, dtype=np.float64)
    n = np.linalg.norm(C, axis=1, keepdims=True)
    return C / np.where(n > 0, n, 1.0)


def _where(d: Any, i: int) -> str:
    if isinstance(d, Mapping) and d.get("dialogue_id"):
        return f"dialogue {d['dialogue_id']!r}"
    return f"dialogue #{i}"


def _resolve_encoder(encoder: Any):
    if encoder is None:
        return None
    if isinstance(encoder, str):
        from dialfork_metrics.encoders import Encoder

        return Encoder(encoder)
    if not hasattr(encoder, "encode_dialogues"):
        raise TypeError("encoder must be an alias/path string or an object with encode() and encode_dialogues()")
    return encoder


def _encoder_name(encoder: Any) -> str | None:
    if encoder is None:
        return None
    if isinstance(encoder, str):
        return encoder
    alias = getattr(encoder, "alias", None)
    return alias if isinstance(alias, str) else getattr(encoder, "name", None)


@dataclass(frozen=True)
class StepState:
    """Everything the streaming loop carries from one turn to the next (its size does not grow with
    the dialogue): the last ``N-1`` node ids, ``p_{t-1}``, and the turn and system-turn counts.
    The start of a dialogue is ``StepState()``."""

    context: tuple[int, ...] = ()
    prev_p: float | None = None
    n_turns: int = 0
    n_system: int = 0


@dataclass(frozen=True)
class StepResult:
    """One turn's outcome (:meth:`StreamingDetector.step`)."""

    p: float
    """``p_t`` (``p_t^NC`` for NC detectors)."""
    score: float | None
    """The statistic compared with the threshold: IT ``p_t`` (alarm when below), SS ``Delta_t``
    (alarm when above; ``None`` at the first turn, which has no jump)."""
    alarm: bool
    """This turn crosses the threshold."""
    system_turn: int
    """The turn as a system turn index (a user turn -> the latest system turn before it, or 1)."""


class _Stream:
    """One dialogue being monitored turn by turn (created by :meth:`StreamingDetector.start`)."""

    def __init__(self, detector: StreamingDetector):
        self._det = detector
        self.turns: list[dict[str, str]] = []
        self.nodes: list[int] = []
        self.p: list[float] = []
        """``p_t`` (``p_t^NC`` for NC detectors) of every turn seen so far."""
        self.alarms: list[int] = []
        """Every alarm raised so far, as system turn indices (one per anomalous turn)."""
        self.flag: int | None = None
        """The first alarm (the detector's prediction for the dialogue), or ``None`` so far."""
        self._state = StepState()

    def update(self, turn: Any, embedding: np.ndarray | None = None) -> int | None:
        """Feed the next turn (``{"speaker", "text"}``); returns the system turn index of the alarm
        this turn raises, or ``None``. ``embedding`` skips the encoder (precomputed, L2-normalised)."""
        where = f"turn {len(self.turns)}"
        if isinstance(turn, str):
            raise ValueError(f"{where}: update() needs a {{speaker, text}} turn; a bare string has no speaker")
        if hasattr(turn, "speaker") and not isinstance(turn, Mapping):
            turn = {"speaker": turn.speaker, "text": turn.text}
        t = as_turns([turn], where=where)[0]
        det = self._det
        if embedding is None:
            if det.encoder is None:
                raise ValueError("update() without an embedding needs a detector built with an encoder")
            embedding = det.encoder.encode([t["text"]])[0]
        e = np.asarray(embedding, dtype=np.float64).reshape(1, -1)
        node, conf = det._assign(t["speaker"], e)
        return self.update_node(t, int(node[0]), float(conf[0]))

    def update_node(self, turn: Mapping[str, str], node: int, confidence: float = 1.0) -> int | None:
        """Advance with an already-assigned node (and its confidence); the core of :meth:`update`."""
        self._state, r = self._det.step(self._state, turn["speaker"], node, confidence)
        self.turns.append(dict(turn))
        self.nodes.append(node)
        self.p.append(r.p)
        if not r.alarm:
            return None
        self.alarms.append(r.system_turn)
        if self.flag is None:
            self.flag = r.system_turn
        return r.system_turn


class StreamingDetector:
    """IT or SS detector, with or without node confidence (see the module doc).

    Parameters
    ----------
    method: ``"it"`` or ``"ss"``.
    node_confidence: weight ``p_t`` by the node confidence ``c_t`` (the ``+NC`` variants).
    order: N of the N-gram LM (>= 1; paper: 6).
    K, tau: node-confidence softmax over the K nearest centroids at temperature tau (sdialog: 64, 0.05).
    distance_threshold: cosine distance threshold of the node clustering (FlowKL default 0.55).
    false_alarm_rate: target false-alarm rate of the percentile calibration (paper: 0.05).
    percentile_method: ``numpy.percentile`` interpolation method (default ``"linear"``).
    backoff: N-gram back-off for unseen contexts (ours; off = the paper's Laplace N-gram).
    calibration: ``"in_sample"`` (default; SPEC: the percentile of the statistic of the train
        dialogues under the LM fitted on them) or ``"cross_fit"`` (ours: the statistic of each train
        dialogue under an LM fitted on the other ``calibration_folds`` folds, seeded by
        ``calibration_seed``). In-sample, every train context has been seen, so a test dialogue's
        unseen context (``p = 1/(count + V)``) falls below thresholds calibrated on seen ones; the
        out-of-fold statistic sees unseen contexts as test data does, giving fewer test false alarms
        when the train split is small.
    encoder: alias/path for :class:`dialfork_metrics.encoders.Encoder`, an encoder object, or
        ``None`` (then every call must pass precomputed ``embeddings``).
    """

    def __init__(self, method: str = "it", node_confidence: bool = False, order: int = DEFAULT_ORDER,
                 K: int = DEFAULT_K, tau: float = DEFAULT_TAU,
                 distance_threshold: float = DEFAULT_DISTANCE_THRESHOLD,
                 false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE, percentile_method: str = "linear",
                 backoff: bool = False, calibration: str = "in_sample", calibration_folds: int = 5,
                 calibration_seed: int = 0, encoder: Any = "minilm"):
        errs = []
        if method not in METHODS:
            errs.append(f"method must be one of {METHODS}, got {method!r}")
        if isinstance(order, bool) or not isinstance(order, int) or order < 1:
            errs.append(f"order N must be an integer >= 1, got {order!r}")
        if isinstance(K, bool) or not isinstance(K, int) or K < 1:
            errs.append(f"K must be an integer >= 1, got {K!r}")
        if not isinstance(tau, int | float) or isinstance(tau, bool) or not tau > 0:
            errs.append(f"tau must be > 0, got {tau!r}")
        if not isinstance(distance_threshold, int | float) or not 0 < distance_threshold <= 2:
            errs.append(f"distance_threshold must be a cosine distance in (0, 2], got {distance_threshold!r}")
        if not isinstance(false_alarm_rate, int | float) or not 0 < false_alarm_rate < 1:
            errs.append(f"false_alarm_rate must be in (0, 1), got {false_alarm_rate!r}")
        if calibration not in CALIBRATIONS:
            errs.append(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
        if isinstance(calibration_folds, bool) or not isinstance(calibration_folds, int) or calibration_folds < 2:
            errs.append(f"calibration_folds must be an integer >= 2, got {calibration_folds!r}")
        if errs:
            raise ValueError("StreamingDetector: " + "; ".join(errs))
        self.method = method
        self.node_confidence = bool(node_confidence)
        self.order = order
        self.K = K
        self.tau = float(tau)
        self.distance_threshold = float(distance_threshold)
        self.false_alarm_rate = float(false_alarm_rate)
        self.percentile_method = percentile_method
        self.backoff = bool(backoff)
        self.calibration = calibration
        self.calibration_folds = calibration_folds
        self.calibration_seed = int(calibration_seed)
        self._encoder_spec = encoder
        self._encoder = None
        # fitted state
        self.centroids: dict[str, np.ndarray] = {}
        self.node_offsets: dict[str, int] = {}
        self.lm: NgramLM | None = None
        self.threshold: float | None = None
        self.calibration_stats: np.ndarray | None = None
        self.train_false_alarm_rate: float | None = None
        self.n_train: int = 0

    # -- names, encoder ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.method + ("+nc" if self.node_confidence else "")

    def __repr__(self) -> str:
        fitted = f"fitted on {self.n_train}, V={self.vocab_size}" if self.is_fitted else "not fitted"
        return f"StreamingDetector({self.name!r}, N={self.order}, {fitted})"

    @property
    def encoder(self):
        if self._encoder is None and self._encoder_spec is not None:
            self._encoder = _resolve_encoder(self._encoder_spec)
        return self._encoder

    @property
    def is_fitted(self) -> bool:
        return self.lm is not None and self.threshold is not None

    @property
    def vocab_size(self) -> int:
        return sum(len(c) for c in self.centroids.values())

    @property
    def node_names(self) -> list[str]:
        """Global node names (``"user:0"``, ..., ``"system:0"``, ...), indexed by node id."""
        return [f"{sp}:{i}" for sp in SPEAKERS if sp in self.centroids for i in range(len(self.centroids[sp]))]

    def _check_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(f"this {self.name!r} detector is not fitted yet: call fit(conformant_train_dialogues) "
                                 "or load a saved detector with load_detector(path)")

    # -- embeddings --------------------------------------------------------------------------
    def _embeddings(self, turns_list: list[list[dict[str, str]]], embeddings: Any, names: list[str],
                    show_progress: bool = False) -> list[np.ndarray]:
        if embeddings is None:
            if self.encoder is None:
                raise ValueError("no encoder: pass embeddings= (one (n_turns, d) array per dialogue) or build "
                                 "the detector with encoder='minilm' (or another alias/path)")
            embeddings = self.encoder.encode_dialogues(turns_list)
        embeddings = list(embeddings)
        if len(embeddings) != len(turns_list):
            raise ValueError(f"embeddings holds {len(embeddings)} arrays for {len(turns_list)} dialogues")
        out, errs = [], []
        dim = None
        if self.centroids:
            dim = next(iter(self.centroids.values())).shape[1]
        for name, turns, e in zip(names, turns_list, embeddings):
            e = np.asarray(e, dtype=np.float64)
            if e.ndim != 2 or e.shape[0] != len(turns):
                errs.append(f"{name}: embeddings of shape {e.shape} for {len(turns)} turns (expected (n_turns, d))")
            elif dim is not None and e.shape[1] != dim:
                errs.append(f"{name}: embedding dimension {e.shape[1]} but the detector was fitted with {dim} "
                            "(use the same encoder as at fit time)")
            elif not np.all(np.isfinite(e)):
                errs.append(f"{name}: embeddings contain NaN or inf")
            out.append(e)
        if errs:
            raise ValueError(f"{len(errs)} bad embedding array(s):\n  " + "\n  ".join(errs[:20]))
        return out

    def _assign(self, speaker: str, E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global node ids and node confidences of the rows of ``E`` (all spoken by ``speaker``)."""
        from dialfork_metrics.flowgraph import cosine_similarities, node_confidence

        C = self.centroids.get(speaker)
        if C is None:
            raise ValueError(f"speaker {speaker!r} never spoke in the train dialogues; the detector has no node for it")
        S = cosine_similarities(E, C)  # (n, n_nodes); the nearest node is the argmax (flowgraph.nearest_nodes)
        idx = np.argmax(S, axis=1).astype(np.int64)
        if self.node_confidence:
            conf = np.asarray(node_confidence(S, K=self.K, tau=self.tau), dtype=np.float64)
        else:
            conf = np.ones(len(E))
        return idx + self.node_offsets[speaker], conf

    def _assign_many(self, turns_list: list[list[dict[str, str]]], emb: list[np.ndarray]):
        """Per dialogue: (node ids, confidences), with one batched assignment per speaker."""
        nodes = [np.empty(len(t), dtype=np.int64) for t in turns_list]
        confs = [np.empty(len(t), dtype=np.float64) for t in turns_list]
        for sp in SPEAKERS:
            where = [(i, j) for i, turns in enumerate(turns_list) for j, t in enumerate(turns) if t["speaker"] == sp]
            if not where:
                continue
            E = np.stack([emb[i][j] for i, j in where])
            idx, conf = self._assign(sp, E)
            for (i, j), n, c in zip(where, idx.tolist(), conf.tolist()):
                nodes[i][j] = n
                confs[i][j] = c
        return nodes, confs

    # -- fitting -----------------------------------------------------------------------------
    def fit(self, dialogues: Sequence[Any], embeddings: Sequence[np.ndarray] | None = None,
            show_progress: bool = False) -> StreamingDetector:
        """Fit nodes, the N-gram LM and the threshold on conformant train dialogues."""
        from dialfork_metrics.flowgraph import centroids_from_labels, cluster_embeddings

        if isinstance(dialogues, Mapping | str) or not isinstance(dialogues, Sequence):
            raise TypeError("fit() takes a list of conformant dialogues (records, or lists of turns)")
        if len(dialogues) == 0:
            raise ValueError("fit() needs at least one conformant train dialogue, got none")
        turns_list, names, errs = [], [], []
        for i, d in enumerate(dialogues):
            name = _where(d, i)
            if isinstance(d, Mapping) and d.get("hallucination_type") is not None:
                # SPEC 8: streaming detectors may use only the conformant train split
                errs.append(f"{name}: is a fork ({d['hallucination_type']}); fit() takes conformant train "
                            "dialogues only (the task3 train split)")
                continue
            try:
                turns = as_turns(d, where=name)
            except ValueError as e:
                errs.append(str(e))
                continue
            if len(turns) < 2:
                errs.append(f"{name}: has {len(turns)} turn; fitting needs dialogues of at least two turns "
                            "(a transition, and a surprisal jump for SS)")
            turns_list.append(turns)
            names.append(name)
        if errs:
            raise ValueError(f"cannot fit on these dialogues ({len(errs)} problem(s)):\n  " + "\n  ".join(errs[:20]))
        self.centroids, self.node_offsets = {}, {}
        emb = self._embeddings(turns_list, embeddings, names, show_progress)
        offset = 0
        for sp in SPEAKERS:
            rows = [e[j] for turns, e in zip(turns_list, emb) for j, t in enumerate(turns) if t["speaker"] == sp]
            if not rows:
                continue
            E = np.stack(rows)
            labels = np.asarray(cluster_embeddings(E, distance_threshold=self.distance_threshold)) if len(E) > 1 \
                else np.zeros(1, dtype=np.int64)
            C = _normalize_rows(centroids_from_labels(E, labels))
            self.centroids[sp] = C
            self.node_offsets[sp] = offset
            offset += len(C)
        nodes, confs = self._assign_many(turns_list, emb)
        self.lm = NgramLM(self.order, offset, backoff=self.backoff).fit(nodes)
        p_train = [self._sequence_p(n, c) for n, c in zip(nodes, confs)]
        p_calib = p_train if self.calibration == "in_sample" else self._cross_fit_p(nodes, confs, offset)
        self.calibration_stats = np.asarray([calibration_statistic(p, self.method) for p in p_calib])
        self.threshold = calibrate_threshold(self.calibration_stats, self.method, self.false_alarm_rate,
                                             self.percentile_method)
        self.n_train = len(turns_list)
        self.train_false_alarm_rate = float(np.mean([alarms(p, self.method, self.threshold).any() for p in p_train]))
        logger.info("fitted %s on %d dialogues: V=%d nodes, threshold=%.6g, train false-alarm rate %.3f",
                    self.name, self.n_train, offset, self.threshold, self.train_false_alarm_rate)
        return self

    def _cross_fit_p(self, nodes: list[np.ndarray], confs: list[np.ndarray], vocab: int) -> list[np.ndarray]:
        """Out-of-fold ``p_t`` of every train dialogue: K folds (seeded permutation), the N-gram LM
        refitted on the other folds (the nodes stay those of the whole train split)."""
        n = len(nodes)
        k = min(self.calibration_folds, n)
        if k < 2:
            raise ValueError("calibration='cross_fit' needs at least two train dialogues")
        fold = np.empty(n, dtype=np.int64)
        fold[np.random.default_rng(self.calibration_seed).permutation(n)] = np.arange(n) % k
        out: list[np.ndarray] = [np.empty(0)] * n
        for f in range(k):
            lm = NgramLM(self.order, vocab, backoff=self.backoff).fit([nodes[i] for i in range(n) if fold[i] != f])
            for i in np.flatnonzero(fold == f):
                p = lm.sequence_probs(nodes[i])
                out[i] = p * confs[i] if self.node_confidence else p
        return out

    def _sequence_p(self, nodes: np.ndarray, confs: np.ndarray) -> np.ndarray:
        p = self.lm.sequence_probs(nodes)
        return p * confs if self.node_confidence else p

    # -- streaming ---------------------------------------------------------------------------
    def start(self) -> _Stream:
        """Begin monitoring a new dialogue; returns the stream (also kept for :meth:`update`)."""
        self._check_fitted()
        self._stream = _Stream(self)
        return self._stream

    def update(self, turn: Any, embedding: np.ndarray | None = None) -> int | None:
        """:meth:`_Stream.update` on the stream opened by the last :meth:`start`."""
        stream = getattr(self, "_stream", None)
        if stream is None:
            raise RuntimeError("call start() before update()")
        return stream.update(turn, embedding)

    def step(self, state: StepState, speaker: str, node: int, confidence: float = 1.0
             ) -> tuple[StepState, StepResult]:
        """One turn of the streaming loop, as a pure function of the carried state: the decision
        rule of every streaming prediction (``predict``, ``update``, ``dialfork_metrics.guard``).
        Constant cost per turn: only the last ``N-1`` nodes and ``p_{t-1}`` are read."""
        lm = self.lm
        p = lm.prob(lm.context_of(state.context), node)
        if self.node_confidence:
            p *= confidence
        if self.method == "it":
            score: float | None = p
            alarm = p < self.threshold
        else:  # the same expression as surprisal_jumps
            score = None if state.prev_p is None else (-math.log(p)) - (-math.log(state.prev_p))
            alarm = score is not None and score > self.threshold
        n_system = state.n_system + (speaker == "system")
        k = self.order - 1
        context = (*state.context, int(node))[-k:] if k else ()
        return (StepState(context, p, state.n_turns + 1, n_system),
                StepResult(p, score, bool(alarm), max(n_system, 1)))

    # -- offline convenience (the streaming loop run over whole dialogues) ----------------------
    def turn_probabilities(self, dialogues: Sequence[Any], embeddings: Sequence[np.ndarray] | None = None
                           ) -> list[np.ndarray]:
        """``p_t`` (``p_t^NC`` for NC detectors) of every turn of every dialogue."""
        self._check_fitted()
        turns_list = [as_turns(d, where=_where(d, i)) for i, d in enumerate(dialogues)]
        emb = self._embeddings(turns_list, embeddings, [_where(d, i) for i, d in enumerate(dialogues)])
        nodes, confs = self._assign_many(turns_list, emb)
        return [self._sequence_p(n, c) for n, c in zip(nodes, confs)]

    def predict(self, dialogue: Any, embeddings: np.ndarray | None = None) -> int | None:
        """The first alarm of the streaming loop over ``dialogue`` (system turn index) or ``None``."""
        return self.predict_many([dialogue], None if embeddings is None else [embeddings])[0]

    def predict_many(self, dialogues: Sequence[Any], embeddings: Sequence[np.ndarray] | None = None,
                     show_progress: bool = False) -> list[int | None]:
        """:meth:`predict` for many dialogues: one encoder pass, batched node assignment."""
        from tqdm.auto import tqdm

        self._check_fitted()
        names = [_where(d, i) for i, d in enumerate(dialogues)]
        turns_list = [as_turns(d, where=n) for d, n in zip(dialogues, names)]
        emb = self._embeddings(turns_list, embeddings, names, show_progress)
        nodes, confs = self._assign_many(turns_list, emb)
        out: list[int | None] = []
        for turns, n, c in tqdm(list(zip(turns_list, nodes, confs)), desc=f"task3 {self.name}",
                                disable=not show_progress, unit="dlg"):
            stream = _Stream(self)
            for t, ni, ci in zip(turns, n.tolist(), c.tolist()):
                stream.update_node(t, ni, ci)
                if stream.flag is not None:
                    break  # the first alarm is final: later turns cannot change it
            out.append(stream.flag)
        return out

    # -- persistence (JSON + npz; no pickle) --------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {
            "detector": self.name,
            "method": self.method,
            "node_confidence": self.node_confidence,
            "order": self.order,
            "K": self.K,
            "tau": self.tau,
            "distance_threshold": self.distance_threshold,
            "false_alarm_rate": self.false_alarm_rate,
            "percentile_method": self.percentile_method,
            "backoff": self.backoff,
            "calibration": self.calibration,
            "calibration_folds": self.calibration_folds,
            "calibration_seed": self.calibration_seed,
            "encoder": _encoder_name(self._encoder_spec if self._encoder is None else self._encoder),
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``config.json`` + ``arrays.npz`` into folder ``path`` (atomic per file)."""
        from dialfork_dataset.jsonl import write_json_atomic

        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        arrays = {f"centroids_{sp}": c.astype(np.float64) for sp, c in self.centroids.items()}
        arrays.update(self.lm.to_arrays())
        arrays["calibration_stats"] = np.asarray(self.calibration_stats, dtype=np.float64)
        tmp = path / ".arrays.tmp.npz"
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, path / "arrays.npz")
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            **self.config(),
            "speakers": list(self.centroids),
            "node_offsets": self.node_offsets,
            "vocab_size": self.vocab_size,
            "threshold": self.threshold,
            "n_train": self.n_train,
            "train_false_alarm_rate": self.train_false_alarm_rate,
        }
        write_json_atomic(path / "config.json", meta)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, encoder: Any = None) -> StreamingDetector:
        """Load a detector saved by :meth:`save`. ``encoder`` overrides the saved encoder name."""
        path = Path(path)
        cfg_path = path / "config.json"
        if not cfg_path.is_file():
            raise FileNotFoundError(f"{path}: no config.json (not a saved Task 3 detector folder)")
        meta = json.loads(cfg_path.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{cfg_path}: not a streaming detector (format {meta.get('format')!r})")
        if meta.get("format_version", 0) > FORMAT_VERSION:
            raise ValueError(f"{cfg_path}: format version {meta['format_version']} is newer than this code "
                             f"({FORMAT_VERSION}); upgrade dialfork")
        det = cls(method=meta["method"], node_confidence=meta["node_confidence"], order=meta["order"], K=meta["K"],
                  tau=meta["tau"], distance_threshold=meta["distance_threshold"],
                  false_alarm_rate=meta["false_alarm_rate"], percentile_method=meta["percentile_method"],
                  backoff=meta["backoff"], calibration=meta.get("calibration", "in_sample"),
                  calibration_folds=meta.get("calibration_folds", 5), calibration_seed=meta.get("calibration_seed", 0),
                  encoder=encoder if encoder is not None else meta.get("encoder"))
        with np.load(path / "arrays.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        det.centroids = {sp: arrays[f"centroids_{sp}"] for sp in meta["speakers"]}
        det.node_offsets = {sp: int(o) for sp, o in meta["node_offsets"].items()}
        det.lm = NgramLM.from_arrays(det.order, int(meta["vocab_size"]), arrays, backoff=det.backoff)
        det.calibration_stats = arrays["calibration_stats"]
        det.threshold = float(meta["threshold"])
        det.n_train = int(meta["n_train"])
        det.train_false_alarm_rate = meta.get("train_false_alarm_rate")
        return det
