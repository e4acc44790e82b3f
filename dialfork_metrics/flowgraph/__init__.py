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
   ``1e-12``, ``KL = sum p log(p / q) / sum p``. Only ``p`` is normalised, so close sets can
   score slightly below 0 (:func:`flowkl_from_likelihoods` explains the term; ``normalize=True``
   removes it).

For small target sets (an agent audit's few dialogues per task), :func:`flowkl_crossfit` (ours,
SPEC section 10) draws the reference and the target comparably (cross-fitted graphs, unseen
transitions counted), smooths both with one bandwidth (:func:`kl_shared_bandwidth`: never
negative, 0 for the same values), adds a bootstrap interval and gives no value below
:data:`MIN_CROSSFIT_TARGET` target dialogues.

``compat="sdialog"`` reproduces sdialog 0.5.3's ``KDEDistanceEvaluator(DialogFlowScore(refs))``
(see :mod:`dialfork_metrics.sdialog_compat`): unseen edges included, node confidence on, graph
pruning at 0.001, and ``L(D) = exp(sum log p) ** (1 / (n_turns + 1))``.

Degenerate sets (ours, deterministic): a set whose likelihoods all have the same value has no
Scott-rule KDE (zero variance). Its density is then a Gaussian at that value whose standard
deviation is the one Scott's rule gives for the *union* of both sets
(``n ** (-1/5) * std(union, ddof=1)``, ``n`` the set's size). If the union itself has zero
variance (both sets constant and equal), FlowKL is 0. sdialog instead adds unseeded 1e-8 jitter,
which is not reproducible. A set with fewer than 2 likelihoods raises ``ValueError``.

Modules: :mod:`.clustering` (step 1), :mod:`.graph` (step 2, :class:`FlowGraph`), :mod:`.kde`
(step 3), :mod:`.metric` (:func:`flowkl`), :mod:`.drawing` (networkx, GraphML, PNG); every name is
re-exported here.
"""

from __future__ import annotations

from .clustering import (
    centroids_from_labels,
    cluster_embeddings,
    cluster_tree,
    cosine_similarities,
    cut_cluster_tree,
    laplace_probabilities,
    nearest_nodes,
    node_confidence,
)
from .drawing import expected_turn_positions, workflow_layout
from .graph import END, SPEAKERS, START, FlowGraph
from .kde import flowkl_from_likelihoods, kl_shared_bandwidth, shared_bandwidth
from .metric import (
    MIN_CROSSFIT_REFERENCE,
    MIN_CROSSFIT_TARGET,
    crossfit_likelihoods,
    flowkl,
    flowkl_crossfit,
)

__all__ = [
    "END",
    "MIN_CROSSFIT_REFERENCE",
    "MIN_CROSSFIT_TARGET",
    "SPEAKERS",
    "START",
    "FlowGraph",
    "centroids_from_labels",
    "cluster_embeddings",
    "cluster_tree",
    "cosine_similarities",
    "crossfit_likelihoods",
    "cut_cluster_tree",
    "expected_turn_positions",
    "flowkl",
    "flowkl_crossfit",
    "flowkl_from_likelihoods",
    "kl_shared_bandwidth",
    "laplace_probabilities",
    "nearest_nodes",
    "node_confidence",
    "shared_bandwidth",
    "workflow_layout",
]
