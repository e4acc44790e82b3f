"""Exporting and drawing a fitted :class:`~dialfork_metrics.flowgraph.FlowGraph`: networkx, GraphML and
a left-to-right workflow picture (matplotlib, imported lazily)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from dialfork_dataset.atomic import atomic_path


def to_networkx(graph: Any):
    """``graph`` (a fitted FlowGraph) as a ``networkx.DiGraph``.

    Args:
        graph: A fitted :class:`~dialfork_metrics.flowgraph.FlowGraph`.

    Returns:
        The graph: nodes carry ``speaker``, ``count`` and ``example``; edges ``count`` and ``prob``.
    """
    import networkx as nx

    graph._check_fitted()
    G = nx.DiGraph()
    for i, name in enumerate(graph.node_names):
        sp = name.split(":")[0] if ":" in name else ""
        G.add_node(
            name,
            speaker=sp,
            count=int(graph.node_counts[i]) if i < graph.vocab_size else graph.n_dialogues,
            example=graph.examples[i],
        )
    for a, b in zip(*np.nonzero(graph.counts)):
        G.add_edge(
            graph.node_names[a],
            graph.node_names[b],
            count=int(graph.counts[a, b]),
            prob=graph.transition_prob(int(a), int(b)),
        )
    return G


#: Widest figure (inches) :func:`draw_flowgraph` makes: at 150 dpi about 1,500 px, so that a Markdown
#: page or a report shown at page width (~900 px) scales its 6.5 pt labels to about 9 px, still legible.
MAX_FIGURE_WIDTH_IN = 10.0


def draw_flowgraph(
    graph: Any,
    path: str | os.PathLike,
    max_nodes: int = 40,
    top_edges: int = 2,
    label_chars: int = 60,
    dpi: int = 150,
    max_per_column: int | None = 5,
    orientation: str = "vertical",
) -> None:
    """Draw ``graph`` (a fitted FlowGraph) as a workflow (PNG, matplotlib Agg).

    Nodes: the ``max_nodes`` most visited (and at most ``max_per_column`` at one typical turn
    position), placed in layers by their typical turn position (:meth:`FlowGraph.typical_positions`),
    ordered within a layer to follow their predecessors; each is labelled with its most central
    utterance (the member nearest the centroid, shortened to ``label_chars`` characters) and its
    visit count; user nodes blue, system nodes white. Edges: for each node its ``top_edges`` most
    probable outgoing edges among the drawn nodes, width by transition probability. The full graph
    is in :meth:`FlowGraph.to_graphml`.

    ``orientation="vertical"`` (default) reads top to bottom, one row per turn position, so the
    figure's width is set by the few nodes that share a position and stays within
    :data:`MAX_FIGURE_WIDTH_IN` (a dialogue's length only makes it taller): the picture stays
    legible at page width. ``"horizontal"`` reads left to right (one column per position), as wide
    as the dialogues are long.

    Args:
        graph: A fitted :class:`~dialfork_metrics.flowgraph.FlowGraph`.
        path: The PNG file to write (atomically).
        max_nodes: Most cluster nodes drawn (the most visited).
        top_edges: Most outgoing edges drawn per node.
        label_chars: Characters of each node's example utterance shown.
        dpi: Image resolution.
        max_per_column: Most nodes drawn at one turn position (the most visited there); None:
            no limit. With the vertical layout, 5 keeps the figure within page width.
        orientation: ``"vertical"`` or ``"horizontal"``.

    Raises:
        ValueError: An unknown ``orientation``.
    """
    if orientation not in ("vertical", "horizontal"):
        raise ValueError(f"orientation must be 'vertical' or 'horizontal', got {orientation!r}")
    import matplotlib

    matplotlib.use("Agg", force=False)
    import textwrap

    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Patch

    graph._check_fitted()
    layout = workflow_layout(
        graph.counts,
        graph.typical_positions(),
        graph.node_counts,
        graph.start,
        graph.end,
        max_nodes=max_nodes,
        top_edges=top_edges,
        max_per_column=max_per_column,
    )
    layer_xy, edges = layout["xy"], layout["edges"]
    n_layers = max(1, len({x for x, _ in layer_xy.values()}))
    breadth = max(1, layout["max_column"])
    vertical = orientation == "vertical"
    if vertical:  # the layer (turn position) runs down the page, nodes of one layer across it
        xy = {i: (y, x) for i, (x, y) in layer_xy.items()}
        width = min(MAX_FIGURE_WIDTH_IN, max(6.0, 1.75 * breadth + 0.8))
        figsize = (width, max(4.0, 0.95 * n_layers + 1.8))
    else:
        xy = layer_xy
        figsize = (max(8.0, 1.45 * n_layers), max(4.0, 0.95 * breadth + 1.5))
    fig, ax = plt.subplots(figsize=figsize)
    colours = {"user": "#bbdefb", "system": "#ffffff"}
    boxes = {}
    for i, (x, y) in xy.items():
        name = graph.node_names[i]
        if i in (graph.start, graph.end):
            label, face = name, "#e0e0e0"
        else:
            sp = name.split(":")[0]
            label = f"{_shorten(graph.examples[i], label_chars)}\n({sp}, n={int(graph.node_counts[i])})"
            face = colours.get(sp, "#e0e0e0")
        boxes[i] = ax.text(
            x,
            y,
            label,
            ha="center",
            va="center",
            fontsize=6.5,
            zorder=3,
            wrap=False,
            bbox={"boxstyle": "round,pad=0.3", "fc": face, "ec": "#424242", "lw": 0.6},
        )
    pmax = max([p for _, _, p in edges] + [1e-9])
    for a, b, prob in edges:
        back = layer_xy[b][0] < layer_xy[a][0]  # to an earlier turn position
        same = layer_xy[b][0] == layer_xy[a][0]
        arrow = FancyArrowPatch(
            xy[a],
            xy[b],
            arrowstyle="-|>",
            mutation_scale=7,
            connectionstyle=f"arc3,rad={0.35 if back or same else 0.08}",
            lw=0.4 + 3.6 * prob / pmax,
            color="#c62828" if back else "#37474f",
            alpha=(0.25 if back else 0.35) + 0.5 * prob / pmax,
            zorder=1,
            patchA=boxes[a].get_bbox_patch(),
            patchB=boxes[b].get_bbox_patch(),
        )
        ax.add_patch(arrow)
    xs = [x for x, _ in xy.values()]
    ys = [y for _, y in xy.values()]
    ax.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
    ax.set_ylim(min(ys) - 0.8, max(ys) + 0.8)
    ax.invert_yaxis()
    ax.set_axis_off()
    ax.legend(
        handles=[
            Patch(fc=colours["user"], ec="#424242", label="user node"),
            Patch(fc=colours["system"], ec="#424242", label="system node"),
            Patch(fc="#37474f", label="edge (width: probability)"),
            Patch(fc="#c62828", label="edge back to an earlier position"),
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.005),
        ncol=2,
        fontsize=7,
        frameon=False,
    )
    where = "rows" if vertical else "columns"
    title = (
        f"FlowGraph: {len(xy) - 2} of {graph.vocab_size} nodes (most visited), top {top_edges} edges per "
        f"node, {where} by typical turn position ({graph.n_dialogues} reference dialogues)"
    )
    ax.set_title("\n".join(textwrap.wrap(title, int(figsize[0] * 13))), fontsize=9)
    fig.tight_layout()
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=dpi, format="png")
    finally:
        plt.close(fig)


def expected_turn_positions(
    counts: Any, start: int, end: int, max_steps: int = 1000, tol: float = 1e-9
) -> np.ndarray:
    """The expected turn position of each node under the Markov chain of ``counts`` (row-normalised
    transition counts, walked from ``start`` until the mass reaching ``end`` leaves ``tol``):
    ``sum_t t * P(at node at turn t) / sum_t P(at node at turn t)``. A node the walk never reaches
    is ``nan``; ``start`` and ``end`` are ``nan`` (they are not turns).

    Args:
        counts: Transition counts, shape ``(n_nodes, n_nodes)``, row = from, column = to.
        start: Index of the start node (turn 0).
        end: Index of the end node (absorbing).
        max_steps: Most turns walked.
        tol: Stop once the probability mass still walking (not at ``end``) is below this.

    Returns:
        The expected turn position of each node, shape ``(n_nodes,)``, float64 (``nan`` as above).

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


def workflow_layout(
    counts: Any,
    positions: Any,
    node_counts: Any,
    start: int,
    end: int,
    max_nodes: int = 40,
    top_edges: int = 2,
    sweeps: int = 4,
    max_per_column: int | None = None,
) -> dict[str, Any]:
    """A layered (Sugiyama-style) layout of a flow graph, as pure data.

    Keeps ``start``, ``end`` and the ``max_nodes`` most visited nodes; column ``x`` = the rounded
    typical position (``positions``, ``start`` at 0), rows within a column ordered by the
    barycentre of each node's kept neighbours in the previous column (``sweeps`` passes, left to
    right), then spread evenly. Edges: each kept node's ``top_edges`` most probable outgoing edges
    (row-normalised ``counts``) whose target is kept. Returns ``{"xy": {node: (x, y)}, "edges":
    [(a, b, prob)], "max_column": size of the largest column}``.

    Args:
        counts: Transition counts, shape ``(n_nodes, n_nodes)``, row = from, column = to.
        positions: Typical turn position of each node, shape ``(n_nodes,)``
            (:func:`expected_turn_positions`); nodes with a non-finite position are dropped.
        node_counts: Visits of each node, shape ``(n_nodes,)`` (ranks the nodes kept and their
            initial order within a column).
        start: Index of the start node (column 0).
        end: Index of the end node (the last column).
        max_nodes: Most cluster nodes kept, besides ``start`` and ``end``.
        top_edges: Most outgoing edges drawn per kept node (self-loops never drawn).
        sweeps: Barycentre ordering passes.
        max_per_column: Most cluster nodes kept at one rounded typical position (the most
            visited there); None: no limit.

    Returns:
        A dict: ``xy`` (node index -> ``(x, y)`` floats; empty columns removed, each column
        centred on the largest), ``edges`` (list of ``(from, to, probability)``) and
        ``max_column`` (int).
    """
    C = np.asarray(counts, dtype=float)
    pos = np.asarray(positions, dtype=float)
    nc = np.asarray(node_counts)
    cluster_nodes = [i for i in range(C.shape[0]) if i not in (start, end) and np.isfinite(pos[i])]
    keep = sorted(cluster_nodes, key=lambda i: (-int(nc[i]), i))[:max_nodes]
    if max_per_column is not None:  # a crowded position keeps its most visited nodes
        per: dict[int, int] = {}
        trimmed = []
        for i in keep:  # most visited first
            c = int(round(pos[i]))
            if per.get(c, 0) < max_per_column:
                per[c] = per.get(c, 0) + 1
                trimmed.append(i)
        keep = trimmed
    keep = keep + [start, end]
    kept = set(keep)
    out = C.sum(axis=1)
    edges: list[tuple[int, int, float]] = []
    for a in keep:
        if out[a] <= 0:
            continue
        cand = sorted(
            (b for b in np.flatnonzero(C[a]) if int(b) in kept and int(b) != a), key=lambda b: (-C[a, b], b)
        )
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
