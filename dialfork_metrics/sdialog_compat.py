"""What ``compat="sdialog"`` reproduces of sdialog 0.5.3, in one place.

sdialog (idiap/sdialog) is the authors' toolkit; DialFork's FlowKL and FBD can reproduce its
numbers exactly for the same encoder (SPEC section 7). Read from sdialog 0.5.3's source
(``sdialog/evaluation/__init__.py``, ``evaluation/base.py``, ``evaluation/dialog2flow/*``,
``util.py``):

FlowKL = ``KDEDistanceEvaluator(DialogFlowScore(refs))(targets)``

- graph (``dialog2graph`` with ``DialogFlowScore``'s overrides): per speaker (``system``,
  ``user``, sorted), agglomerative clustering of *all* reference utterances (duplicates
  included), average linkage, cosine distance threshold 0.55; centroid = member mean; edges
  counted over ``[start] n_1 .. n_T [end]``; node weights ``fr/max fr`` and edge weights
  ``fr/out fr`` (self-loops included in that sum) are computed, then self-loops are removed,
  nodes of weight < 0.001 pruned, nodes not on a ``[start] -> [end]`` path removed, edges of
  weight < 0.001 pruned, isolated and unreachable nodes removed (:func:`dialog2flow_prune`);
- ``V`` = number of clusters of both speakers (``[start]``/``[end]`` and pruning excluded);
- each turn maps to the nearest centroid of its speaker's clusters (cosine; all clusters,
  pruned or not); node confidence = softmax of cosine similarity / 0.05 over the
  ``min(64, n_speaker_clusters)`` nearest centroids, taken at the nearest;
- per turn (``[start]`` -> first turn included, no transition to ``[end]``): a known edge adds
  ``log((count + 1) / (out + V) * confidence)``, an unseen one ``log(1 / (out + V))``;
- score = ``exp(sum) ** (1 / (n_turns + 1))`` (the ``+ 1`` quirk; ``use_only_known_edges=True``:
  ``exp(sum_known) ** (1 / (n_known + 1))``) -- see :func:`sdialog_flow_score`;
- KL: ``gaussian_kde`` (Scott) of each set's scores, 100 points over the union's range,
  densities clipped at 1e-12, ``sum p log(p/q) / sum p``. When a KDE cannot be built (zero
  variance), sdialog adds *unseeded* N(0, 1e-8) jitter; DialFork uses its documented
  deterministic fallback instead (:func:`dialfork_metrics.flowkl_from_likelihoods`).

FBD = ``FrechetBERTDistanceEvaluator(refs, model_name=...)(targets)``

- pairs: every turn with its successor (``dialogs_to_utt_pairs`` with ``ai_speaker=None``);
- ``[CLS]`` of ``AutoModel`` on ``tokenizer(a, b, padding=True, truncation=True)``;
- ``mu = mean``, ``sigma = np.cov(rowvar=False)`` (ddof 1), Frechet distance clipped at 0. sdialog
  uses ``scipy.linalg.sqrtm(S1 S2, disp=False)``; DialFork the symmetric eigendecomposition
  (same value up to float noise, without the deprecated call).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

SDIALOG_VERSION = "0.5.3"
SDIALOG_NODE_PRUNE_THRESHOLD = 0.001
SDIALOG_EDGE_PRUNE_THRESHOLD = 0.001
SDIALOG_DISTANCE_THRESHOLD = 0.55
SDIALOG_K_NEIGHBORS = 64
SDIALOG_SOFTMAX_TEMPERATURE = 0.05
SDIALOG_KDE_GRID = 100
SDIALOG_DENSITY_FLOOR = 1e-12
SDIALOG_FBD_PAIRING = "sliding"


def dialog2flow_prune(
    raw_counts: np.ndarray,
    node_fr: np.ndarray,
    start: int,
    end: int,
    node_threshold: float,
    edge_threshold: float,
) -> np.ndarray:
    """Edge counts after dialog2flow's ``create_graph`` clean-up (self-loops, node and edge pruning,
    unreachable-node removal), in its order.

    Args:
        raw_counts: ``(n, n)`` transition counts over all nodes, self-loops included.
        node_fr: ``(n,)`` occurrences of each node as a destination (``[start]``/``[end]`` have
            weight 1 regardless).
        start: The index of the ``[start]`` node.
        end: The index of the ``[end]`` node.
        node_threshold: Nodes whose weight (occurrences over the largest) is below it are pruned.
        edge_threshold: Edges whose weight (share of the source's outgoing counts) is below it are
            pruned.

    Returns:
        The remaining counts (pruned edges and nodes set to 0, self-loops removed).
    """
    import networkx as nx

    n = raw_counts.shape[0]
    present = np.zeros(n, dtype=bool)
    present[[start, end]] = True
    present |= (raw_counts.sum(axis=0) > 0) | (raw_counts.sum(axis=1) > 0)
    fr = node_fr.astype(float).copy()
    fr[[start, end]] = 1.0
    max_fr = fr[present].max()
    node_w = fr / max_fr
    node_w[[start, end]] = 1.0
    out_tot = raw_counts.sum(axis=1, keepdims=True).astype(float)
    edge_w = np.divide(raw_counts, out_tot, out=np.zeros_like(raw_counts, dtype=float), where=out_tot > 0)

    G = nx.DiGraph()
    G.add_nodes_from(int(i) for i in np.flatnonzero(present))
    src, dst = np.nonzero(raw_counts)
    G.add_edges_from((int(a), int(b)) for a, b in zip(src, dst) if a != b)  # self-loops removed

    def remove_unreachable() -> None:
        keep = nx.ancestors(G, end).intersection(nx.descendants(G, start)) | {start, end}
        G.remove_nodes_from([v for v in list(G.nodes) if v not in keep])

    G.remove_nodes_from([v for v in list(G.nodes) if node_w[v] < node_threshold])
    remove_unreachable()
    G.remove_edges_from([(a, b) for a, b in list(G.edges) if edge_w[a, b] < edge_threshold])
    G.remove_nodes_from(list(nx.isolates(G)))
    if start in G and end in G:
        remove_unreachable()
    out = np.zeros_like(raw_counts)
    for a, b in G.edges:
        out[a, b] = raw_counts[a, b]
    return out


def sdialog_flow_score(sum_log: np.ndarray, n_counted: np.ndarray) -> np.ndarray:
    """``DialogFlowScore.score``: ``exp(sum) ** (1 / (n + 1))``, computed as sdialog does (an
    ``exp`` that underflows to 0 for very long dialogues gives 0, as in sdialog).

    Args:
        sum_log: Per dialogue, the sum of the log transition probabilities.
        n_counted: Per dialogue, the number of transitions counted.

    Returns:
        The scores, one per dialogue.
    """
    sum_log = np.asarray(sum_log, dtype=float)
    n = np.asarray(n_counted, dtype=float) + 1.0
    with np.errstate(under="ignore"):
        return np.exp(sum_log) ** (1.0 / n)


def to_sdialog_dialogs(dialogues: Sequence[Any], set_name: str = "set") -> list[dict]:
    """Dialogues as sdialog ``Dialog`` JSON dicts (``{"id", "turns": [{"speaker", "text"}]}``),
    speakers ``"user"``/``"system"`` as DialFork writes them (sdialog maps those names to itself).

    Args:
        dialogues: Records, lists of turns or of turn strings.
        set_name: Names the set in ids of dialogues without a ``dialogue_id`` and in errors.

    Returns:
        One dict per dialogue.
    """
    from dialfork_dataset.turns import as_turns

    from .pair_encoder import dialogue_name

    out = []
    for i, d in enumerate(dialogues):
        turns = as_turns(d, dialogue_name(d, i, set_name))
        did = d.get("dialogue_id") if isinstance(d, dict) else None
        out.append(
            {
                "id": str(did if did is not None else f"{set_name}-{i}"),
                "turns": [{"speaker": t["speaker"], "text": t["text"]} for t in turns],
            }
        )
    return out


def write_sdialog_json(path: str | os.PathLike, dialogues: Sequence[Any], set_name: str = "set") -> None:
    """Write :func:`to_sdialog_dialogs` as one JSON list, atomically (the benchmark's hand-over).

    Args:
        path: The JSON file.
        dialogues: The dialogues.
        set_name: As :func:`to_sdialog_dialogs`.
    """
    from dialfork_dataset.atomic import write_text_atomic

    write_text_atomic(path, json.dumps(to_sdialog_dialogs(dialogues, set_name), ensure_ascii=False))
