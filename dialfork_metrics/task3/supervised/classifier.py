"""The pure core of ``wf-sup`` (:mod:`.workflow_supervised`): causal per-turn features over the workflow,
turn labels, and the per-turn classifier (fit, out-of-fold probabilities), as functions over arrays."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..workflow.detector import WorkflowStructure, repeat_flags, turn_deviations, workflow_structure
from ..workflow.nodes import GENERIC_NODE_NAMES

logger = logging.getLogger("dialfork_metrics.task3.supervised.detector")

FORMAT = "dialfork-task3-workflow-supervised"
MODELS = ("logistic", "hgb")
THRESHOLD_SCOPES = ("task", "global")
FEATURES: tuple[str, ...] = (
    "own",
    "rival",
    "rival_minus_own",
    "deviation",
    "train_similarity",
    "off_workflow",
    "repeat",
    "missing_asks",
    "same_as_previous",
    "allowed_transition",
    "anywhere_node",
    "log_turn",
    "previous_max_deviation",
    "deviation_change",
)
"""The per-turn features, in column order (see the module doc)."""
_NO_RIVAL = -1.0
_FORK_SUFFIX = re.compile(r"-(WIC|GR|CSC|SSPC)-k\d+(-[A-Za-z_]+)?$")


# -- the workflow graph's view ------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskGraph:
    """What the features read of one task's workflow graph.

    Attributes:
        structure: The repeat rule's :class:`~.workflow_detector.WorkflowStructure`.
        dominating_asks: node -> the question steps that dominate it (every path from the start
            node to it passes them).
        next_actions: node -> the action nodes that may follow it (through non-action nodes).
        anywhere: Nodes that may come at any point (generic names, dead ends, unreachable from the
            start node).
    """

    structure: WorkflowStructure
    dominating_asks: Mapping[str, frozenset[str]]
    next_actions: Mapping[str, frozenset[str]]
    anywhere: frozenset[str]


def task_graph(task: Any) -> TaskGraph:
    """The :class:`TaskGraph` of a workflow task.

    The start node is ``hello`` when the graph has it, else the source node with the most
    descendants.

    Args:
        task: A workflow task (``kinds`` and ``digraph()``).

    Returns:
        TaskGraph: Its dominating question steps, next action steps and anywhere nodes.
    """
    import networkx as nx

    g = task.digraph()
    kinds = dict(task.kinds)
    structure = workflow_structure(task)
    dom: dict[str, frozenset[str]] = {}
    reachable: set[str] = set()
    if g.number_of_nodes():
        sources = [n for n in g.nodes if g.in_degree(n) == 0] or list(g.nodes)
        root = "hello" if "hello" in g else max(sources, key=lambda n: (len(nx.descendants(g, n)), str(n)))
        idom = nx.immediate_dominators(g, root)
        reachable = set(idom)
        for n in idom:
            chain, m = [], n
            while idom.get(m) is not None and idom[m] != m:
                m = idom[m]
                chain.append(m)
            dom[n] = frozenset(c for c in chain if c in structure.asks)
    nxt: dict[str, frozenset[str]] = {}
    for n in g.nodes:
        out, stack, seen = set(), list(g.successors(n)), set()
        while stack:
            m = stack.pop()
            if m in seen:
                continue
            seen.add(m)
            if kinds.get(m) == "action":
                out.add(m)
            else:
                stack.extend(g.successors(m))
        nxt[n] = frozenset(out)
    actions = [n for n, k in kinds.items() if k == "action"]
    anywhere = frozenset(
        n
        for n in actions
        if n in GENERIC_NODE_NAMES or "bye" in n.split("_") or n in structure.resets or n not in reachable
    )
    return TaskGraph(structure, dom, nxt, anywhere)


def turn_features(
    own: np.ndarray,
    rival: np.ndarray,
    train_similarity: np.ndarray,
    nodes: Sequence[str | None],
    answered: Sequence[bool],
    graph: TaskGraph,
    *,
    repeatable: frozenset[str] | set[str] = frozenset(),
    min_similarity: float,
    reject_margin: float,
) -> np.ndarray:
    """The feature matrix of a dialogue's system turns (columns :data:`FEATURES`); row ``j`` reads turns ``<= j`` only.

    Args:
        own: Similarity to the best node of the task's workflow, per system turn.
        rival: Similarity to the best node of another workflow (``-inf``: none).
        train_similarity: Similarity to the nearest conformant train system turn of the task
            (NaN: none known; the own similarity is used).
        nodes: The assigned node of each system turn (None: off-workflow).
        answered: Whether a user turn followed each system turn (row ``j`` reads it for turns ``< j``).
        graph: The task's :class:`TaskGraph`.
        repeatable: Nodes the task's conformant dialogues say more than once.
        min_similarity: The own-similarity floor of the deviation.
        reject_margin: The rival margin of the deviation.

    Returns:
        np.ndarray: float64, shape ``(n, len(FEATURES))``.

    Example:
        >>> g = TaskGraph(WorkflowStructure(frozenset({"ask"}), {"ask": frozenset({"inform"}), "inform": frozenset()},
        ...               frozenset()), {"ask": frozenset(), "inform": frozenset({"ask"})},
        ...               {"ask": frozenset({"inform"}), "inform": frozenset()}, frozenset())
        >>> X = turn_features(np.array([0.9, 0.8]), np.array([0.1, -np.inf]), np.array([np.nan, 0.7]),
        ...                   ["inform", "ask"], [True, True], g, min_similarity=0.45, reject_margin=0.1)
        >>> float(X[0, FEATURES.index("missing_asks")]), float(X[1, FEATURES.index("allowed_transition")])
        (1.0, 0.0)
    """
    own = np.asarray(own, dtype=np.float64)
    n = own.size
    rival = np.asarray(rival, dtype=np.float64)
    rival = np.where(np.isfinite(rival), rival, _NO_RIVAL)
    train = np.asarray(train_similarity, dtype=np.float64)
    train = np.where(np.isfinite(train), train, own)
    rep = repeat_flags(list(nodes), list(answered), graph.structure, frozenset(repeatable))
    dev = turn_deviations(own, rival, None, min_similarity=min_similarity, reject_margin=reject_margin)
    X = np.zeros((n, len(FEATURES)))
    X[:, 0], X[:, 1], X[:, 2], X[:, 3], X[:, 4] = own, rival, rival - own, dev, train
    visited: set[str] = set()
    prev: str | None = None
    for j, node in enumerate(nodes):
        X[j, 5] = float(node is None)
        X[j, 6] = float(rep[j])
        if node is not None:
            X[j, 7] = float(len(graph.dominating_asks.get(node, frozenset()) - visited))
            X[j, 8] = float(prev is not None and node == prev)
            X[j, 9] = float(prev is not None and node in graph.next_actions.get(prev, frozenset()))
            X[j, 10] = float(node in graph.anywhere)
        X[j, 11] = math.log(j + 1)
        X[j, 12] = float(dev[:j].max()) if j else -1.0
        X[j, 13] = float(dev[j] - dev[j - 1]) if j else 0.0
        if node is not None:
            visited.add(node)
        prev = node
    return X


def turn_labels(num_system_turns: int, fork_turn: int | None) -> np.ndarray:
    """The per-turn labels of one dialogue: 1 at the fork turn, 0 before it, -1 (dropped) after it.

    Args:
        num_system_turns: The dialogue's number of system turns ``T``.
        fork_turn: The 1-based fork turn ``t_k``; None for a conformant dialogue (all 0).

    Returns:
        np.ndarray: int64 of length ``T``.

    Raises:
        ValueError: ``fork_turn`` outside ``1..T``.

    Example:
        >>> turn_labels(4, 2).tolist(), turn_labels(3, None).tolist()
        ([0, 1, -1, -1], [0, 0, 0])
    """
    y = np.zeros(num_system_turns, dtype=np.int64)
    if fork_turn is None:
        return y
    if not 1 <= fork_turn <= num_system_turns:
        raise ValueError(f"fork_turn {fork_turn} outside 1..{num_system_turns}")
    y[fork_turn - 1] = 1
    y[fork_turn:] = -1
    return y


# -- the classifier core (arrays only) -----------------------------------------------------------------


class TurnClassifier:
    """A fitted per-turn classifier: :meth:`probability` of a deviation for feature rows.

    The logistic model is kept as arrays (``mean``, ``scale``, ``coef``, ``intercept``), so it is
    evaluated with numpy and saved without pickle; ``hgb`` keeps scikit-learn's estimator. A training
    set with one class only gives a constant (its share of positives).

    Args:
        model: ``"logistic"``, ``"hgb"`` or ``"constant"``.
        arrays: The logistic model's arrays, or ``{"p": [p]}`` for the constant.
        estimator: The ``hgb`` estimator.
    """

    def __init__(self, model: str, arrays: Mapping[str, np.ndarray] | None = None, estimator: Any = None):
        self.model = model
        self.arrays = {k: np.asarray(v, dtype=np.float64) for k, v in (arrays or {}).items()}
        self.estimator = estimator

    def probability(self, X: np.ndarray) -> np.ndarray:
        """The probability of a deviation of each row.

        Args:
            X: Feature rows, shape ``(n, len(FEATURES))``.

        Returns:
            np.ndarray: float64 of length ``n``.
        """
        X = np.asarray(X, dtype=np.float64).reshape(-1, len(FEATURES))
        if self.model == "constant":
            return np.full(len(X), float(self.arrays["p"][0]))
        if self.model == "logistic":
            a = self.arrays
            z = ((X - a["mean"]) / a["scale"]) @ a["coef"] + a["intercept"][0]
            return 1.0 / (1.0 + np.exp(-np.clip(z, -500, 500)))
        if not len(X):
            return np.zeros(0)
        return np.asarray(self.estimator.predict_proba(X)[:, 1], dtype=np.float64)


def fit_turn_classifier(
    X: np.ndarray, y: np.ndarray, model: str = "logistic", *, C: float = 1.0, seed: int = 0
) -> TurnClassifier:
    """Fit the per-turn classifier on labelled feature rows.

    Args:
        X: Feature rows, shape ``(n, f)``.
        y: 0/1 labels, shape ``(n,)``.
        model: ``"logistic"`` (class-balanced logistic regression on standardised features) or
            ``"hgb"`` (class-balanced ``HistGradientBoostingClassifier``).
        C: Inverse regularisation strength of the logistic model.
        seed: Random state of ``hgb``.

    Returns:
        TurnClassifier: The fitted classifier.

    Raises:
        ValueError: An unknown model, or ``X`` and ``y`` of different lengths.

    Example:
        >>> X = np.array([[0.0], [0.1], [0.9], [1.0]]); y = np.array([0, 0, 1, 1])
        >>> clf = fit_turn_classifier(np.hstack([X] * 14), y)
        >>> (clf.probability(np.hstack([X] * 14)) > 0.5).astype(int).tolist()
        [0, 0, 1, 1]
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    if X.ndim != 2 or len(X) != len(y):
        raise ValueError(f"fit_turn_classifier: X of shape {X.shape} for {len(y)} labels")
    if len(np.unique(y)) < 2:
        return TurnClassifier("constant", {"p": np.array([float(y.mean()) if y.size else 0.0])})
    if model == "logistic":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import Pipeline
        from sklearn.preprocessing import StandardScaler

        pipe = Pipeline(
            [
                ("scale", StandardScaler()),
                ("clf", LogisticRegression(C=C, class_weight="balanced", max_iter=2000)),
            ]
        ).fit(X, y)
        sc, lr = pipe.named_steps["scale"], pipe.named_steps["clf"]
        scale = np.where(sc.scale_ > 0, sc.scale_, 1.0)
        return TurnClassifier(
            "logistic", {"mean": sc.mean_, "scale": scale, "coef": lr.coef_[0], "intercept": lr.intercept_}
        )
    from sklearn.ensemble import HistGradientBoostingClassifier

    est = HistGradientBoostingClassifier(
        class_weight="balanced", random_state=seed, max_iter=100, learning_rate=0.1, max_leaf_nodes=15
    ).fit(X, y)
    return TurnClassifier("hgb", estimator=est)


def out_of_fold_probabilities(
    X: np.ndarray, y: np.ndarray, fold: np.ndarray, model: str = "logistic", *, C: float = 1.0, seed: int = 0
) -> np.ndarray:
    """Each row's probability under a classifier fitted on the other folds' rows.

    Args:
        X: Feature rows, shape ``(n, f)``.
        y: 0/1 labels, shape ``(n,)``.
        fold: The fold of each row (rows of one dialogue, or of one source, share it).
        model: As :func:`fit_turn_classifier`.
        C: As :func:`fit_turn_classifier`.
        seed: As :func:`fit_turn_classifier`.

    Returns:
        np.ndarray: float64 of length ``n``.
    """
    fold = np.asarray(fold)
    out = np.empty(len(y))
    for f in np.unique(fold):
        te = fold == f
        out[te] = fit_turn_classifier(X[~te], y[~te], model, C=C, seed=seed).probability(X[te])
    return out


def source_of(record: Any, index: int = 0) -> str:
    """The source dialogue of a record: ``source_id``, else its id without a fork suffix (``-GR-k2``).

    Args:
        record: A record (mapping) or a list of turns.
        index: Its position (the group of a record without an id).

    Returns:
        str: The group key that keeps a fork with its source.

    Example:
        >>> source_of({"dialogue_id": "weather-4-GR-k2"}), source_of({"dialogue_id": "w-1-SSPC-k1-skip"})
        ('weather-4', 'w-1')
    """
    if isinstance(record, Mapping):
        if record.get("source_id"):
            return str(record["source_id"])
        if record.get("dialogue_id"):
            return _FORK_SUFFIX.sub("", str(record["dialogue_id"]))
    return f"#{index}"


# -- the detector -----------------------------------------------------------------------------------------
