"""FlowKL and its dialog flow graph (SPEC section 7; Task 3 reuses the graph, SPEC section 8).

Steps (paper; graph as in Dialog2Flow/sdialog):

1. :func:`cluster_embeddings`: per speaker, agglomerative clustering of all reference turn
   embeddings (average linkage, cosine distance, ``distance_threshold`` 0.55); node centroid =
   member mean (:func:`centroids_from_labels`).
2. :class:`FlowGraph`: a directed graph over the nodes plus ``[start]``/``[end]`` with edge
   counts; Laplace-smoothed ``P(b | a) = (count(a, b) + 1) / (out(a) + V)``, ``V`` the number of
   cluster nodes of both speakers (``[start]``/``[end]`` excluded, as sdialog). Self-loops are
   removed, as Dialog2Flow does (``self_loops=False``; a repeated node is then an unseen edge).
   Each turn maps to the nearest centroid (cosine) of its speaker's nodes
   (:func:`nearest_nodes`). ``L(D)`` is the geometric mean of the transition probabilities of
   ``D`` (``[start] -> n_1``, ..., ``n_{T-1} -> n_T``; ``include_end=True`` adds ``n_T -> [end]``):

   - ``use_only_known_edges=True`` (default, the paper's reading): over the transitions that are
     edges of G only. A dialogue none of whose transitions is an edge of G has no such mean:
     ``no_known_edges="zero"`` (default, ours) gives it ``L = 0``, ``"drop"`` leaves it out,
     ``"raise"`` raises ``ValueError``;
   - ``use_only_known_edges=False`` (sdialog's default): over all transitions, an unseen edge
     counting ``1 / (out(a) + V)``;
   - ``node_confidence=True`` (sdialog's default): each known-edge probability is multiplied by
     the turn's node confidence ``c_t`` (:func:`node_confidence`, ``K=64``, ``tau=0.05``).
3. :func:`flowkl_from_likelihoods`: Gaussian KDE (scipy, Scott's rule) of each set's ``{L(D)}``,
   KL(ref || tgt) on ``grid_size=100`` points over the union's range, densities floored at
   ``1e-12``, ``KL = sum p log(p / q) / sum p``.

``compat="sdialog"`` reproduces sdialog 0.5.3's ``KDEDistanceEvaluator(DialogFlowScore(refs))``
(see :mod:`dialfork_metrics.sdialog_compat`): unseen edges included, node confidence on, graph
pruning at 0.001, and ``L(D) = exp(sum log p) ** (1 / (n_turns + 1))``.

Degenerate sets (ours, deterministic): a set whose likelihoods all have the same value has no
Scott-rule KDE (zero variance). Its density is then a Gaussian at that value whose standard
deviation is the one Scott's rule gives for the *union* of both sets
(``n ** (-1/5) * std(union, ddof=1)``, ``n`` the set's size). If the union itself has zero
variance (both sets constant and equal), FlowKL is 0. sdialog instead adds unseeded 1e-8 jitter,
which is not reproducible. A set with fewer than 2 likelihoods raises ``ValueError``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from dialfork_dataset.turns import as_turns

from .pair_encoder import as_encoder, dialogue_name

logger = logging.getLogger(__name__)

START = "[start]"
END = "[end]"
SPEAKERS = ("system", "user")  # sorted, as dialog2flow clusters them
_FORMAT_VERSION = 1


# --------------------------------------------------------------------------------------------
# pure functions over arrays


def _check_matrix(E: Any, name: str = "embeddings") -> np.ndarray:
    E = np.asarray(E)
    if E.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array (n, d), got shape {E.shape}")
    if not np.issubdtype(E.dtype, np.number):
        raise ValueError(f"{name}: expected numbers, got dtype {E.dtype}")
    if E.size and not np.all(np.isfinite(E)):
        bad = np.argwhere(~np.isfinite(E))[0]
        raise ValueError(f"{name}: contains NaN or inf (first at row {bad[0]}, column {bad[1]})")
    return E


def cluster_embeddings(E: Any, distance_threshold: float = 0.55) -> np.ndarray:
    """Agglomerative clustering (scikit-learn, average linkage, cosine distance) cut at
    ``distance_threshold``; returns labels ``(n,)`` in ``0..n_clusters-1``."""
    from sklearn.cluster import AgglomerativeClustering

    E = _check_matrix(E)
    if not (0.0 < float(distance_threshold) <= 2.0):
        raise ValueError(f"distance_threshold must be in (0, 2] (a cosine distance), got {distance_threshold}")
    if E.shape[0] == 0:
        raise ValueError("cannot cluster 0 embeddings")
    if np.any(np.linalg.norm(E, axis=1) == 0):
        raise ValueError("cannot cluster an all-zero embedding (cosine distance undefined)")
    if E.shape[0] == 1:
        return np.zeros(1, dtype=np.int64)
    # The same utterances are often clustered several times in one process (the four streaming
    # detectors of Task 3, a FlowGraph per type of a task): memoise on the exact bytes.
    key = (hashlib.sha1(np.ascontiguousarray(E).view(np.uint8)).hexdigest(), E.shape, E.dtype.str,
           float(distance_threshold))
    hit = _CLUSTER_CACHE.get(key)
    if hit is not None:
        _CLUSTER_CACHE.move_to_end(key)
        return hit.copy()
    model = AgglomerativeClustering(n_clusters=None, metric="cosine", linkage="average",
                                    distance_threshold=float(distance_threshold))
    labels = model.fit(E).labels_.astype(np.int64)
    _CLUSTER_CACHE[key] = labels
    while len(_CLUSTER_CACHE) > _CLUSTER_CACHE_SIZE:
        _CLUSTER_CACHE.popitem(last=False)
    return labels.copy()


_CLUSTER_CACHE: OrderedDict[tuple, np.ndarray] = OrderedDict()
_CLUSTER_CACHE_SIZE = 16


def cluster_tree(E: Any) -> np.ndarray:
    """The full average-linkage dendrogram of ``E`` under cosine distance (SciPy linkage matrix
    ``(n - 1, 4)``), the tree :func:`cluster_embeddings` cuts. Computing it once and cutting it at
    several thresholds with :func:`cut_cluster_tree` costs one clustering instead of one per
    threshold (the Task 3 settings selection sweeps the threshold). scikit-learn's
    ``AgglomerativeClustering(linkage="average", metric="cosine")`` builds the same tree with the
    same SciPy routine, so the cut gives the same partition (tested)."""
    from scipy.cluster.hierarchy import linkage

    E = _check_matrix(E).astype(np.float64, copy=False)
    if E.shape[0] < 2:
        raise ValueError(f"a cluster tree needs at least 2 embeddings, got {E.shape[0]}")
    if np.any(np.linalg.norm(E, axis=1) == 0):
        raise ValueError("cannot cluster an all-zero embedding (cosine distance undefined)")
    # memoised on the exact bytes: the detectors of one benchmark cluster the same utterances at
    # several thresholds (one tree serves them all)
    key = (hashlib.sha1(np.ascontiguousarray(E).view(np.uint8)).hexdigest(), E.shape)
    hit = _TREE_CACHE.get(key)
    if hit is not None:
        _TREE_CACHE.move_to_end(key)
        return hit.copy()
    Z = linkage(E, method="average", metric="cosine")
    _TREE_CACHE[key] = Z
    while len(_TREE_CACHE) > _TREE_CACHE_SIZE:
        _TREE_CACHE.popitem(last=False)
    return Z.copy()


_TREE_CACHE: OrderedDict[tuple, np.ndarray] = OrderedDict()
_TREE_CACHE_SIZE = 64


def cut_cluster_tree(Z: np.ndarray, distance_threshold: float) -> np.ndarray:
    """Labels ``0..k-1`` of the cut of dendrogram ``Z`` (:func:`cluster_tree`) at
    ``distance_threshold``: clusters are merged while their average distance is *below* the
    threshold, as scikit-learn's ``distance_threshold`` does. Labels are numbered by first
    appearance (row order)."""
    from scipy.cluster.hierarchy import fcluster

    if not (0.0 < float(distance_threshold) <= 2.0):
        raise ValueError(f"distance_threshold must be in (0, 2] (a cosine distance), got {distance_threshold}")
    # fcluster merges heights <= t; scikit-learn merges heights < t
    raw = fcluster(Z, np.nextafter(float(distance_threshold), -np.inf), criterion="distance")
    _, first, inv = np.unique(raw, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(first))  # rank of each cluster's first row
    return order[inv].astype(np.int64)


def centroids_from_labels(E: Any, labels: Any) -> np.ndarray:
    """Mean embedding of each cluster, ``(n_nodes, d)`` float64, row ``k`` for label ``k``."""
    E = _check_matrix(E).astype(np.float64, copy=False)
    labels = np.asarray(labels)
    if labels.shape != (E.shape[0],):
        raise ValueError(f"labels shape {labels.shape} does not match {E.shape[0]} embeddings")
    k = int(labels.max()) + 1
    if labels.min() < 0 or len(np.unique(labels)) != k:
        raise ValueError("labels must be 0..k-1 with every label used")
    sums = np.zeros((k, E.shape[1]))
    np.add.at(sums, labels, E)
    return sums / np.bincount(labels, minlength=k)[:, None]


def cosine_similarities(E: Any, centroids: Any) -> np.ndarray:
    """``(n, n_nodes)`` cosine similarities (float64)."""
    E = _check_matrix(E, "embeddings").astype(np.float64, copy=False)
    C = _check_matrix(centroids, "centroids").astype(np.float64, copy=False)
    if E.shape[1] != C.shape[1]:
        raise ValueError(f"embeddings have dimension {E.shape[1]} but centroids {C.shape[1]}")
    En = np.linalg.norm(E, axis=1, keepdims=True)
    Cn = np.linalg.norm(C, axis=1, keepdims=True)
    if np.any(En == 0) or np.any(Cn == 0):
        raise ValueError("cosine similarity of an all-zero vector is undefined")
    return (E / En) @ (C / Cn).T


def nearest_nodes(E: Any, centroids: Any) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid by cosine similarity: ``(idx (n,), sim (n,))``."""
    S = cosine_similarities(E, centroids)
    idx = np.argmax(S, axis=1)
    return idx, S[np.arange(S.shape[0]), idx]


def node_confidence(S: Any, K: int = 64, tau: float = 0.05) -> np.ndarray:
    """Softmax of ``S / tau`` over the ``min(K, n_nodes)`` most similar centroids, taken at the
    nearest one (SPEC section 8; sdialog: ``K=64``, ``tau=0.05``). ``S``: ``(n, n_nodes)``."""
    S = _check_matrix(S, "similarities").astype(np.float64, copy=False)
    if K < 1:
        raise ValueError(f"K must be >= 1, got {K}")
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    k = min(int(K), S.shape[1])
    top = -np.partition(-S, k - 1, axis=1)[:, :k] if k < S.shape[1] else S
    smax = top.max(axis=1, keepdims=True)
    return 1.0 / np.exp((top - smax) / tau).sum(axis=1)


def laplace_probabilities(counts: np.ndarray, vocab_size: int) -> np.ndarray:
    """``(count + 1) / (out + V)`` for every pair of nodes (``out`` = row sum of ``counts``)."""
    counts = np.asarray(counts)
    out = counts.sum(axis=1, keepdims=True)
    return (counts + 1.0) / (out + float(vocab_size))


def _scott_kde(values: np.ndarray, bw_method: Any):
    from scipy.stats import gaussian_kde

    return gaussian_kde(values, bw_method=bw_method)


def flowkl_from_likelihoods(l_ref: Any, l_tgt: Any, *, grid_size: int = 100, density_floor: float = 1e-12,
                            bw_method: Any = None) -> float:
    """KL(p_ref || p_tgt) of the Gaussian KDEs of two sets of per-dialogue likelihoods.

    ``bw_method=None`` is scipy's Scott rule. Grid: ``grid_size`` points over the union's range;
    densities floored at ``density_floor``; ``KL = sum p log(p/q) / sum p``. Zero-variance sets
    get the deterministic fallback of the module docstring. Raises ``ValueError`` naming the set
    for fewer than 2 values, NaN/inf, or a non 1-D input.
    """
    arrays = []
    for name, v in (("reference set", l_ref), ("target set", l_tgt)):
        a = np.asarray(v, dtype=np.float64)
        if a.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array of likelihoods, got shape {a.shape}")
        if a.shape[0] < 2:
            raise ValueError(f"{name}: a density needs at least 2 dialogues, got {a.shape[0]}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name}: likelihoods contain NaN or inf (index {int(np.flatnonzero(~np.isfinite(a))[0])})")
        arrays.append(a)
    if grid_size < 2:
        raise ValueError(f"grid_size must be >= 2, got {grid_size}")
    p1, p2 = arrays
    union = np.concatenate([p1, p2])
    lo, hi = float(union.min()), float(union.max())
    if hi == lo:
        return 0.0
    grid = np.linspace(lo, hi, grid_size)

    def density(a: np.ndarray) -> np.ndarray:
        if np.ptp(a) > 0:
            try:
                return _scott_kde(a, bw_method)(grid)
            except np.linalg.LinAlgError:  # near-zero variance: fall through to the fallback
                pass
        bw = a.shape[0] ** (-1.0 / 5.0) * float(np.std(union, ddof=1))
        logger.info("FlowKL: a set of %d likelihoods has zero variance; Gaussian of std %.3g at %.6g",
                    a.shape[0], bw, float(a.mean()))
        z = (grid[:, None] - a[None, :]) / bw
        return np.exp(-0.5 * z * z).mean(axis=1) / (bw * math.sqrt(2 * math.pi))

    p = np.clip(density(p1), density_floor, None)
    q = np.clip(density(p2), density_floor, None)
    return float(np.sum(p * np.log(p / q)) / np.sum(p))


# --------------------------------------------------------------------------------------------
# input handling


def _prepare_set(dialogues: Any, set_name: str) -> list[list[dict[str, str]]]:
    if isinstance(dialogues, (str, bytes)) or not isinstance(dialogues, Sequence):
        # a datasets.Dataset is not a Sequence but iterates rows
        if hasattr(dialogues, "__iter__") and hasattr(dialogues, "__len__") and not isinstance(dialogues, (str, bytes)):
            dialogues = list(dialogues)
        else:
            raise ValueError(f"{set_name}: expected a list of dialogues, got {type(dialogues).__name__}")
    return [as_turns(d, dialogue_name(d, i, set_name)) for i, d in enumerate(dialogues)]


def _check_set_embeddings(embeddings: Any, sets: list[list[dict[str, str]]], set_name: str,
                          dim: int | None = None) -> list[np.ndarray]:
    if isinstance(embeddings, np.ndarray) or not isinstance(embeddings, Sequence):
        raise ValueError(f"{set_name} embeddings: expected a list with one (n_turns, d) array per dialogue")
    if len(embeddings) != len(sets):
        raise ValueError(f"{set_name} embeddings: {len(embeddings)} arrays for {len(sets)} dialogues")
    out = []
    for i, (E, turns) in enumerate(zip(embeddings, sets)):
        E = _check_matrix(E, f"{set_name} embeddings of dialogue {i}")
        if E.shape[0] != len(turns):
            raise ValueError(f"{set_name} embeddings of dialogue {i}: {E.shape[0]} rows for {len(turns)} turns")
        if dim is None:
            dim = E.shape[1]
        elif E.shape[1] != dim:
            raise ValueError(f"{set_name} embeddings of dialogue {i}: dimension {E.shape[1]}, expected {dim}")
        out.append(E)
    return out


def _encode_sets(encoder: Any, sets: list[list[list[dict[str, str]]]]) -> list[list[np.ndarray]]:
    """One encoder pass over every turn of several sets (the encoder deduplicates)."""
    texts = [t["text"] for s in sets for d in s for t in d]
    E = np.asarray(encoder.encode(texts))
    if E.ndim != 2 or E.shape[0] != len(texts):
        raise ValueError(f"encoder returned shape {E.shape} for {len(texts)} texts")
    out, pos = [], 0
    for s in sets:
        cur = []
        for d in s:
            cur.append(E[pos:pos + len(d)])
            pos += len(d)
        out.append(cur)
    return out


# --------------------------------------------------------------------------------------------
# the graph


class FlowGraph:
    """A dialog flow graph fitted on reference dialogues (SPEC section 7, FlowKL steps 1-2).

    Parameters
    ----------
    encoder:
        ``None`` (packaged MiniLM, loaded on first use), an alias/path, or an
        :class:`~dialfork_metrics.Encoder`. Not needed when every call passes ``embeddings``.
    distance_threshold:
        Cosine distance at which the per-speaker clustering is cut (sdialog/dialog2graph: 0.55).
    self_loops:
        Keep ``n -> n`` edges (default ``False``: removed, as Dialog2Flow does).
    node_prune_threshold, edge_prune_threshold:
        Dialog2Flow's pruning of rare nodes (``fr / max fr``) and edges (``fr / out fr``);
        0 (default) prunes nothing; sdialog's ``DialogFlowScore`` uses 0.001.

    After :meth:`fit`: ``speakers``, ``centroids[speaker]`` ``(n_s, d)``, ``node_names``
    (``"system:3"``, ..., ``"[start]"``, ``"[end]"``; global node id = index), ``counts``
    (edge counts between global ids), ``vocab_size`` ``V``, ``start``/``end`` ids,
    ``node_offset[speaker]`` (global id of the speaker's node 0), ``examples`` (the member
    utterance nearest each centroid).
    """

    def __init__(self, encoder: Any = None, distance_threshold: float = 0.55, *, self_loops: bool = False,
                 node_prune_threshold: float = 0.0, edge_prune_threshold: float = 0.0):
        self._encoder_spec = encoder
        self._encoder = None
        self.distance_threshold = float(distance_threshold)
        self.self_loops = bool(self_loops)
        self.node_prune_threshold = float(node_prune_threshold)
        self.edge_prune_threshold = float(edge_prune_threshold)
        self.speakers: tuple[str, ...] = ()
        self.centroids: dict[str, np.ndarray] = {}
        self.node_names: list[str] = []
        self.node_offset: dict[str, int] = {}
        self.examples: list[str] = []
        self.counts: np.ndarray | None = None
        self.raw_counts: np.ndarray | None = None
        self.node_counts: np.ndarray | None = None
        self.vocab_size = 0
        self.n_dialogues = 0
        self.encoder_name: str | None = None

    # -- encoder ---------------------------------------------------------------------------
    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            self._encoder = as_encoder(self._encoder_spec)
            self.encoder_name = str(getattr(self._encoder, "name", self.encoder_name))
        return self._encoder

    def _embed(self, sets: list[list[dict[str, str]]], embeddings: Any, set_name: str) -> list[np.ndarray]:
        dim = self._dim() if self.counts is not None else None
        if embeddings is not None:
            return _check_set_embeddings(embeddings, sets, set_name, dim)
        E = _encode_sets(self.encoder, [sets])[0]
        if dim is not None and E and E[0].shape[1] != dim:
            raise ValueError(f"{set_name}: the encoder gives dimension {E[0].shape[1]} but the graph was fitted on {dim}")
        return E

    def _dim(self) -> int:
        return next(iter(self.centroids.values())).shape[1]

    # -- fitting ---------------------------------------------------------------------------
    @property
    def start(self) -> int:
        return self.vocab_size

    @property
    def end(self) -> int:
        return self.vocab_size + 1

    def _check_fitted(self) -> None:
        if self.counts is None:
            raise ValueError("this FlowGraph is not fitted: call .fit(reference_dialogues) first")

    def fit(self, dialogues: Any, embeddings: Any = None) -> FlowGraph:
        """Cluster the reference turns per speaker and count the transitions.

        ``embeddings``: optional precomputed ``(n_turns, d)`` array per dialogue (then no encoder
        is used)."""
        sets = _prepare_set(dialogues, "reference set")
        if not sets:
            raise ValueError("reference set: no dialogues to fit the graph on")
        embs = self._embed(sets, embeddings, "reference set")
        if embeddings is None and self._encoder is not None:
            self.encoder_name = str(getattr(self._encoder, "name", None))
        speakers_all = np.array([t["speaker"] for d in sets for t in d])
        texts_all = [t["text"] for d in sets for t in d]
        E_all = np.concatenate(embs, axis=0)
        self.speakers = tuple(s for s in SPEAKERS if np.any(speakers_all == s))
        labels_all = np.full(len(texts_all), -1, dtype=np.int64)
        self.centroids, self.node_offset, names, examples = {}, {}, [], []
        offset = 0
        for sp in self.speakers:
            mask = speakers_all == sp
            E = E_all[mask]
            lab = cluster_embeddings(E, self.distance_threshold)
            C = centroids_from_labels(E, lab)
            self.centroids[sp] = C
            self.node_offset[sp] = offset
            labels_all[mask] = lab + offset
            idx = np.flatnonzero(mask)
            sims = cosine_similarities(E, C)[np.arange(E.shape[0]), lab]
            for k in range(C.shape[0]):
                members = np.flatnonzero(lab == k)
                examples.append(texts_all[idx[members[np.argmax(sims[members])]]])
                names.append(f"{sp}:{k}")
            offset += C.shape[0]
            logger.info("FlowGraph: %d %s turns -> %d nodes", int(mask.sum()), sp, C.shape[0])
        self.vocab_size = offset
        self.node_names = names + [START, END]
        self.examples = examples + ["", ""]
        n = offset + 2
        raw = np.zeros((n, n), dtype=np.int64)
        node_fr = np.zeros(n, dtype=np.int64)
        pos = 0
        for d in sets:
            seq = labels_all[pos:pos + len(d)]
            pos += len(d)
            path = np.concatenate([[self.start], seq, [self.end]])
            np.add.at(raw, (path[:-1], path[1:]), 1)
            np.add.at(node_fr, seq, 1)
        self.raw_counts = raw
        self.node_counts = node_fr
        self.n_dialogues = len(sets)
        self._finish_counts()
        return self

    def _finish_counts(self) -> None:
        raw = self.raw_counts
        if self.node_prune_threshold > 0 or self.edge_prune_threshold > 0:
            from .sdialog_compat import dialog2flow_prune

            counts = dialog2flow_prune(raw, self.node_counts, self.start, self.end,
                                       self.node_prune_threshold, self.edge_prune_threshold)
            if self.self_loops:
                np.fill_diagonal(counts, np.diag(raw))
        else:
            counts = raw.copy()
            if not self.self_loops:
                np.fill_diagonal(counts, 0)
        self.counts = counts
        self._out = counts.sum(axis=1)

    # -- queries ---------------------------------------------------------------------------
    def node_index(self, node: int | str) -> int:
        if isinstance(node, (int, np.integer)):
            if not 0 <= int(node) < len(self.node_names):
                raise ValueError(f"node id {node} out of range 0..{len(self.node_names) - 1}")
            return int(node)
        try:
            return self.node_names.index(node)
        except ValueError:
            raise ValueError(f"unknown node {node!r}; nodes are e.g. {self.node_names[:3]} and [start]/[end]") from None

    def transition_prob(self, a: int | str, b: int | str) -> float:
        """Laplace-smoothed ``P(b | a) = (count(a, b) + 1) / (out(a) + V)``."""
        self._check_fitted()
        i, j = self.node_index(a), self.node_index(b)
        return float((self.counts[i, j] + 1.0) / (self._out[i] + self.vocab_size))

    def is_edge(self, a: int | str, b: int | str) -> bool:
        self._check_fitted()
        return bool(self.counts[self.node_index(a), self.node_index(b)] > 0)

    def _assign(self, sets: list[list[dict[str, str]]], embs: list[np.ndarray], set_name: str,
                K: int = 64, tau: float = 0.05, confidence: bool = True) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Global node ids and node confidences of every turn of a set (batched per speaker)."""
        self._check_fitted()
        speakers = np.array([t["speaker"] for d in sets for t in d])
        for i, d in enumerate(sets):
            for t in d:
                if t["speaker"] not in self.centroids:
                    raise ValueError(
                        f"{set_name} dialogue {i}: speaker {t['speaker']!r} was never seen when fitting the "
                        f"graph (it knows {list(self.speakers)}); fit it on dialogues with {t['speaker']} turns"
                    )
        E = np.concatenate(embs, axis=0) if embs else np.zeros((0, self._dim()))
        if E.shape[0] and E.shape[1] != self._dim():
            raise ValueError(f"{set_name}: embeddings have dimension {E.shape[1]}, the graph {self._dim()}")
        nodes = np.zeros(E.shape[0], dtype=np.int64)
        conf = np.ones(E.shape[0])
        for sp in self.speakers:
            mask = speakers == sp
            if not mask.any():
                continue
            S = cosine_similarities(E[mask], self.centroids[sp])
            nodes[mask] = np.argmax(S, axis=1) + self.node_offset[sp]
            if confidence:
                conf[mask] = node_confidence(S, K, tau)
        out_n, out_c, pos = [], [], 0
        for d in sets:
            out_n.append(nodes[pos:pos + len(d)])
            out_c.append(conf[pos:pos + len(d)])
            pos += len(d)
        return out_n, out_c

    def node_sequence(self, dialogue: Any, embeddings: Any = None) -> list[int]:
        """Global node ids of the turns of one dialogue (no ``[start]``/``[end]``)."""
        return self.node_sequence_with_confidence(dialogue, embeddings, confidence=False)[0]

    def node_sequence_with_confidence(self, dialogue: Any, embeddings: Any = None, K: int = 64, tau: float = 0.05,
                                      confidence: bool = True) -> tuple[list[int], np.ndarray]:
        """Global node ids and node confidences ``c_t`` (:func:`node_confidence`) of one dialogue."""
        seqs, confs = self.node_sequences(
            [dialogue], None if embeddings is None else [embeddings], K=K, tau=tau, confidence=confidence)
        return seqs[0], confs[0]

    def node_sequences(self, dialogues: Any, embeddings: Any = None, K: int = 64, tau: float = 0.05,
                       confidence: bool = True, set_name: str = "set") -> tuple[list[list[int]], list[np.ndarray]]:
        """Batched :meth:`node_sequence_with_confidence` over many dialogues (one encoder pass)."""
        self._check_fitted()
        sets = _prepare_set(dialogues, set_name)
        embs = self._embed(sets, embeddings, set_name)
        n, c = self._assign(sets, embs, set_name, K, tau, confidence)
        return [x.tolist() for x in n], c

    def likelihood(self, dialogue: Any, embeddings: Any = None, **kwargs: Any) -> float:
        """``L(D)`` of one dialogue; keyword arguments as :meth:`likelihoods`."""
        if kwargs.get("no_known_edges") == "drop":
            raise ValueError("no_known_edges='drop' applies to sets (likelihoods); use 'zero' or 'raise' here")
        out = self.likelihoods([dialogue], None if embeddings is None else [embeddings], **kwargs)
        return float(out[0])

    def likelihoods(self, dialogues: Any, embeddings: Any = None, *, use_only_known_edges: bool | None = None,
                    node_confidence: bool | None = None, K: int = 64, tau: float = 0.05, include_end: bool = False,
                    no_known_edges: str = "zero", compat: str | None = None, set_name: str = "set") -> np.ndarray:
        """``L(D)`` for every dialogue of a set (vectorised).

        Defaults: the paper's reading (``use_only_known_edges=True``, ``node_confidence=False``);
        ``compat="sdialog"``: sdialog's (``False``, ``True``) and its ``exp(sum) ** (1/(n+1))``.
        With ``no_known_edges="drop"`` the returned array omits those dialogues.
        """
        self._check_fitted()
        if compat not in (None, "sdialog"):
            raise ValueError(f"unknown compat {compat!r}; expected None or 'sdialog'")
        if no_known_edges not in ("zero", "drop", "raise"):
            raise ValueError(f"no_known_edges must be 'zero', 'drop' or 'raise', got {no_known_edges!r}")
        if compat == "sdialog":
            if include_end:
                raise ValueError("include_end=True is not part of sdialog's score; drop it or compat")
            known_only = False if use_only_known_edges is None else use_only_known_edges
            use_conf = True if node_confidence is None else node_confidence
        else:
            known_only = True if use_only_known_edges is None else use_only_known_edges
            use_conf = False if node_confidence is None else node_confidence
        sets = _prepare_set(dialogues, set_name)
        embs = self._embed(sets, embeddings, set_name)
        nodes, confs = self._assign(sets, embs, set_name, K, tau, use_conf)
        lengths = np.array([len(x) + int(include_end) for x in nodes])
        tail = [self.end] if include_end else []
        seqs = [np.concatenate([[self.start], x, tail]).astype(np.int64) for x in nodes]
        prev = np.concatenate([s[:-1] for s in seqs])
        cur = np.concatenate([s[1:] for s in seqs])
        conf = np.concatenate([np.concatenate([c, [1.0] * int(include_end)]) for c in confs])
        cnt = self.counts[prev, cur]
        known = cnt > 0
        logp = np.log((cnt + 1.0) / (self._out[prev] + float(self.vocab_size)))
        if use_conf:
            logp = logp + np.where(known, np.log(conf), 0.0)
        dlg = np.repeat(np.arange(len(nodes)), lengths)
        n_d = len(nodes)
        if known_only:
            s = np.bincount(dlg, weights=np.where(known, logp, 0.0), minlength=n_d)
            k = np.bincount(dlg, weights=known.astype(float), minlength=n_d)
        else:
            s = np.bincount(dlg, weights=logp, minlength=n_d)
            k = lengths.astype(float)
        if compat == "sdialog":
            from .sdialog_compat import sdialog_flow_score

            return sdialog_flow_score(s, k)
        with np.errstate(divide="ignore", invalid="ignore"):
            L = np.exp(s / k)
        empty = k == 0
        if empty.any():
            idx = np.flatnonzero(empty)
            names = ", ".join(dialogue_name(dialogues[i] if isinstance(dialogues, Sequence) else None, int(i), set_name)
                              for i in idx[:5])
            if no_known_edges == "raise":
                raise ValueError(f"{names}: no transition is an edge of the graph, L(D) is undefined "
                                 "(use no_known_edges='zero' or 'drop', or use_only_known_edges=False)")
            logger.info("%d dialogue(s) of the %s have no known transition (%s): L = %s",
                        len(idx), set_name, names, "dropped" if no_known_edges == "drop" else "0")
            if no_known_edges == "drop":
                return L[~empty]
            L[empty] = 0.0
        return L

    # -- export ----------------------------------------------------------------------------
    def to_networkx(self):
        """A ``networkx.DiGraph`` (nodes: name, speaker, count, example; edges: count, prob)."""
        import networkx as nx

        self._check_fitted()
        G = nx.DiGraph()
        for i, name in enumerate(self.node_names):
            sp = name.split(":")[0] if ":" in name else ""
            G.add_node(name, speaker=sp, count=int(self.node_counts[i]) if i < self.vocab_size else self.n_dialogues,
                       example=self.examples[i])
        for a, b in zip(*np.nonzero(self.counts)):
            G.add_edge(self.node_names[a], self.node_names[b], count=int(self.counts[a, b]),
                       prob=self.transition_prob(int(a), int(b)))
        return G

    def to_graphml(self, path: str | os.PathLike) -> None:
        """Write the graph as GraphML (atomically)."""
        import networkx as nx

        G = self.to_networkx()
        _atomic_write(path, lambda tmp: nx.write_graphml(G, tmp))

    def typical_positions(self) -> np.ndarray:
        """The typical turn position (1-based) of every node, ``[start]`` at 0 and ``[end]`` after the
        last: :func:`expected_turn_positions` of the raw transition counts (self-loops included, as
        they advance the turn)."""
        self._check_fitted()
        pos = expected_turn_positions(self.raw_counts, self.start, self.end)
        pos[self.start] = 0.0
        finite = pos[np.isfinite(pos)]
        pos[self.end] = (finite.max() if finite.size else 0.0) + 1.0
        return pos

    def draw(self, path: str | os.PathLike, max_nodes: int = 40, top_edges: int = 2, label_chars: int = 60,
             dpi: int = 150) -> None:
        """Draw the graph as a workflow (PNG, matplotlib Agg), left to right.

        Nodes: the ``max_nodes`` most visited, placed in columns by their typical turn position
        (:meth:`typical_positions`), ordered within a column to follow their predecessors; each is
        labelled with its most central utterance (the member nearest the centroid, shortened to
        ``label_chars`` characters) and its visit count; user nodes blue, system nodes white.
        Edges: for each node its ``top_edges`` most probable outgoing edges among the drawn nodes,
        width by transition probability. The full graph is in :meth:`to_graphml`.
        """
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        from matplotlib.patches import FancyArrowPatch

        self._check_fitted()
        layout = workflow_layout(self.counts, self.typical_positions(), self.node_counts, self.start, self.end,
                                 max_nodes=max_nodes, top_edges=top_edges)
        xy, edges = layout["xy"], layout["edges"]
        n_cols = max(1, len({x for x, _ in xy.values()}))
        n_rows = max(1, layout["max_column"])
        fig, ax = plt.subplots(figsize=(max(8.0, 1.45 * n_cols), max(4.0, 0.95 * n_rows + 1.5)))
        colours = {"user": "#bbdefb", "system": "#ffffff"}
        boxes = {}
        for i, (x, y) in xy.items():
            name = self.node_names[i]
            if i in (self.start, self.end):
                label, face = name, "#e0e0e0"
            else:
                sp = name.split(":")[0]
                label = f"{_shorten(self.examples[i], label_chars)}\n({sp}, n={int(self.node_counts[i])})"
                face = colours.get(sp, "#e0e0e0")
            boxes[i] = ax.text(x, y, label, ha="center", va="center", fontsize=6.2, zorder=3, wrap=False,
                               bbox={"boxstyle": "round,pad=0.3", "fc": face, "ec": "#424242", "lw": 0.6})
        pmax = max([p for _, _, p in edges] + [1e-9])
        for a, b, prob in edges:
            (xa, ya), (xb, yb) = xy[a], xy[b]
            back = xb < xa
            arrow = FancyArrowPatch((xa, ya), (xb, yb), arrowstyle="-|>", mutation_scale=7,
                                    connectionstyle=f"arc3,rad={0.35 if back or xb == xa else 0.08}",
                                    lw=0.4 + 3.6 * prob / pmax, color="#c62828" if back else "#37474f",
                                    alpha=(0.25 if back else 0.35) + 0.5 * prob / pmax, zorder=1, patchA=boxes[a].get_bbox_patch(),
                                    patchB=boxes[b].get_bbox_patch())
            ax.add_patch(arrow)
        xs = [x for x, _ in xy.values()]
        ys = [y for _, y in xy.values()]
        ax.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
        ax.set_ylim(min(ys) - 0.8, max(ys) + 0.8)
        ax.invert_yaxis()
        ax.set_axis_off()
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(fc=colours["user"], ec="#424242", label="user node"),
                           Patch(fc=colours["system"], ec="#424242", label="system node"),
                           Patch(fc="#37474f", label="edge (width: probability)"),
                           Patch(fc="#c62828", label="edge back to an earlier position")],
                  loc="upper left", bbox_to_anchor=(0.0, -0.01), ncol=4, fontsize=7, frameon=False)
        ax.set_title(f"FlowGraph: {len(xy) - 2} of {self.vocab_size} nodes (most visited), top {top_edges} "
                     f"edges per node, columns by typical turn position ({self.n_dialogues} reference dialogues)",
                     fontsize=9)
        fig.tight_layout()
        try:
            _atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
        finally:
            plt.close(fig)

    def save(self, path: str | os.PathLike) -> None:
        """Save the fitted graph (``.npz``: centroids, counts, names, parameters), atomically."""
        self._check_fitted()
        meta = {"format_version": _FORMAT_VERSION, "distance_threshold": self.distance_threshold,
                "self_loops": self.self_loops, "node_prune_threshold": self.node_prune_threshold,
                "edge_prune_threshold": self.edge_prune_threshold, "speakers": list(self.speakers),
                "node_offset": self.node_offset, "node_names": self.node_names, "examples": self.examples,
                "n_dialogues": self.n_dialogues, "encoder_name": self.encoder_name}
        arrays = {f"centroids_{sp}": self.centroids[sp] for sp in self.speakers}

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                np.savez_compressed(f, meta=np.array(json.dumps(meta)), raw_counts=self.raw_counts,
                                    node_counts=self.node_counts, **arrays)

        _atomic_write(path, write)

    @classmethod
    def load(cls, path: str | os.PathLike, encoder: Any = None) -> FlowGraph:
        """Load a graph written by :meth:`save`. ``encoder``: the encoder to embed new dialogues
        with (default: the one it was fitted with, by name)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                data = {k: z[k] for k in z.files if k != "meta"}
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"{path}: not a FlowGraph file written by FlowGraph.save ({e})") from e
        if meta.get("format_version") != _FORMAT_VERSION:
            raise ValueError(f"{path}: FlowGraph format {meta.get('format_version')}, expected {_FORMAT_VERSION}")
        g = cls(encoder if encoder is not None else meta.get("encoder_name"), meta["distance_threshold"],
                self_loops=meta["self_loops"], node_prune_threshold=meta["node_prune_threshold"],
                edge_prune_threshold=meta["edge_prune_threshold"])
        g.speakers = tuple(meta["speakers"])
        g.node_offset = {k: int(v) for k, v in meta["node_offset"].items()}
        g.node_names = list(meta["node_names"])
        g.examples = list(meta["examples"])
        g.n_dialogues = int(meta["n_dialogues"])
        g.encoder_name = meta.get("encoder_name")
        g.centroids = {sp: data[f"centroids_{sp}"] for sp in g.speakers}
        g.vocab_size = len(g.node_names) - 2
        g.raw_counts = data["raw_counts"]
        g.node_counts = data["node_counts"]
        g._finish_counts()
        return g

    def __repr__(self) -> str:
        if self.counts is None:
            return f"FlowGraph(distance_threshold={self.distance_threshold}, unfitted)"
        return (f"FlowGraph({self.vocab_size} nodes, {int((self.counts > 0).sum())} edges, "
                f"{self.n_dialogues} dialogues, distance_threshold={self.distance_threshold})")


def expected_turn_positions(counts: Any, start: int, end: int, max_steps: int = 1000, tol: float = 1e-9) -> np.ndarray:
    """The expected turn position of each node under the Markov chain of ``counts`` (row-normalised
    transition counts, walked from ``start`` until the mass reaching ``end`` leaves ``tol``):
    ``sum_t t * P(at node at turn t) / sum_t P(at node at turn t)``. A node the walk never reaches
    is ``nan``; ``start`` and ``end`` are ``nan`` (they are not turns).

    >>> c = np.zeros((4, 4)); c[2, 0] = c[0, 1] = c[1, 3] = 1   # start(2) -> 0 -> 1 -> end(3)
    >>> expected_turn_positions(c, 2, 3)[:2].tolist()
    [1.0, 2.0]
    """
    C = np.asarray(counts, dtype=float)
    out = C.sum(axis=1, keepdims=True)
    P = np.divide(C, out, out=np.zeros_like(C), where=out > 0)
    P[end] = 0.0  # absorbed
    pi = np.zeros(C.shape[0])
    pi[start] = 1.0
    mass = np.zeros(C.shape[0])
    tmass = np.zeros(C.shape[0])
    for t in range(1, max_steps + 1):
        pi = pi @ P
        mass += pi
        tmass += t * pi
        live = pi.sum() - pi[end]
        pi[end] = 0.0
        if live < tol:
            break
    pos = np.full(C.shape[0], np.nan)
    ok = mass > 0
    pos[ok] = tmass[ok] / mass[ok]
    pos[[start, end]] = np.nan
    return pos


def workflow_layout(counts: Any, positions: Any, node_counts: Any, start: int, end: int, max_nodes: int = 40,
                    top_edges: int = 2, sweeps: int = 4) -> dict[str, Any]:
    """A layered (Sugiyama-style) layout of a flow graph, as pure data.

    Keeps ``start``, ``end`` and the ``max_nodes`` most visited nodes; column ``x`` = the rounded
    typical position (``positions``, ``start`` at 0), rows within a column ordered by the
    barycentre of each node's kept neighbours in the previous column (``sweeps`` passes, left to
    right), then spread evenly. Edges: each kept node's ``top_edges`` most probable outgoing edges
    (row-normalised ``counts``) whose target is kept. Returns ``{"xy": {node: (x, y)}, "edges":
    [(a, b, prob)], "max_column": size of the largest column}``.
    """
    C = np.asarray(counts, dtype=float)
    pos = np.asarray(positions, dtype=float)
    nc = np.asarray(node_counts)
    cluster_nodes = [i for i in range(C.shape[0]) if i not in (start, end) and np.isfinite(pos[i])]
    keep = sorted(cluster_nodes, key=lambda i: (-int(nc[i]), i))[:max_nodes] + [start, end]
    kept = set(keep)
    out = C.sum(axis=1)
    edges: list[tuple[int, int, float]] = []
    for a in keep:
        if out[a] <= 0:
            continue
        cand = sorted((b for b in np.flatnonzero(C[a]) if int(b) in kept and int(b) != a), key=lambda b: (-C[a, b], b))
        edges += [(a, int(b), float(C[a, b] / out[a])) for b in cand[:top_edges]]
    col = {i: int(round(pos[i])) for i in keep if i not in (start, end)}
    last = max(col.values(), default=0) + 1
    col[start], col[end] = 0, last
    # compact empty columns
    used = sorted(set(col.values()))
    rank = {c: k for k, c in enumerate(used)}
    col = {i: rank[c] for i, c in col.items()}
    columns: dict[int, list[int]] = {}
    for i in sorted(keep, key=lambda i: (-int(nc[i]) if i < len(nc) else 0, i)):
        columns.setdefault(col[i], []).append(i)
    preds: dict[int, list[tuple[int, float]]] = {}
    for a, b, p in edges:
        preds.setdefault(b, []).append((a, p))
    y: dict[int, float] = {}
    for c in sorted(columns):
        for r, i in enumerate(columns[c]):
            y[i] = float(r)
    for _ in range(sweeps):
        for c in sorted(columns)[1:]:
            def bary(i: int, c: int = c) -> float:
                ps = [(y[a], p) for a, p in preds.get(i, []) if col[a] < c]
                return sum(v * p for v, p in ps) / sum(p for _, p in ps) if ps else y[i]
            columns[c].sort(key=lambda i: (bary(i), i))
            for r, i in enumerate(columns[c]):
                y[i] = float(r)
    height = max(len(v) for v in columns.values())
    xy = {}
    for c, nodes in columns.items():
        off = (height - len(nodes)) / 2.0
        for r, i in enumerate(nodes):
            xy[i] = (float(c), off + r)
    return {"xy": xy, "edges": edges, "max_column": height}


def _shorten(text: str, n: int, width: int = 24) -> str:
    """``text`` cut to ``n`` characters at a word boundary (with an ellipsis), wrapped at ``width``."""
    import textwrap

    t = " ".join(str(text).split())
    if len(t) > n:
        t = t[: n - 1].rsplit(" ", 1)[0].rstrip(",.;:") + "…"
    return "\n".join(textwrap.wrap(t, width)) or "(empty)"


def _atomic_write(path: str | os.PathLike, writer) -> None:
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=os.path.splitext(path)[1])
    from dialfork_dataset.jsonl import make_public

    make_public(fd)  # mkstemp's 0600 -> the mode a plain open() would give
    os.close(fd)
    try:
        writer(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------------------------
# set level


def flowkl(ref_set: Any, tgt_set: Any, encoder: Any = None, *, graph: FlowGraph | None = None,
           ref_embeddings: Any = None, tgt_embeddings: Any = None, distance_threshold: float = 0.55,
           use_only_known_edges: bool | None = None, node_confidence: bool | None = None, K: int = 64,
           tau: float = 0.05, include_end: bool = False, self_loops: bool = False, no_known_edges: str = "zero",
           grid_size: int = 100, density_floor: float = 1e-12, bw_method: Any = None, compat: str | None = None,
           return_details: bool = False) -> float | dict:
    """FlowKL(ref_set, tgt_set) = KL(p_ref || p_tgt) of the KDEs of ``L(D)`` (SPEC section 7).

    ``ref_set``/``tgt_set``: lists of dialogues (turn strings, ``{speaker, text}`` dicts or
    records). A graph is fitted on ``ref_set`` unless a fitted ``graph`` is given. Precomputed
    embeddings (one ``(n_turns, d)`` array per dialogue) skip the encoder. ``compat="sdialog"``
    reproduces sdialog 0.5.3 (:mod:`dialfork_metrics.sdialog_compat`). ``return_details=True``
    returns ``{"flowkl", "likelihoods_ref", "likelihoods_tgt", "n_ref", "n_tgt", "graph"}``.
    """
    if compat not in (None, "sdialog"):
        raise ValueError(f"unknown compat {compat!r}; expected None or 'sdialog'")
    ref = _prepare_set(ref_set, "reference set")
    tgt = _prepare_set(tgt_set, "target set")
    for name, s in (("reference set", ref), ("target set", tgt)):
        if len(s) < 2:
            raise ValueError(f"{name}: FlowKL needs a density of at least 2 dialogues, got {len(s)}")
    if graph is None:
        if compat == "sdialog":
            from .sdialog_compat import SDIALOG_EDGE_PRUNE_THRESHOLD, SDIALOG_NODE_PRUNE_THRESHOLD

            graph = FlowGraph(encoder, distance_threshold, self_loops=False,
                              node_prune_threshold=SDIALOG_NODE_PRUNE_THRESHOLD,
                              edge_prune_threshold=SDIALOG_EDGE_PRUNE_THRESHOLD)
        else:
            graph = FlowGraph(encoder, distance_threshold, self_loops=self_loops)
    if ref_embeddings is None or tgt_embeddings is None:
        todo = [s for s, e in ((ref, ref_embeddings), (tgt, tgt_embeddings)) if e is None]
        if graph.counts is not None and graph._encoder is None and graph._encoder_spec is None and encoder is not None:
            graph._encoder_spec = encoder
        enc = graph.encoder
        encoded = _encode_sets(enc, todo)
        if ref_embeddings is None:
            ref_embeddings = encoded.pop(0)
        if tgt_embeddings is None:
            tgt_embeddings = encoded.pop(0)
    if graph.counts is None:
        graph.fit(ref, ref_embeddings)
    opts = dict(use_only_known_edges=use_only_known_edges, node_confidence=node_confidence, K=K, tau=tau,
                include_end=include_end, no_known_edges=no_known_edges, compat=compat)
    l_ref = graph.likelihoods(ref, ref_embeddings, set_name="reference set", **opts)
    l_tgt = graph.likelihoods(tgt, tgt_embeddings, set_name="target set", **opts)
    value = flowkl_from_likelihoods(l_ref, l_tgt, grid_size=grid_size, density_floor=density_floor,
                                    bw_method=bw_method)
    if return_details:
        return {"flowkl": value, "likelihoods_ref": l_ref, "likelihoods_tgt": l_tgt,
                "n_ref": int(l_ref.shape[0]), "n_tgt": int(l_tgt.shape[0]), "graph": graph}
    return value


__all__ = [
    "END",
    "START",
    "FlowGraph",
    "centroids_from_labels",
    "cluster_embeddings",
    "cosine_similarities",
    "flowkl",
    "flowkl_from_likelihoods",
    "laplace_probabilities",
    "nearest_nodes",
    "node_confidence",
]
