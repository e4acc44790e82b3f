"""FlowKL step 2 (SPEC section 7): :class:`FlowGraph`, the dialog flow graph fitted on reference
dialogues, and the likelihood ``L(D)`` of a dialogue under it."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from dialfork_dataset.atomic import atomic_path
from dialfork_dataset.turns import as_turns

from ..pair_encoder import as_encoder, dialogue_name
from .clustering import (
    _check_matrix,
    centroids_from_labels,
    cluster_embeddings,
    cosine_similarities,
    node_confidence,
)
from .drawing import draw_flowgraph, expected_turn_positions, to_networkx

logger = logging.getLogger("dialfork_metrics.flowgraph")

START = "[start]"
END = "[end]"
SPEAKERS = ("system", "user")  # sorted, as dialog2flow clusters them
_FORMAT_VERSION = 1


# --------------------------------------------------------------------------------------------
# input handling


def _prepare_set(dialogues: Any, set_name: str) -> list[list[dict[str, str]]]:
    if isinstance(dialogues, (str, bytes)) or not isinstance(dialogues, Sequence):
        # a datasets.Dataset is not a Sequence but iterates rows
        if (
            hasattr(dialogues, "__iter__")
            and hasattr(dialogues, "__len__")
            and not isinstance(dialogues, (str, bytes))
        ):
            dialogues = list(dialogues)
        else:
            raise ValueError(f"{set_name}: expected a list of dialogues, got {type(dialogues).__name__}")
    return [as_turns(d, dialogue_name(d, i, set_name)) for i, d in enumerate(dialogues)]


def _check_set_embeddings(
    embeddings: Any, sets: list[list[dict[str, str]]], set_name: str, dim: int | None = None
) -> list[np.ndarray]:
    if isinstance(embeddings, np.ndarray) or not isinstance(embeddings, Sequence):
        raise ValueError(f"{set_name} embeddings: expected a list with one (n_turns, d) array per dialogue")
    if len(embeddings) != len(sets):
        raise ValueError(f"{set_name} embeddings: {len(embeddings)} arrays for {len(sets)} dialogues")
    out = []
    for i, (E, turns) in enumerate(zip(embeddings, sets)):
        E = _check_matrix(E, f"{set_name} embeddings of dialogue {i}")
        if E.shape[0] != len(turns):
            raise ValueError(
                f"{set_name} embeddings of dialogue {i}: {E.shape[0]} rows for {len(turns)} turns"
            )
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
            cur.append(E[pos : pos + len(d)])
            pos += len(d)
        out.append(cur)
    return out


# --------------------------------------------------------------------------------------------
# the graph


class FlowGraph:
    """A dialog flow graph fitted on reference dialogues (SPEC section 7, FlowKL steps 1-2).

    Args:
        encoder: ``None`` (packaged MiniLM, loaded on first use), an alias/path, or an
            :class:`~dialfork_metrics.Encoder`. Not needed when every call passes ``embeddings``.
        distance_threshold: Cosine distance at which the per-speaker clustering is cut, in
            (0, 2] (sdialog/dialog2graph: 0.55); checked when fitting.
        self_loops: Keep ``n -> n`` edges (default ``False``: removed, as Dialog2Flow does).
        node_prune_threshold: Dialog2Flow's pruning of rare nodes (``fr / max fr`` below it);
            0 (default) prunes nothing; sdialog's ``DialogFlowScore`` uses 0.001.
        edge_prune_threshold: Dialog2Flow's pruning of rare edges (``fr / out fr`` below it);
            0 (default) prunes nothing; sdialog uses 0.001.

    After :meth:`fit`: ``speakers``, ``centroids[speaker]`` ``(n_s, d)``, ``node_names``
    (``"system:3"``, ..., ``"[start]"``, ``"[end]"``; global node id = index), ``counts``
    (edge counts between global ids), ``vocab_size`` ``V``, ``start``/``end`` ids,
    ``node_offset[speaker]`` (global id of the speaker's node 0), ``examples`` (the member
    utterance nearest each centroid).
    """

    def __init__(
        self,
        encoder: Any = None,
        distance_threshold: float = 0.55,
        *,
        self_loops: bool = False,
        node_prune_threshold: float = 0.0,
        edge_prune_threshold: float = 0.0,
    ):
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
        """The encoder, built from the constructor's ``encoder`` on first use."""
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
            raise ValueError(
                f"{set_name}: the encoder gives dimension {E[0].shape[1]} but the graph was fitted on {dim}"
            )
        return E

    def _dim(self) -> int:
        return next(iter(self.centroids.values())).shape[1]

    # -- fitting ---------------------------------------------------------------------------
    @property
    def start(self) -> int:
        """Global id of the ``[start]`` node (``vocab_size``)."""
        return self.vocab_size

    @property
    def end(self) -> int:
        """Global id of the ``[end]`` node (``vocab_size + 1``)."""
        return self.vocab_size + 1

    def _check_fitted(self) -> None:
        if self.counts is None:
            raise ValueError("this FlowGraph is not fitted: call .fit(reference_dialogues) first")

    def fit(self, dialogues: Any, embeddings: Any = None) -> FlowGraph:
        """Cluster the reference turns per speaker and count the transitions.

        ``embeddings``: optional precomputed ``(n_turns, d)`` array per dialogue (then no encoder
        is used).

        Args:
            dialogues: The reference set: a non-empty list (or ``datasets.Dataset``) of dialogues
                (records, lists of ``{"speaker", "text"}`` dicts, or lists of turn strings).
            embeddings: One ``(n_turns, d)`` array per dialogue, or None to encode the turns.

        Returns:
            The graph itself, fitted.

        Raises:
            ValueError: The set is empty or not a list of dialogues, a dialogue is malformed, the
                embeddings do not match the turns, or the clustering rejects them (bad
                ``distance_threshold``, NaN or all-zero embeddings).
        """
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
            seq = labels_all[pos : pos + len(d)]
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
            from ..sdialog_compat import dialog2flow_prune

            counts = dialog2flow_prune(
                raw,
                self.node_counts,
                self.start,
                self.end,
                self.node_prune_threshold,
                self.edge_prune_threshold,
            )
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
        """The global id of a node given by id or by name.

        Args:
            node: A global id, or a name such as ``"system:3"``, ``"[start]"`` or ``"[end]"``.

        Returns:
            The global id.

        Raises:
            ValueError: The id is out of range or the name unknown.
        """
        if isinstance(node, (int, np.integer)):
            if not 0 <= int(node) < len(self.node_names):
                raise ValueError(f"node id {node} out of range 0..{len(self.node_names) - 1}")
            return int(node)
        try:
            return self.node_names.index(node)
        except ValueError:
            raise ValueError(
                f"unknown node {node!r}; nodes are e.g. {self.node_names[:3]} and [start]/[end]"
            ) from None

    def transition_prob(self, a: int | str, b: int | str) -> float:
        """Laplace-smoothed ``P(b | a) = (count(a, b) + 1) / (out(a) + V)``.

        Args:
            a: The source node (id or name).
            b: The target node (id or name).

        Returns:
            The probability, in (0, 1].

        Raises:
            ValueError: The graph is not fitted, or a node is unknown.
        """
        self._check_fitted()
        i, j = self.node_index(a), self.node_index(b)
        return float((self.counts[i, j] + 1.0) / (self._out[i] + self.vocab_size))

    def is_edge(self, a: int | str, b: int | str) -> bool:
        """Whether ``a -> b`` was seen in the reference set (after pruning and self-loop removal).

        Args:
            a: The source node (id or name).
            b: The target node (id or name).

        Returns:
            True when the edge's count is positive.

        Raises:
            ValueError: The graph is not fitted, or a node is unknown.
        """
        self._check_fitted()
        return bool(self.counts[self.node_index(a), self.node_index(b)] > 0)

    def _assign(
        self,
        sets: list[list[dict[str, str]]],
        embs: list[np.ndarray],
        set_name: str,
        K: int = 64,
        tau: float = 0.05,
        confidence: bool = True,
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
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
            out_n.append(nodes[pos : pos + len(d)])
            out_c.append(conf[pos : pos + len(d)])
            pos += len(d)
        return out_n, out_c

    def node_sequence(self, dialogue: Any, embeddings: Any = None) -> list[int]:
        """Global node ids of the turns of one dialogue (no ``[start]``/``[end]``).

        Args:
            dialogue: A dialogue: a record, a list of ``{"speaker", "text"}`` dicts or a list of turn strings.
            embeddings: Its ``(n_turns, d)`` embeddings, or None to encode it.

        Returns:
            One global node id per turn: the nearest centroid of the turn's speaker.

        Raises:
            ValueError: As :meth:`node_sequences`.
        """
        return self.node_sequence_with_confidence(dialogue, embeddings, confidence=False)[0]

    def node_sequence_with_confidence(
        self, dialogue: Any, embeddings: Any = None, K: int = 64, tau: float = 0.05, confidence: bool = True
    ) -> tuple[list[int], np.ndarray]:
        """Global node ids and node confidences ``c_t`` (:func:`node_confidence`) of one dialogue.

        Args:
            dialogue: A dialogue: a record, a list of ``{"speaker", "text"}`` dicts or a list of turn strings.
            embeddings: Its ``(n_turns, d)`` embeddings, or None to encode it.
            K: Centroids in the confidence's softmax.
            tau: Softmax temperature.
            confidence: Compute the confidences (else they are all 1.0).

        Returns:
            ``(nodes, conf)``: a list of global node ids and an array of shape ``(n_turns,)``.

        Raises:
            ValueError: As :meth:`node_sequences`.
        """
        seqs, confs = self.node_sequences(
            [dialogue], None if embeddings is None else [embeddings], K=K, tau=tau, confidence=confidence
        )
        return seqs[0], confs[0]

    def node_sequences(
        self,
        dialogues: Any,
        embeddings: Any = None,
        K: int = 64,
        tau: float = 0.05,
        confidence: bool = True,
        set_name: str = "set",
    ) -> tuple[list[list[int]], list[np.ndarray]]:
        """Batched :meth:`node_sequence_with_confidence` over many dialogues (one encoder pass).

        Args:
            dialogues: A list of dialogues.
            embeddings: One ``(n_turns, d)`` array per dialogue, or None to encode them.
            K: Centroids in the confidence's softmax.
            tau: Softmax temperature.
            confidence: Compute the confidences (else they are all 1.0).
            set_name: Name of the set in error messages.

        Returns:
            ``(nodes, confs)``: one list of global node ids and one confidence array per dialogue.

        Raises:
            ValueError: The graph is not fitted, the set or a dialogue is malformed, the
                embeddings do not match, or a speaker was never seen when fitting.
        """
        self._check_fitted()
        sets = _prepare_set(dialogues, set_name)
        embs = self._embed(sets, embeddings, set_name)
        n, c = self._assign(sets, embs, set_name, K, tau, confidence)
        return [x.tolist() for x in n], c

    def likelihood(self, dialogue: Any, embeddings: Any = None, **kwargs: Any) -> float:
        """``L(D)`` of one dialogue; keyword arguments as :meth:`likelihoods`.

        Args:
            dialogue: A dialogue: a record, a list of ``{"speaker", "text"}`` dicts or a list of turn strings.
            embeddings: Its ``(n_turns, d)`` embeddings, or None to encode it.
            **kwargs: Options of :meth:`likelihoods` (``no_known_edges="drop"`` is refused).

        Returns:
            ``L(D)`` as a float.

        Raises:
            ValueError: ``no_known_edges="drop"``, or as :meth:`likelihoods`.
        """
        if kwargs.get("no_known_edges") == "drop":
            raise ValueError(
                "no_known_edges='drop' applies to sets (likelihoods); use 'zero' or 'raise' here"
            )
        out = self.likelihoods([dialogue], None if embeddings is None else [embeddings], **kwargs)
        return float(out[0])

    def likelihoods(
        self,
        dialogues: Any,
        embeddings: Any = None,
        *,
        use_only_known_edges: bool | None = None,
        node_confidence: bool | None = None,
        K: int = 64,
        tau: float = 0.05,
        include_end: bool = False,
        no_known_edges: str = "zero",
        compat: str | None = None,
        set_name: str = "set",
    ) -> np.ndarray:
        """``L(D)`` for every dialogue of a set (vectorised).

        Defaults: the paper's reading (``use_only_known_edges=True``, ``node_confidence=False``);
        ``compat="sdialog"``: sdialog's (``False``, ``True``) and its ``exp(sum) ** (1/(n+1))``.
        With ``no_known_edges="drop"`` the returned array omits those dialogues.

        Args:
            dialogues: A list of dialogues.
            embeddings: One ``(n_turns, d)`` array per dialogue, or None to encode them.
            use_only_known_edges: Average the log-probabilities over the transitions that are
                edges of the graph only; None: per ``compat``.
            node_confidence: Add ``log c_t`` to each known transition's log-probability; None:
                per ``compat``.
            K: Centroids in the node confidence's softmax.
            tau: Its temperature.
            include_end: Count the final transition to ``[end]`` (not with ``compat="sdialog"``).
            no_known_edges: A dialogue with no known transition (its mean undefined): ``"zero"``
                (L = 0), ``"drop"`` (omitted from the result) or ``"raise"``.
            compat: None (the paper's reading) or ``"sdialog"``.
            set_name: Name of the set in error messages and logs.

        Returns:
            ``L(D)`` per dialogue, shape ``(n,)`` (fewer with ``"drop"``), float64: the geometric
            mean of the transition probabilities (sdialog's formula with ``compat="sdialog"``).

        Raises:
            ValueError: An unknown ``compat`` or ``no_known_edges``, ``include_end`` with
                ``compat="sdialog"``, a dialogue without known transition under ``"raise"``, or as
                :meth:`node_sequences`.
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
            from ..sdialog_compat import sdialog_flow_score

            return sdialog_flow_score(s, k)
        with np.errstate(divide="ignore", invalid="ignore"):
            L = np.exp(s / k)
        empty = k == 0
        if empty.any():
            idx = np.flatnonzero(empty)
            names = ", ".join(
                dialogue_name(dialogues[i] if isinstance(dialogues, Sequence) else None, int(i), set_name)
                for i in idx[:5]
            )
            if no_known_edges == "raise":
                raise ValueError(
                    f"{names}: no transition is an edge of the graph, L(D) is undefined "
                    "(use no_known_edges='zero' or 'drop', or use_only_known_edges=False)"
                )
            logger.info(
                "%d dialogue(s) of the %s have no known transition (%s): L = %s",
                len(idx),
                set_name,
                names,
                "dropped" if no_known_edges == "drop" else "0",
            )
            if no_known_edges == "drop":
                return L[~empty]
            L[empty] = 0.0
        return L

    # -- export ----------------------------------------------------------------------------
    def to_networkx(self):
        """A ``networkx.DiGraph`` (nodes: name, speaker, count, example; edges: count, prob).

        Returns:
            The ``networkx.DiGraph`` (needs networkx).
        """
        return to_networkx(self)

    def to_graphml(self, path: str | os.PathLike) -> None:
        """Write the graph as GraphML (atomically).

        Args:
            path: The ``.graphml`` file to write.
        """
        import networkx as nx

        G = self.to_networkx()
        with atomic_path(path, suffix=".graphml") as tmp:
            nx.write_graphml(G, tmp)

    def typical_positions(self) -> np.ndarray:
        """The typical turn position (1-based) of every node, ``[start]`` at 0 and ``[end]`` after the
        last: :func:`expected_turn_positions` of the raw transition counts (self-loops included, as
        they advance the turn).

        Returns:
            One position per global node id, shape ``(vocab_size + 2,)``, float64; ``nan`` for a
            node the walk never reaches.

        Raises:
            ValueError: The graph is not fitted.
        """
        self._check_fitted()
        pos = expected_turn_positions(self.raw_counts, self.start, self.end)
        pos[self.start] = 0.0
        finite = pos[np.isfinite(pos)]
        pos[self.end] = (finite.max() if finite.size else 0.0) + 1.0
        return pos

    def draw(
        self,
        path: str | os.PathLike,
        max_nodes: int = 40,
        top_edges: int = 2,
        label_chars: int = 60,
        dpi: int = 150,
        max_per_column: int | None = 5,
        orientation: str = "vertical",
    ) -> None:
        """Draw the graph as a workflow (PNG): :func:`~dialfork_metrics.flowgraph.drawing.draw_flowgraph`.

        Args:
            path: The PNG file to write.
            max_nodes: Most cluster nodes drawn (the most visited).
            top_edges: Most outgoing edges drawn per node.
            label_chars: Characters of each node's example utterance shown.
            dpi: Image resolution.
            max_per_column: Most nodes drawn at one turn position; None: no limit.
            orientation: ``"vertical"`` (top to bottom, fits page width) or ``"horizontal"``.
        """
        draw_flowgraph(
            self,
            path,
            max_nodes=max_nodes,
            top_edges=top_edges,
            label_chars=label_chars,
            dpi=dpi,
            max_per_column=max_per_column,
            orientation=orientation,
        )

    def save(self, path: str | os.PathLike) -> None:
        """Save the fitted graph (``.npz``: centroids, counts, names, parameters), atomically.

        Args:
            path: The file to write (``.npz`` advised); read back with :meth:`load`.

        Raises:
            ValueError: The graph is not fitted.
        """
        self._check_fitted()
        meta = {
            "format_version": _FORMAT_VERSION,
            "distance_threshold": self.distance_threshold,
            "self_loops": self.self_loops,
            "node_prune_threshold": self.node_prune_threshold,
            "edge_prune_threshold": self.edge_prune_threshold,
            "speakers": list(self.speakers),
            "node_offset": self.node_offset,
            "node_names": self.node_names,
            "examples": self.examples,
            "n_dialogues": self.n_dialogues,
            "encoder_name": self.encoder_name,
        }
        arrays = {f"centroids_{sp}": self.centroids[sp] for sp in self.speakers}

        with atomic_path(path, suffix=os.path.splitext(os.fspath(path))[1]) as tmp, open(tmp, "wb") as f:
            np.savez_compressed(
                f,
                meta=np.array(json.dumps(meta)),
                raw_counts=self.raw_counts,
                node_counts=self.node_counts,
                **arrays,
            )

    @classmethod
    def load(cls, path: str | os.PathLike, encoder: Any = None) -> FlowGraph:
        """Load a graph written by :meth:`save`. ``encoder``: the encoder to embed new dialogues
        with (default: the one it was fitted with, by name).

        Args:
            path: A file written by :meth:`save`.
            encoder: Encoder for new dialogues; None: the saved encoder name (loaded on first use).

        Returns:
            The fitted :class:`FlowGraph`.

        Raises:
            ValueError: The file is not a FlowGraph file, or has another format version.
        """
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                data = {k: z[k] for k in z.files if k != "meta"}
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"{path}: not a FlowGraph file written by FlowGraph.save ({e})") from e
        if meta.get("format_version") != _FORMAT_VERSION:
            raise ValueError(
                f"{path}: FlowGraph format {meta.get('format_version')}, expected {_FORMAT_VERSION}"
            )
        g = cls(
            encoder if encoder is not None else meta.get("encoder_name"),
            meta["distance_threshold"],
            self_loops=meta["self_loops"],
            node_prune_threshold=meta["node_prune_threshold"],
            edge_prune_threshold=meta["edge_prune_threshold"],
        )
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
        return (
            f"FlowGraph({self.vocab_size} nodes, {int((self.counts > 0).sum())} edges, "
            f"{self.n_dialogues} dialogues, distance_threshold={self.distance_threshold})"
        )
