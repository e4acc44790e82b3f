"""FlowKL at the set level (SPEC section 7): fit a graph on the reference set, compare the KDEs."""

from __future__ import annotations

from typing import Any

from .graph import FlowGraph, _encode_sets, _prepare_set
from .kde import flowkl_from_likelihoods


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

    Args:
        ref_set: The reference set D+ (at least 2 dialogues).
        tgt_set: The target set (at least 2 dialogues).
        encoder: Encoder name, path or object (:class:`FlowGraph`); None: the packaged MiniLM
            (or a given ``graph``'s encoder). Unused when both embeddings are given.
        graph: A fitted :class:`FlowGraph` to use instead of fitting one on ``ref_set`` (an
            unfitted one is fitted).
        ref_embeddings: One ``(n_turns, d)`` array per reference dialogue; None: encoded.
        tgt_embeddings: One ``(n_turns, d)`` array per target dialogue; None: encoded.
        distance_threshold: Cosine distance at which the graph's clustering is cut (new graph only).
        use_only_known_edges: As :meth:`FlowGraph.likelihoods`.
        node_confidence: As :meth:`FlowGraph.likelihoods`.
        K: Centroids in the node confidence's softmax.
        tau: Its temperature.
        include_end: Count the final transition to ``[end]``.
        self_loops: Keep self-loops in a new graph (ignored with ``compat="sdialog"``).
        no_known_edges: ``"zero"``, ``"drop"`` or ``"raise"`` (:meth:`FlowGraph.likelihoods`).
        grid_size: KDE grid points (:func:`flowkl_from_likelihoods`).
        density_floor: Least density on the grid.
        bw_method: KDE bandwidth; None: Scott's rule.
        compat: None (the paper's reading) or ``"sdialog"`` (sdialog 0.5.3's graph pruning and score).
        return_details: Return the details dict instead of the value.

    Returns:
        FlowKL as a float (>= 0, lower is closer), or with ``return_details`` the dict above
        (the likelihoods as float64 arrays, ``graph`` the fitted graph).

    Raises:
        ValueError: An unknown ``compat``, a set with fewer than 2 dialogues or malformed, bad
            embeddings, or as :meth:`FlowGraph.fit`, :meth:`FlowGraph.likelihoods` and
            :func:`flowkl_from_likelihoods` (e.g. fewer than 2 likelihoods left after ``"drop"``).
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
            from ..sdialog_compat import SDIALOG_EDGE_PRUNE_THRESHOLD, SDIALOG_NODE_PRUNE_THRESHOLD

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


