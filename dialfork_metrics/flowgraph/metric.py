"""FlowKL at the set level (SPEC section 7): fit a graph on the reference set, compare the KDEs."""

from __future__ import annotations

from typing import Any

from .graph import FlowGraph, _encode_sets, _prepare_set
from .kde import flowkl_from_likelihoods


def flowkl(
    ref_set: Any,
    tgt_set: Any,
    encoder: Any = None,
    *,
    graph: FlowGraph | None = None,
    ref_embeddings: Any = None,
    tgt_embeddings: Any = None,
    distance_threshold: float = 0.55,
    use_only_known_edges: bool | None = None,
    node_confidence: bool | None = None,
    K: int = 64,
    tau: float = 0.05,
    include_end: bool = False,
    self_loops: bool = False,
    no_known_edges: str = "zero",
    grid_size: int = 100,
    density_floor: float = 1e-12,
    bw_method: Any = None,
    compat: str | None = None,
    return_details: bool = False,
) -> float | dict:
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

            graph = FlowGraph(
                encoder,
                distance_threshold,
                self_loops=False,
                node_prune_threshold=SDIALOG_NODE_PRUNE_THRESHOLD,
                edge_prune_threshold=SDIALOG_EDGE_PRUNE_THRESHOLD,
            )
        else:
            graph = FlowGraph(encoder, distance_threshold, self_loops=self_loops)
    if ref_embeddings is None or tgt_embeddings is None:
        todo = [s for s, e in ((ref, ref_embeddings), (tgt, tgt_embeddings)) if e is None]
        if (
            graph.counts is not None
            and graph._encoder is None
            and graph._encoder_spec is None
            and encoder is not None
        ):
            graph._encoder_spec = encoder
        enc = graph.encoder
        encoded = _encode_sets(enc, todo)
        if ref_embeddings is None:
            ref_embeddings = encoded.pop(0)
        if tgt_embeddings is None:
            tgt_embeddings = encoded.pop(0)
    if graph.counts is None:
        graph.fit(ref, ref_embeddings)
    opts = dict(
        use_only_known_edges=use_only_known_edges,
        node_confidence=node_confidence,
        K=K,
        tau=tau,
        include_end=include_end,
        no_known_edges=no_known_edges,
        compat=compat,
    )
    l_ref = graph.likelihoods(ref, ref_embeddings, set_name="reference set", **opts)
    l_tgt = graph.likelihoods(tgt, tgt_embeddings, set_name="target set", **opts)
    value = flowkl_from_likelihoods(
        l_ref, l_tgt, grid_size=grid_size, density_floor=density_floor, bw_method=bw_method
    )
    if return_details:
        return {
            "flowkl": value,
            "likelihoods_ref": l_ref,
            "likelihoods_tgt": l_tgt,
            "n_ref": int(l_ref.shape[0]),
            "n_tgt": int(l_tgt.shape[0]),
            "graph": graph,
        }
    return value


#: Fewest dialogues of each set for which :func:`flowkl_crossfit` gives a value: below them a KDE
#: of per-dialogue likelihoods says more about the draw than about the agent (the audit shows
#: "n/a" and the reason instead).
MIN_CROSSFIT_REFERENCE = 10
MIN_CROSSFIT_TARGET = 5


def crossfit_likelihoods(
    ref_set: Any,
    tgt_set: Any,
    encoder: Any = None,
    *,
    folds: int = 5,
    seed: int = 0,
    distance_threshold: float = 0.55,
    use_only_known_edges: bool = False,
    ref_embeddings: Any = None,
    tgt_embeddings: Any = None,
) -> dict[str, Any]:
    """Likelihoods ``L(D)`` of a reference set and a target set drawn the same way: every one
    scored by a graph that was not fitted on it.

    The reference is cut into ``folds`` folds (a seeded permutation); for each fold a
    :class:`FlowGraph` is fitted on the other folds, and scores the fold's reference dialogues and
    every target dialogue. In-sample reference likelihoods (the graph fitted on the very dialogues
    it scores) are higher than any new conformant dialogue's, so that even a perfect agent would
    differ from its reference; cross-fitted ones are not.

    Args:
        ref_set: The reference dialogues (at least ``folds`` of them, and 2).
        tgt_set: The target dialogues (at least 1).
        encoder: As :func:`flowkl`; unused when both embeddings are given.
        folds: Number of folds (>= 2; capped at the reference's size).
        seed: Seed of the fold assignment.
        distance_threshold: The graphs' clustering cut.
        use_only_known_edges: As :meth:`FlowGraph.likelihoods`; False (default here): a transition
            the fold's graph never saw counts with its smoothed probability, so an agent that
            leaves the workflow lowers its likelihood (with True those transitions are skipped).
        ref_embeddings: One ``(n_turns, d)`` array per reference dialogue; None: encoded.
        tgt_embeddings: One ``(n_turns, d)`` array per target dialogue; None: encoded.

    Returns:
        dict: ``likelihoods_ref`` (one per reference dialogue, shape ``(n_ref,)``),
        ``likelihoods_tgt`` (shape ``(folds, n_tgt)``: each target dialogue under each fold's
        graph), ``folds`` (the number used).

    Raises:
        ValueError: Fewer than 2 reference dialogues or no target dialogue, ``folds < 2``, or as
            :meth:`FlowGraph.fit` and :meth:`FlowGraph.likelihoods`.
    """
    import numpy as np

    ref = _prepare_set(ref_set, "reference set")
    tgt = _prepare_set(tgt_set, "target set")
    if len(ref) < 2:
        raise ValueError(f"reference set: cross-fitting needs at least 2 dialogues, got {len(ref)}")
    if not tgt:
        raise ValueError("target set: no dialogue")
    if not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds must be an integer >= 2, got {folds!r}")
    folds = min(folds, len(ref))
    if ref_embeddings is None or tgt_embeddings is None:
        enc = FlowGraph(encoder).encoder
        todo = [s for s, e in ((ref, ref_embeddings), (tgt, tgt_embeddings)) if e is None]
        encoded = _encode_sets(enc, todo)
        ref_embeddings = encoded.pop(0) if ref_embeddings is None else ref_embeddings
        tgt_embeddings = encoded.pop(0) if tgt_embeddings is None else tgt_embeddings
    order = np.random.default_rng(seed).permutation(len(ref))
    fold_of = np.empty(len(ref), dtype=np.int64)
    fold_of[order] = np.arange(len(ref)) % folds
    l_ref = np.empty(len(ref), dtype=np.float64)
    l_tgt = np.empty((folds, len(tgt)), dtype=np.float64)
    opts = {"use_only_known_edges": use_only_known_edges}
    for j in range(folds):
        fit = [i for i in range(len(ref)) if fold_of[i] != j]
        held = [i for i in range(len(ref)) if fold_of[i] == j]
        graph = FlowGraph(encoder, distance_threshold).fit(
            [ref[i] for i in fit], [ref_embeddings[i] for i in fit]
        )
        l_ref[held] = graph.likelihoods(
            [ref[i] for i in held], [ref_embeddings[i] for i in held], set_name="reference set", **opts
        )
        l_tgt[j] = graph.likelihoods(tgt, tgt_embeddings, set_name="target set", **opts)
    return {"likelihoods_ref": l_ref, "likelihoods_tgt": l_tgt, "folds": folds}


def flowkl_crossfit(
    ref_set: Any,
    tgt_set: Any,
    encoder: Any = None,
    *,
    folds: int = 5,
    seed: int = 0,
    distance_threshold: float = 0.55,
    use_only_known_edges: bool = False,
    n_boot: int = 1000,
    confidence: float = 0.95,
    min_ref: int = MIN_CROSSFIT_REFERENCE,
    min_tgt: int = MIN_CROSSFIT_TARGET,
    ref_embeddings: Any = None,
    tgt_embeddings: Any = None,
) -> dict[str, Any]:
    """FlowKL for a small target set, as the agent audit reports it (SPEC section 10, ours): the
    reference and the target drawn comparably, one smoothing for both, never negative, with a
    bootstrap interval, and no value where the sets are too small to carry one.

    1. Likelihoods: :func:`crossfit_likelihoods` (every dialogue scored by a graph not fitted on
       it; unseen transitions counted, so leaving the workflow lowers ``L``).
    2. Divergence: :func:`~dialfork_metrics.flowgraph.kde.kl_shared_bandwidth` of the reference's
       likelihoods and the target's (each target dialogue's ``folds`` values weighted
       ``1/folds``): ``KL(p_ref || p_tgt) >= 0``, 0 for the same values.
    3. Interval: a percentile bootstrap (``n_boot`` resamples of the reference dialogues and,
       independently, of the target dialogues; the graphs are kept).

    Below ``min_ref`` reference or ``min_tgt`` target dialogues nothing is estimated: ``flowkl``
    is None and ``note`` says why.

    Args:
        ref_set: The reference (conformant) dialogues.
        tgt_set: The dialogues to compare with them (e.g. an agent's).
        encoder: As :func:`flowkl`; unused when both embeddings are given.
        folds: Cross-fitting folds.
        seed: Seed of the folds and of the bootstrap.
        distance_threshold: The graphs' clustering cut.
        use_only_known_edges: As :func:`crossfit_likelihoods` (default False).
        n_boot: Bootstrap resamples (0: no interval).
        confidence: The interval's coverage, in (0, 1).
        min_ref: Fewest reference dialogues for a value.
        min_tgt: Fewest target dialogues for a value.
        ref_embeddings: One ``(n_turns, d)`` array per reference dialogue; None: encoded.
        tgt_embeddings: One ``(n_turns, d)`` array per target dialogue; None: encoded.

    Returns:
        dict: ``flowkl`` (float >= 0, or None), ``ci_low``/``ci_high`` (None without an
        interval), ``n_ref``, ``n_tgt``, ``folds``, ``confidence`` and ``note`` (None, or why there
        is no value).

    Raises:
        ValueError: Bad ``n_boot``, ``confidence``, ``min_ref``/``min_tgt``, or as
            :func:`crossfit_likelihoods`.
    """
    import numpy as np

    from .kde import kl_shared_bandwidth

    if not isinstance(n_boot, int) or n_boot < 0:
        raise ValueError(f"n_boot must be an integer >= 0, got {n_boot!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if min_ref < 2 or min_tgt < 1:
        raise ValueError(f"min_ref must be >= 2 and min_tgt >= 1, got {min_ref} and {min_tgt}")
    n_ref, n_tgt = len(_prepare_set(ref_set, "reference set")), len(_prepare_set(tgt_set, "target set"))
    out: dict[str, Any] = {
        "flowkl": None,
        "ci_low": None,
        "ci_high": None,
        "n_ref": n_ref,
        "n_tgt": n_tgt,
        "folds": None,
        "confidence": confidence,
        "note": None,
    }
    short = [
        f"{n} {what} dialogues, fewer than {least}"
        for n, what, least in ((n_ref, "reference", min_ref), (n_tgt, "target", min_tgt))
        if n < least
    ]
    if short:
        out["note"] = "not estimated: " + " and ".join(short)
        return out
    lik = crossfit_likelihoods(
        ref_set,
        tgt_set,
        encoder,
        folds=folds,
        seed=seed,
        distance_threshold=distance_threshold,
        use_only_known_edges=use_only_known_edges,
        ref_embeddings=ref_embeddings,
        tgt_embeddings=tgt_embeddings,
    )
    l_ref, l_tgt, k = lik["likelihoods_ref"], lik["likelihoods_tgt"], lik["folds"]

    def kl(ref_idx: np.ndarray, tgt_idx: np.ndarray) -> float:
        values = l_tgt[:, tgt_idx].ravel()
        return kl_shared_bandwidth(l_ref[ref_idx], values, tgt_weights=np.full(values.shape[0], 1.0 / k))

    out["folds"] = k
    out["flowkl"] = kl(np.arange(n_ref), np.arange(n_tgt))
    if n_boot:
        rng = np.random.default_rng(seed)
        boot = np.array(
            [kl(rng.integers(0, n_ref, n_ref), rng.integers(0, n_tgt, n_tgt)) for _ in range(n_boot)]
        )
        alpha = (1.0 - confidence) / 2.0
        out["ci_low"], out["ci_high"] = (float(v) for v in np.quantile(boot, [alpha, 1.0 - alpha]))
    return out
