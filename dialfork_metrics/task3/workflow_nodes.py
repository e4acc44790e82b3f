"""Node assignment with rejection: which step of its workflow a system turn says, or none.

One component behind the workflow-aware Task 3 detector, the guard's off-task warning, the audit's
step coverage and the check of generated conformant dialogues. Each system turn maps to the action
node of *this* task's workflow whose texts it is nearest to, or to ``None`` ("off-workflow") when

* another task's workflow fits it better by at least ``reject_margin`` (the turn runs another
  workflow: WIC, GR, an inserted competing sub-goal), or
* no node of this task's workflow comes within ``min_similarity`` (the turn says nothing the
  workflow says).

The texts of a node (:func:`node_texts`) are the workflow's own: its response template, its reply
label and its example phrasings (STAR: ``responses.json``, the task file's ``replies``,
``wizard_nlu_training_data.md``; a workflow file: the step's ``say``, ``label`` and
``alternatives``), ``{placeholders}`` spelled out as words. Labelled conformant dialogues (records
with ``system_nodes``, e.g. STAR's human dialogues, whose picks carry action labels) add their
system turns to their nodes' texts.

Nodes that several tasks share by name (``hello``, ``anything_else``, ``ask_name``...) are
*generic*: a turn that matches another task's generic node is no evidence of another workflow.

The math is over arrays (:func:`node_similarities`, :func:`assign_rows`); :class:`NodeAssigner`
holds the encoded texts (``fit`` / ``assign``, scikit-learn's conventions: fitted attributes end in
``_``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

logger = logging.getLogger("dialfork_metrics.task3.workflow_nodes")

DEFAULT_MIN_SIMILARITY = 0.45
"""Least cosine similarity to a node of the task's own workflow for a turn to be assigned (ours)."""
DEFAULT_REJECT_MARGIN = 0.05
"""How much better another task's (non-generic) node must fit a turn to reject it as off-task (ours)."""
GENERIC_NODE_NAMES = frozenset({"hello", "anything_else", "out_of_scope", "goodbye", "bye"})
"""Node names that are generic whatever the source (more are found: names shared by tasks)."""

QUESTION_SHARE = 0.8
"""A node is a question step when its name has the word ``ask`` and at least this share of its texts
ask (:func:`asks`) (ours). An inform step that ends in an offer ("... Would you like me to book it?")
is no question step: a plain offer ("I can book this for you if you want.") still says it."""

_REQUEST = re.compile(
    r"^\W*(please|kindly|tell|specify|give|provide|enter|state|say|share|confirm|pick|choose|"
    r"select|name|describe|send|spell|let me know|i need|i'll need|i will need|you need to|"
    r"you must|you have to|could|can|may|would|will|what|which|where|when|who|whom|whose|how|"
    r"do|does|did|are|is there|have|has)\b|\bplease\b",
    re.IGNORECASE,
)


def _question_mask(
    keys: Sequence[tuple[str, str]], texts: Mapping[tuple[str, str], Sequence[str]]
) -> np.ndarray:
    return np.array(
        [
            bool(texts[k])
            and "ask" in k[1].split("_")
            and sum(asks(x) for x in texts[k]) >= QUESTION_SHARE * len(texts[k])
            for k in keys
        ],
        dtype=bool,
    )


def asks(text: str) -> bool:
    """Whether an utterance asks something: a question mark, or a request ("Please specify the day.",
    "Tell me the city.") by its first words.

    Args:
        text: The utterance.

    Returns:
        bool: True for a question or a request.

    Example:
        >>> asks("Please specify the day for the forecast."), asks("Tuesday is a great day to talk about the weather.")
        (True, False)
    """
    t = str(text)
    return "?" in t or bool(_REQUEST.search(t))


_PH = re.compile(r"\{(\w+)(?::[^}]*)?\}")


class WorkflowTextError(ValueError):
    """A workflow step has no text to recognise it by (the message names the task, node and field)."""


def _spell(text: str) -> str:
    text = _PH.sub(lambda m: m.group(1).replace("_", " "), str(text))
    return " ".join(text.split())


def _universal(node: str) -> bool:
    """A node any workflow may say (greeting, closing, out of scope, anything else)."""
    return node in GENERIC_NODE_NAMES or "bye" in node.split("_")


def node_texts(task: Any) -> dict[str, list[str]]:
    """The texts that say each action node of a task's workflow.

    Args:
        task: A workflow task (:class:`dialfork_dataset.sources.WorkflowTask`: ``kinds``,
            ``template()``, ``replies``, ``nlu``).

    Returns:
        dict[str, list[str]]: action node -> its texts (template, reply label, example phrasings;
        ``{placeholders}`` spelled out, duplicates removed, in that order).

    Raises:
        WorkflowTextError: Action nodes with no text at all, every one named with the fields that
            would give it one.

    Example:
        >>> class T:  # a two-step workflow
        ...     name = "demo"; kinds = {"hello": "action", "ask_day": "action", "query": "query"}
        ...     replies = {"hello": "Hi!", "ask_day": "Which day?"}; nlu = {"ask_day": ["Day?"]}
        ...     def template(self, n): return {"ask_day": "For what {day_name}?"}.get(n)
        >>> node_texts(T())
        {'hello': ['Hi!'], 'ask_day': ['For what day name?', 'Which day?', 'Day?']}
    """
    out: dict[str, list[str]] = {}
    errors: list[str] = []
    for node, kind in task.kinds.items():
        if kind != "action":
            continue
        cands = [task.template(node), task.replies.get(node), *(task.nlu.get(node) or ())]
        texts = list(dict.fromkeys(t for t in (_spell(c) for c in cands if isinstance(c, str)) if t))
        if texts:
            out[node] = texts
        else:
            errors.append(
                f"task {task.name!r}, node {node!r}: no text to recognise the step by "
                f"(STAR: responses.json[{node!r}], replies[{node!r}] and the intent {node!r} of "
                f"wizard_nlu_training_data.md are empty; a workflow file: give the step a "
                f"`say`, `label` or `alternatives`)"
            )
    if errors:
        raise WorkflowTextError("; ".join(errors))
    return out


def node_similarities(E: np.ndarray, P: np.ndarray, owners: np.ndarray, n_nodes: int) -> np.ndarray:
    """Similarity of each turn to each node: the best cosine over the node's texts.

    Args:
        E: Turn embeddings, shape ``(n, d)``, unit-norm rows.
        P: Text embeddings of all nodes, shape ``(m, d)``, unit-norm rows.
        owners: The node index of each row of ``P``, shape ``(m,)``, values in ``[0, n_nodes)``.
        n_nodes: The number of nodes.

    Returns:
        np.ndarray: shape ``(n, n_nodes)``; ``-inf`` for a node without texts.

    Example:
        >>> E = np.array([[1.0, 0.0]]); P = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
        >>> node_similarities(E, P, np.array([0, 1, 1]), 2).round(2).tolist()
        [[1.0, 0.6]]
    """
    E = np.asarray(E, dtype=np.float64).reshape(-1, np.asarray(P).shape[-1] if np.asarray(P).size else 0)
    S = E @ np.asarray(P, dtype=np.float64).T
    out = np.full((E.shape[0], n_nodes), -np.inf)
    if S.size:
        owners = np.asarray(owners, dtype=np.int64)
        order = np.argsort(owners, kind="stable")
        o = owners[order]
        starts = np.flatnonzero(np.r_[True, o[1:] != o[:-1]])
        out[:, o[starts]] = np.maximum.reduceat(S[:, order], starts, axis=1)
    return out


def assign_rows(
    S: np.ndarray, own: np.ndarray, rival: np.ndarray, min_similarity: float, reject_margin: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Assign turns to the task's own nodes, with rejection (the pure rule behind :class:`NodeAssigner`).

    Args:
        S: Node similarities, shape ``(n, n_nodes)`` (:func:`node_similarities`).
        own: Boolean mask of the task's own nodes, shape ``(n_nodes,)`` (at least one True).
        rival: Boolean mask of the nodes that count as another workflow (other tasks' nodes that
            are not generic), shape ``(n_nodes,)``.
        min_similarity: Least similarity to an own node for an assignment.
        reject_margin: A rival node better than the best own node by at least this rejects the turn.

    Returns:
        ``(node, own_sim, rival_sim, rival_node)``: the assigned own node index per turn (-1:
        rejected), the best own similarity, the best rival similarity (``-inf`` without rivals)
        and the best rival node index (-1 without rivals).

    Example:
        >>> S = np.array([[0.9, 0.2, 0.1], [0.3, 0.2, 0.8], [0.2, 0.3, 0.1]])
        >>> own = np.array([True, True, False]); rival = ~own
        >>> assign_rows(S, own, rival, 0.5, 0.05)[0].tolist()
        [0, -1, -1]
    """
    S = np.asarray(S, dtype=np.float64)
    own_idx = np.flatnonzero(own)
    riv_idx = np.flatnonzero(rival)
    So = S[:, own_idx]
    best = So.argmax(axis=1) if So.shape[1] else np.zeros(S.shape[0], dtype=np.int64)
    own_sim = So[np.arange(S.shape[0]), best] if So.shape[1] else np.full(S.shape[0], -np.inf)
    node = own_idx[best] if So.shape[1] else np.full(S.shape[0], -1)
    if riv_idx.size:
        Sr = S[:, riv_idx]
        rb = Sr.argmax(axis=1)
        rival_sim = Sr[np.arange(S.shape[0]), rb]
        rival_node = riv_idx[rb]
    else:
        rival_sim = np.full(S.shape[0], -np.inf)
        rival_node = np.full(S.shape[0], -1)
    ok = (own_sim >= min_similarity) & ~(rival_sim >= own_sim + reject_margin)
    return np.where(ok, node, -1), own_sim, rival_sim, rival_node


@dataclass
class NodeAssignment:
    """The nodes of a sequence of system turns (one task).

    Attributes:
        task: The task whose workflow the turns were mapped to.
        nodes: The assigned action node of each turn, None when rejected (off-workflow).
        best: The nearest own node of each turn, even when rejected.
        own_similarity: Similarity to the best own node, per turn.
        rival_similarity: Similarity to the best node of another workflow (``-inf`` if none).
        rival: ``"task:node"`` of that node, per turn (None if none).
        reasons: Per turn: None (assigned), ``"off-task"`` (another workflow fits better) or
            ``"unfamiliar"`` (no node within ``min_similarity``).
        second_similarity: Similarity to the second best own node, per turn (``-inf`` when the task
            has one node; empty when not computed): how far the best node leads.
    """

    task: str
    nodes: list[str | None]
    best: list[str]
    own_similarity: np.ndarray
    rival_similarity: np.ndarray
    rival: list[str | None]
    reasons: list[str | None] = field(default_factory=list)
    second_similarity: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def off_task_margin(self) -> np.ndarray:
        """``rival_similarity - own_similarity`` per turn (positive: another workflow fits better)."""
        return self.rival_similarity - self.own_similarity


class NodeAssigner:
    """Maps system turns to their workflow's nodes, rejecting turns of other workflows.

    Args:
        encoder: Encoder alias/path or object with ``encode(texts)`` (unit-norm rows); None: every
            call passes embeddings.
        min_similarity: Least similarity to an own node for an assignment (ours, 0.45).
        reject_margin: How much better another workflow's non-generic node must fit (ours, 0.05).

    Fitted attributes (after :meth:`fit`): ``tasks_`` (task -> its node keys), ``keys_`` (every
    node as ``(task, node)``), ``P_`` (text embeddings), ``owners_`` (node index per text row),
    ``generic_`` (generic node names), ``texts_`` (the texts per node key).

    Example:
        >>> from dialfork_dataset.star import StarCorpus              # doctest: +SKIP
        >>> na = NodeAssigner("minilm").fit(StarCorpus("../shared/star"))  # doctest: +SKIP
        >>> na.assign_texts("weather", ["For which city?", "Could I get your PIN?"]).nodes  # doctest: +SKIP
        ['weather_ask_location', None]
    """

    def __init__(
        self,
        encoder: Any = "minilm",
        min_similarity: float = DEFAULT_MIN_SIMILARITY,
        reject_margin: float = DEFAULT_REJECT_MARGIN,
    ):
        self.encoder = encoder
        self.min_similarity = min_similarity
        self.reject_margin = reject_margin

    def _check_params(self) -> None:
        errs = []
        if not isinstance(self.min_similarity, int | float) or not -1 <= self.min_similarity <= 1:
            errs.append(f"min_similarity must be a cosine similarity in [-1, 1], got {self.min_similarity!r}")
        if not isinstance(self.reject_margin, int | float) or not -2 <= self.reject_margin <= 2:
            errs.append(f"reject_margin must be in [-2, 2], got {self.reject_margin!r}")
        if errs:
            raise ValueError("NodeAssigner: " + "; ".join(errs))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Encode texts with the assigner's encoder, rows unit-normalised (the space of :meth:`assign`).

        Args:
            texts: The texts.

        Returns:
            np.ndarray: Shape ``(len(texts), d)``.

        Raises:
            ValueError: The assigner was built without an encoder.
        """
        from .streaming._common import resolve_encoder

        enc = resolve_encoder(self.encoder) if isinstance(self.encoder, str) else self.encoder
        if enc is None:
            raise ValueError("NodeAssigner: no encoder; pass embeddings or construct it with encoder=")
        E = np.asarray(enc.encode(list(texts)), dtype=np.float64)
        n = np.linalg.norm(E, axis=1, keepdims=True)
        return E / np.where(n > 0, n, 1.0)

    def fit(
        self,
        source: Any,
        tasks: Sequence[str] | None = None,
        dialogues: Sequence[Mapping[str, Any]] | None = None,
    ) -> NodeAssigner:
        """Encode the texts of every node of ``source``'s workflows.

        Args:
            source: A workflow source (:class:`~dialfork_dataset.star.StarCorpus`, a workflow
                file's corpus) or a mapping task name -> workflow task.
            tasks: The tasks to read (default: all of the source). Every task read is also a rival
                of the others: give all of them for the best rejection.
            dialogues: Optional labelled conformant dialogues: records with ``task``, ``turns`` and
                ``system_nodes`` (the node of each system turn, None to skip one); their system
                turns join their nodes' texts.

        Returns:
            self.

        Raises:
            ValueError: Invalid parameters, an unknown task, a labelled dialogue whose
                ``system_nodes`` do not match its system turns (every one listed).
            WorkflowTextError: A step without text (every one named).
        """
        self._check_params()
        all_tasks = source if isinstance(source, Mapping) else getattr(source, "tasks", None)
        if not isinstance(all_tasks, Mapping) or not all_tasks:
            raise ValueError(
                "NodeAssigner.fit: source has no tasks (give a StarCorpus, a workflow corpus "
                "or a mapping task name -> task)"
            )
        names = list(all_tasks) if tasks is None else list(tasks)
        unknown = [t for t in names if t not in all_tasks]
        if unknown:
            raise ValueError(
                f"NodeAssigner.fit: unknown task(s) {', '.join(map(repr, unknown))}; "
                f"the source has {', '.join(sorted(all_tasks))}"
            )
        per_task: dict[str, dict[str, list[str]]] = {}
        errors: list[str] = []
        for t in names:
            try:
                per_task[t] = node_texts(all_tasks[t])
            except WorkflowTextError as e:
                errors.append(str(e))
        if errors:
            raise WorkflowTextError("; ".join(errors))
        texts: dict[tuple[str, str], list[str]] = {
            (t, n): list(v) for t, nodes in per_task.items() for n, v in nodes.items()
        }
        for i, d in enumerate(dialogues or ()):
            labels = d.get("system_nodes")
            t = d.get("task")
            if labels is None or t not in per_task:
                continue
            sys = [x["text"] for x in d["turns"] if x["speaker"] == "system"]
            if len(labels) != len(sys):
                errors.append(
                    f"dialogue {d.get('dialogue_id', i)!r}: {len(labels)} system_nodes for {len(sys)} system turns"
                )
                continue
            for text, lab in zip(sys, labels):
                if lab is not None and (t, lab) in texts and text.strip():
                    texts[(t, lab)].append(" ".join(text.split()))
        if errors:
            raise ValueError("NodeAssigner.fit: " + "; ".join(errors))
        self.keys_ = list(texts)
        self.texts_ = {k: list(dict.fromkeys(v)) for k, v in texts.items()}
        flat, owners = [], []
        for i, k in enumerate(self.keys_):
            flat.extend(self.texts_[k])
            owners.extend([i] * len(self.texts_[k]))
        self.P_ = self.encode(flat)
        self.owners_ = np.asarray(owners, dtype=np.int64)
        self.tasks_ = {t: [(t, n) for n in per_task[t]] for t in names}
        self._index_masks(per_task)
        self.question_mask_ = _question_mask(self.keys_, self.texts_)
        logger.info("node assigner: %d tasks, %d nodes, %d texts", len(names), len(self.keys_), len(flat))
        return self

    def with_examples(self, parts: Sequence[tuple[str, np.ndarray]]) -> NodeAssigner:
        """A copy whose nodes also hold the given system turns of conformant dialogues.

        Each turn joins the node of its task it is nearest to (no rejection: a conformant dialogue's
        turns are its workflow's by definition), so a turn that the workflow's texts say poorly
        (e.g. a trivia question that the template ``{question}`` cannot match) becomes familiar.

        Args:
            parts: ``(task, embeddings)`` pairs, embeddings of shape ``(n, d)``.

        Returns:
            NodeAssigner: A new fitted assigner (this one is unchanged).

        Raises:
            KeyError: A task was not fitted.
        """
        self.check_is_fitted()
        rows, owners = [self.P_], [self.owners_]
        for task, E in parts:
            self.task_nodes(task)
            E = np.asarray(E, dtype=np.float64).reshape(-1, self.P_.shape[1])
            if not len(E):
                continue
            S = self.similarities(E)
            own = np.flatnonzero(self._own[task])
            rows.append(E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12))
            owners.append(own[S[:, own].argmax(axis=1)])
        new = NodeAssigner(self.encoder, self.min_similarity, self.reject_margin)
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k.endswith("_") or k.startswith("_")})
        new.P_ = np.concatenate(rows)
        new.owners_ = np.concatenate(owners)
        return new

    def restore(
        self,
        source: Any,
        keys: Sequence[tuple[str, str]],
        tasks: Mapping[str, Sequence[str]],
        P: np.ndarray,
        owners: np.ndarray,
    ) -> NodeAssigner:
        """Rebuild a fitted assigner from saved arrays (what a saved detector keeps).

        Args:
            source: The workflow source it was fitted on (for the node names of each task).
            keys: Every node as ``(task, node)``, in the saved order.
            tasks: task -> its node names.
            P: The text embeddings.
            owners: The node index of each row of ``P``.

        Returns:
            self, fitted.

        Raises:
            ValueError: The arrays do not match the keys.
        """
        keys = [tuple(k) for k in keys]
        owners = np.asarray(owners, dtype=np.int64)
        if len(owners) != len(P) or (owners.size and (owners.min() < 0 or owners.max() >= len(keys))):
            raise ValueError(
                f"saved node assigner: {len(P)} embeddings, {len(owners)} owners, {len(keys)} nodes "
                "do not match (a corrupt or edited file: refit and save again)"
            )
        self.keys_ = keys
        self.P_ = np.asarray(P, dtype=np.float64)
        self.owners_ = owners
        self.tasks_ = {t: [(t, n) for n in ns] for t, ns in tasks.items()}
        all_tasks = source if isinstance(source, Mapping) else getattr(source, "tasks", {})
        texts = {t: node_texts(all_tasks[t]) if t in all_tasks else {} for t in tasks}
        self.texts_ = {k: list(texts.get(k[0], {}).get(k[1], [])) for k in keys}
        self._index_masks({t: list(ns) for t, ns in tasks.items()})
        self.question_mask_ = _question_mask(self.keys_, self.texts_)
        return self

    def _index_masks(self, per_task: Mapping[str, Sequence[str]]) -> None:
        counts: dict[str, int] = {}
        for nodes in per_task.values():
            for n in nodes:
                counts[n] = counts.get(n, 0) + 1
        self.generic_ = frozenset(
            GENERIC_NODE_NAMES
            | {n for n, c in counts.items() if c > 1}
            | {n for n in counts if "bye" in n.split("_")}
        )
        key_task = np.array([k[0] for k in self.keys_], dtype=object)
        key_name = np.array([k[1] for k in self.keys_], dtype=object)
        key_universal = np.array([_universal(k[1]) for k in self.keys_], dtype=bool)
        self._own = {t: key_task == t for t in per_task}
        # another workflow's node is evidence of that workflow unless this task has a node of the same
        # name (shared steps such as ask_name within a domain) or it is universal (hello, bye...)
        self._rival = {
            t: (key_task != t) & ~key_universal & ~np.isin(key_name, list(nodes))
            for t, nodes in per_task.items()
        }

    def check_is_fitted(self) -> None:
        """Raise unless :meth:`fit` has run.

        Raises:
            NotFittedError: Not fitted yet.
        """
        if not hasattr(self, "P_"):
            from .streaming._common import NotFittedError

            raise NotFittedError("NodeAssigner is not fitted: call fit(source) first")

    def similarities(self, E: np.ndarray) -> np.ndarray:
        """Similarity of turns to every node of every task (columns in :attr:`keys_` order).

        Args:
            E: Turn embeddings, shape ``(n, d)``.

        Returns:
            np.ndarray: shape ``(n, len(keys_))``.
        """
        self.check_is_fitted()
        E = np.asarray(E, dtype=np.float64).reshape(-1, self.P_.shape[1])
        n = np.linalg.norm(E, axis=1, keepdims=True)
        return node_similarities(E / np.where(n > 0, n, 1.0), self.P_, self.owners_, len(self.keys_))

    def task_nodes(self, task: str) -> list[str]:
        """The action nodes of ``task`` the assigner knows.

        Args:
            task: A fitted task.

        Returns:
            list[str]: Node names.

        Raises:
            KeyError: ``task`` was not fitted (the message lists the fitted ones).
        """
        self.check_is_fitted()
        if task not in self.tasks_:
            raise KeyError(
                f"task {task!r} is not among the node assigner's tasks ({', '.join(sorted(self.tasks_))})"
            )
        return [n for _, n in self.tasks_[task]]

    def assign(self, task: str, embeddings: np.ndarray, texts: Sequence[str] | None = None) -> NodeAssignment:
        """Assign system turns of ``task`` (given as embeddings) to its nodes.

        Args:
            task: The task the turns should follow.
            embeddings: Their embeddings, shape ``(n, d)`` (the assigner's encoder's space).
            texts: The turns' texts, when at hand: a turn that asks nothing (:func:`asks`) is then
                not assigned to a question step (a node whose texts ask), so "Tuesday is a great
                day to talk about the weather." does not count as asking for the day.

        Returns:
            NodeAssignment: Per turn node (None: rejected), similarities and rival.

        Raises:
            KeyError: ``task`` was not fitted.
            NotFittedError: Not fitted.
        """
        self.task_nodes(task)
        S = self.similarities(embeddings)
        if texts is not None:
            if len(texts) != len(S):
                raise ValueError(f"{len(texts)} texts for {len(S)} embeddings")
            q = self.question_mask_
            for i, t in enumerate(texts):
                if not asks(t):
                    S[i, q] = -np.inf
        node, own_sim, rival_sim, rival_node = assign_rows(
            S, self._own[task], self._rival[task], float(self.min_similarity), float(self.reject_margin)
        )
        So = S[:, self._own[task]]
        best_own = np.flatnonzero(self._own[task])[So.argmax(axis=1)] if len(S) else np.zeros(0, int)
        second = (
            -np.partition(-So, 1, axis=1)[:, 1] if len(S) and So.shape[1] > 1 else np.full(len(S), -np.inf)
        )
        reasons: list[str | None] = []
        for i in range(len(node)):
            if node[i] >= 0:
                reasons.append(None)
            elif rival_sim[i] >= own_sim[i] + self.reject_margin:
                reasons.append("off-task")
            else:
                reasons.append("unfamiliar")
        return NodeAssignment(
            task=task,
            nodes=[self.keys_[i][1] if i >= 0 else None for i in node],
            best=[self.keys_[i][1] for i in best_own],
            own_similarity=own_sim,
            rival_similarity=rival_sim,
            rival=[f"{self.keys_[i][0]}:{self.keys_[i][1]}" if i >= 0 else None for i in rival_node],
            reasons=reasons,
            second_similarity=second,
        )

    def assign_texts(self, task: str, texts: Sequence[str]) -> NodeAssignment:
        """Encode system turns with the assigner's encoder and assign them.

        Args:
            task: The task the turns should follow.
            texts: The system turns.

        Returns:
            NodeAssignment: As :meth:`assign`.
        """
        texts = list(texts)
        return self.assign(
            task, self.encode(texts) if texts else np.zeros((0, self.P_.shape[1])), texts=texts
        )


__all__ = [
    "asks",
    "DEFAULT_MIN_SIMILARITY",
    "DEFAULT_REJECT_MARGIN",
    "NodeAssigner",
    "NodeAssignment",
    "WorkflowTextError",
    "assign_rows",
    "node_similarities",
    "node_texts",
]
