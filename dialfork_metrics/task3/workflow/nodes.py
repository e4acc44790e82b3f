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

Which own step a turn says can be read by the learned step reader (:mod:`.reader`, ``reader="auto"``:
the shipped head over the packaged MiniLM, whenever the encoder is that MiniLM; 92.6% of held-out SGD
services' turns against 80.4% by cosine, benchmarks/results/reader.md), which also gives the
calibrated probability of the step (:attr:`NodeAssignment.prob`); ``reader=None`` (the default) is
the cosine assigner. Rejection (off-task, unfamiliar) stays the cosine rule's.

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

from .generic import GENERIC_ROLES as _GENERIC_ROLE
from .generic import GENERIC_TASK, GENERIC_TURNS, as_task_step

logger = logging.getLogger("dialfork_metrics.task3.workflow.nodes")

DEFAULT_MIN_SIMILARITY = 0.45
"""Least cosine similarity to a node of the task's own workflow for a turn to be assigned (ours)."""
DEFAULT_REJECT_MARGIN = 0.05
"""How much better another task's (non-generic) node must fit a turn to reject it as off-task (ours)."""
DEFAULT_READER: Any = None
"""The node assigner's default step reader (:class:`NodeAssigner`'s ``reader``): None, cosine; the
learned reader is opt-in (``reader="auto"``; docs/task3_detectors.md, "The learned reader")."""
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


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


def placeholder_values(task: Any) -> dict[str, list[str]]:
    """The values a step text's ``{placeholder}`` may take: the task's API fields' categories, else
    their examples (input and output fields; keys normalised: lower case, letters and digits).

    Args:
        task: A workflow task (``api.inputs`` / ``api.outputs`` of STAR-style fields).

    Returns:
        dict[str, list[str]]: normalised field name -> its values (fields without any left out).
    """
    api = getattr(task, "api", None)
    fields = [*(getattr(api, "inputs", None) or ()), *(getattr(api, "outputs", None) or ())]
    out: dict[str, list[str]] = {}
    for f in fields:
        if not isinstance(f, Mapping):
            continue
        vals = [str(v) for v in (f.get("Categories") or f.get("Examples") or ()) if str(v).strip()]
        if vals and f.get("Name"):
            out.setdefault(_norm(f["Name"]), vals)
    return out


def realise(text: str, values: Mapping[str, Sequence[str]], k: int) -> list[str]:
    """Up to ``k`` variants of a step text with its ``{placeholders}`` filled with values (the i-th
    variant takes each placeholder's i-th value, cycling); a placeholder without values is spelled.

    Args:
        text: A step text.
        values: Normalised placeholder name -> values (:func:`placeholder_values`).
        k: How many variants.

    Returns:
        list[str]: The variants ([] when no placeholder has a value).

    Example:
        >>> realise("Weather for {day_name} in {city}?", {"city": ["Paris", "Oslo"]}, 2)
        ['Weather for day name in Paris?', 'Weather for day name in Oslo?']
    """
    names = [m.group(1) for m in _PH.finditer(str(text))]
    if k <= 0 or not any(_norm(n) in values for n in names):
        return []
    out = []
    for i in range(k):

        def fill(m: re.Match, i: int = i) -> str:
            vals = values.get(_norm(m.group(1)))
            return str(vals[i % len(vals)]) if vals else m.group(1).replace("_", " ")

        out.append(" ".join(_PH.sub(fill, str(text)).split()))
    return list(dict.fromkeys(out))


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
    from dialfork_dataset.workflow.check import step_text_problem, textless_steps

    # the check `workflow validate` runs on a file (dialfork_dataset.workflow.check): same steps refused
    errors = [step_text_problem(task.name, n, "star") for n in textless_steps(task)]
    if errors:
        raise WorkflowTextError("; ".join(errors))
    out: dict[str, list[str]] = {}
    for node, kind in task.kinds.items():
        if kind != "action":
            continue
        cands = [task.template(node), task.replies.get(node), *(task.nlu.get(node) or ())]
        out[node] = list(dict.fromkeys(t for t in (_spell(c) for c in cands if isinstance(c, str)) if t))
    return out


def node_similarities(
    E: np.ndarray, P: np.ndarray, owners: np.ndarray, n_nodes: int, exclude: np.ndarray | None = None
) -> np.ndarray:
    """Similarity of each turn to each node: the best cosine over the node's texts.

    Args:
        E: Turn embeddings, shape ``(n, d)``, unit-norm rows.
        P: Text embeddings of all nodes, shape ``(m, d)``, unit-norm rows.
        owners: The node index of each row of ``P``, shape ``(m,)``, values in ``[0, n_nodes)``.
        n_nodes: The number of nodes.
        exclude: Optional, per turn the row of ``P`` it is not compared with (its own text, to
            score a text without itself), shape ``(n,)``.

    Returns:
        np.ndarray: shape ``(n, n_nodes)``; ``-inf`` for a node without texts.

    Example:
        >>> E = np.array([[1.0, 0.0]]); P = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
        >>> node_similarities(E, P, np.array([0, 1, 1]), 2).round(2).tolist()
        [[1.0, 0.6]]
    """
    E = np.asarray(E, dtype=np.float64).reshape(-1, np.asarray(P).shape[-1] if np.asarray(P).size else 0)
    S = E @ np.asarray(P, dtype=np.float64).T
    if exclude is not None:
        S[np.arange(E.shape[0]), np.asarray(exclude, dtype=np.int64)] = -np.inf
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


def _signatures(
    per_task: Mapping[str, Sequence[str]], all_tasks: Mapping[str, Any]
) -> tuple[dict[tuple[str, str], frozenset[tuple[str, str]]], dict[str, list[str]]]:
    """``(task, node) -> `` its step signatures (:func:`~dialfork_dataset.workflow.roles.step_signatures`),
    and task -> its closing steps; a task whose roles cannot be derived shares nothing."""
    from dialfork_dataset.workflow.roles import derive_roles, step_signatures

    out: dict[tuple[str, str], frozenset[tuple[str, str]]] = {}
    closings: dict[str, list[str]] = {}
    for t in per_task:
        if t not in all_tasks:
            continue
        try:
            roles = derive_roles(all_tasks[t])
        except Exception as e:  # a source whose task the role rule cannot read: no shared steps
            logger.warning("task %r: no step roles (%s): it shares no step with other workflows", t, e)
            continue
        out.update({(t, n): s for n, s in step_signatures(roles).items()})
        closings[t] = roles.with_role("closing")
    return out, closings


ALSO_MIN_SIMILARITY = 0.6
"""How similar a turn must be to another own step to say it as well (ours; cosine, the packaged
MiniLM): on the sgd track's workflows, "What is your destination? Where are you leaving from and
when?" is 0.70 to the destination question and 0.84 to the origin one, while one question is
rarely above 0.6 to a question for another slot."""


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
        prob: With a reader (:mod:`.reader`), the calibrated probability that ``best`` is the turn's
            step, per turn; NaN without one (empty when not computed).
        also: Per turn, the other own steps it says about as well as ``best`` (similarity at least
            :data:`ALSO_MIN_SIMILARITY`): the other questions of "Where from, and where to?"; the
            tracker tells a slot reader that their slots were asked (empty when not computed).
    """

    task: str
    nodes: list[str | None]
    best: list[str]
    own_similarity: np.ndarray
    rival_similarity: np.ndarray
    rival: list[str | None]
    reasons: list[str | None] = field(default_factory=list)
    second_similarity: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prob: np.ndarray = field(default_factory=lambda: np.zeros(0))
    also: list[tuple[str, ...]] = field(default_factory=list)

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
        shared_steps: Steps that workflows share are nobody's rivals: another task's step whose
            role and slot concept one of this task's steps has (:func:`~dialfork_dataset.workflow.roles.step_signatures`:
            asking for a date, a place, a count; a confirmation; a closing) is no evidence of
            another workflow, and the generic phrasings any agent says
            (:mod:`.workflow_generic`: closings, thanks, fillers, acknowledgements) are nodes of
            every task (False: the assigner before shared steps; what the audit and the
            conformance check use).
        realise: Each step text with ``{placeholders}`` also joins its step in this many variants
            filled with the slot's values (:func:`realise`; the API field's categories, else its
            examples), so a turn full of values resembles its step (0: only the spelled text).
        reader: Which own step a turn says is read by a learned step reader
            (:class:`~.reader.steps.StepReader`) instead of the nearest text by cosine; rejection
            (off-task, unfamiliar) stays the cosine rule's. None: cosine only (the assigner before
            the reader); ``"auto"``: the shipped reader when the encoder is the one it was trained
            for (the packaged MiniLM), else none; ``"default"``: the shipped reader, refused for
            another encoder; a :class:`~.reader.steps.StepReader`, a folder or a Hub id.

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
        shared_steps: bool = False,
        realise: int = 0,
        reader: Any = DEFAULT_READER,
    ):
        self.encoder = encoder
        self.min_similarity = min_similarity
        self.reject_margin = reject_margin
        self.shared_steps = shared_steps
        self.realise = realise
        self.reader = reader

    def _resolve_reader(self) -> None:
        """Set ``reader_`` (a StepReader or None) from :attr:`reader` and the encoder."""
        spec = getattr(self, "reader", None)
        self.reader_ = None
        if spec is None:
            return
        from .reader.steps import StepReader, default_reader

        if isinstance(spec, StepReader):
            reader = spec
        elif spec in ("auto", "default"):
            reader = default_reader()
        else:
            reader = StepReader.from_pretrained(spec)
        enc = self.encoder
        if isinstance(enc, str):
            from ..streaming._common import resolve_encoder

            enc = resolve_encoder(enc)
        if enc is None:
            if spec == "auto":
                return
            raise ValueError("NodeAssigner: a step reader needs the encoder (construct it with encoder=)")
        if spec == "auto":
            try:
                same = reader.matches(enc)
            except Exception as e:  # an encoder that cannot encode the probes (a test's stand-in)
                logger.info("node assigner: encoder %r cannot be fingerprinted (%s): cosine only", enc, e)
                same = False
            if same:
                self.reader_ = reader
            else:
                logger.info("node assigner: encoder %r is not the reader's: cosine only", enc)
            return
        reader.check_encoder(enc)
        self.reader_ = reader

    def _read(self, E: np.ndarray, q_rows: Sequence[int], own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The reader's own node (index into :attr:`keys_`) and calibrated probability per turn."""
        reader = self.reader_
        cache = getattr(self, "_reader_cache", None)
        if cache is None or cache[0] is not self.P_:
            cache = (self.P_, reader.project(self.P_))
            self._reader_cache = cache
        S = node_similarities(reader.project(E), cache[1], self.owners_, len(self.keys_))
        for i in q_rows:
            S[i, self.question_mask_] = -np.inf
        own_idx = np.flatnonzero(own)
        pr = reader.probabilities(S[:, own_idx])[:, :-1]
        best = pr.argmax(axis=1) if len(pr) else np.zeros(0, np.int64)
        return own_idx[best], reader.calibrated(pr[np.arange(len(pr)), best])

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
        from ..streaming._common import resolve_encoder

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
        if self.realise:
            for t in names:
                vals = placeholder_values(all_tasks[t])
                for n in per_task[t]:
                    raw = [all_tasks[t].template(n), *(all_tasks[t].nlu.get(n) or ())]
                    texts[(t, n)] += [
                        v for x in raw if isinstance(x, str) for v in realise(x, vals, self.realise)
                    ]
        if self.shared_steps:
            texts.update({(GENERIC_TASK, n): list(v) for n, v in GENERIC_TURNS.items()})
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
        flat, owners, derived = [], [], []
        own_texts = {(t, n): set(v) for t, nodes in per_task.items() for n, v in nodes.items()}
        for i, k in enumerate(self.keys_):
            flat.extend(self.texts_[k])
            owners.extend([i] * len(self.texts_[k]))
            derived.extend(x not in own_texts.get(k, ()) for x in self.texts_[k])
        self.P_ = self.encode(flat)
        self.owners_ = np.asarray(owners, dtype=np.int64)
        # rows that are not the workflow's own phrasings (value variants, generic turns, labelled turns)
        self.derived_ = np.asarray(derived, dtype=bool)
        self.tasks_ = {t: [(t, n) for n in per_task[t]] for t in names}
        self._index_masks(per_task, all_tasks)
        self.question_mask_ = _question_mask(self.keys_, self.texts_)
        self._resolve_reader()
        logger.info("node assigner: %d tasks, %d nodes, %d texts", len(names), len(self.keys_), len(flat))
        return self

    def with_examples(self, parts: Sequence[tuple[Any, ...]]) -> NodeAssigner:
        """A copy whose nodes also hold the given system turns of conformant dialogues.

        A turn given with its node (a label, or a confident assignment: self-training) joins that
        node; a turn given without one joins the node of its task it is nearest to (no rejection: a
        conformant dialogue's turns are its workflow's by definition), so a turn that the workflow's
        texts say poorly (e.g. a trivia question that the template ``{question}`` cannot match)
        becomes familiar. Generic nodes (:mod:`.workflow_generic`) never take a turn.

        Args:
            parts: ``(task, embeddings)`` pairs, embeddings of shape ``(n, d)``, or
                ``(task, embeddings, nodes)`` triples: ``nodes`` names each row's node, None to
                leave the row out.

        Returns:
            NodeAssigner: A new fitted assigner (this one is unchanged).

        Raises:
            KeyError: A task was not fitted.
        """
        self.check_is_fitted()
        rows, owners = [self.P_], [self.owners_]
        index = {k: i for i, k in enumerate(self.keys_)}
        for part in parts:
            task, E = part[0], part[1]
            self.task_nodes(task)
            E = np.asarray(E, dtype=np.float64).reshape(-1, self.P_.shape[1])
            if not len(E):
                continue
            E = E / np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-12)
            if len(part) > 2:
                owner = np.array([index.get((task, n), -1) if n is not None else -1 for n in part[2]])
                keep = owner >= 0
                rows.append(E[keep])
                owners.append(owner[keep])
                continue
            own = np.flatnonzero(self._own[task] & ~self._generic_mask)
            rows.append(E)
            owners.append(own[self.similarities(E)[:, own].argmax(axis=1)])
        new = NodeAssigner(
            self.encoder,
            self.min_similarity,
            self.reject_margin,
            self.shared_steps,
            self.realise,
            getattr(self, "reader", None),
        )
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k.endswith("_") or k.startswith("_")})
        new.P_ = np.concatenate(rows)
        new.owners_ = np.concatenate(owners)
        base = getattr(self, "derived_", np.zeros(len(self.P_), dtype=bool))
        new.derived_ = np.concatenate([base, np.ones(len(new.P_) - len(base), dtype=bool)])
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
        texts[GENERIC_TASK] = {n: list(v) for n, v in GENERIC_TURNS.items()}
        self.texts_ = {k: list(texts.get(k[0], {}).get(k[1], [])) for k in keys}
        self._index_masks({t: list(ns) for t, ns in tasks.items()}, all_tasks)
        self.question_mask_ = _question_mask(self.keys_, self.texts_)
        self._resolve_reader()
        return self

    def _index_masks(self, per_task: Mapping[str, Sequence[str]], all_tasks: Mapping[str, Any]) -> None:
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
        self._generic_mask = key_task == GENERIC_TASK
        self._own = {t: (key_task == t) | self._generic_mask for t in per_task}
        # another workflow's node is evidence of that workflow unless this task has a node of the same
        # name (shared steps such as ask_name within a domain) or it is universal (hello, bye...), or
        # (shared_steps) one of this task's steps has its role and slot concept
        sigs, self._closings = _signatures(per_task, all_tasks) if self.shared_steps else ({}, {})
        key_sig = [sigs.get(k, frozenset()) for k in self.keys_]
        self._rival = {}
        for t, nodes in per_task.items():
            mine = frozenset().union(*(sigs.get((t, n), frozenset()) for n in nodes))
            shared = np.array([bool(s & mine) for s in key_sig], dtype=bool)
            self._rival[t] = (
                (key_task != t)
                & ~self._generic_mask
                & ~key_universal
                & ~np.isin(key_name, list(nodes))
                & ~shared
            )

    def check_is_fitted(self) -> None:
        """Raise unless :meth:`fit` has run.

        Raises:
            NotFittedError: Not fitted yet.
        """
        if not hasattr(self, "P_"):
            from ..streaming._common import NotFittedError

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

    def own_nodes(self, task: str) -> list[str]:
        """Every node a turn of ``task`` may be assigned: its action nodes and, with shared steps, the
        generic ones (:mod:`.workflow_generic`).

        Args:
            task: A fitted task.

        Returns:
            list[str]: Node names.

        Raises:
            KeyError: ``task`` was not fitted.
        """
        self.task_nodes(task)
        return [k[1] for k, own in zip(self.keys_, self._own[task]) if own]

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
        q_rows: list[int] = []
        if texts is not None:
            if len(texts) != len(S):
                raise ValueError(f"{len(texts)} texts for {len(S)} embeddings")
            q = self.question_mask_
            q_rows = [i for i, t in enumerate(texts) if not asks(t)]
            for i in q_rows:
                S[i, q] = -np.inf
        node, own_sim, rival_sim, rival_node = assign_rows(
            S, self._own[task], self._rival[task], float(self.min_similarity), float(self.reject_margin)
        )
        So = S[:, self._own[task]]
        best_own = np.flatnonzero(self._own[task])[So.argmax(axis=1)] if len(S) else np.zeros(0, int)
        prob = np.full(len(S), np.nan)
        if getattr(self, "reader_", None) is not None and len(S):
            read, prob = self._read(embeddings, q_rows, self._own[task])
            # a turn nearest to a generic phrasing without a role (thanks, filler, acknowledgement)
            # stays that: the reader never saw such a step as a gold one (SGD has none)
            keep = np.array(
                [self._generic_mask[i] and not _GENERIC_ROLE.get(self.keys_[i][1]) for i in best_own]
            )
            best_own = np.where(keep, best_own, read)
            prob = np.where(keep, np.nan, prob)
            node = np.where(node >= 0, best_own, -1)
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
        closings = getattr(self, "_closings", {}).get(task, [])
        own_idx = np.flatnonzero(self._own[task])
        near = (So >= ALSO_MIN_SIMILARITY) & ~np.asarray(self._generic_mask, dtype=bool)[own_idx]
        near &= own_idx[None, :] != np.asarray(best_own).reshape(-1, 1)
        also = [tuple(self.keys_[j][1] for j in own_idx[row]) for row in near]
        return NodeAssignment(
            task=task,
            nodes=[as_task_step(self.keys_[i][1], closings) if i >= 0 else None for i in node],
            best=[as_task_step(self.keys_[i][1], closings) for i in best_own],
            own_similarity=own_sim,
            rival_similarity=rival_sim,
            rival=[f"{self.keys_[i][0]}:{self.keys_[i][1]}" if i >= 0 else None for i in rival_node],
            reasons=reasons,
            second_similarity=second,
            prob=prob,
            also=also,
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
    "ALSO_MIN_SIMILARITY",
    "asks",
    "DEFAULT_MIN_SIMILARITY",
    "DEFAULT_REJECT_MARGIN",
    "NodeAssigner",
    "NodeAssignment",
    "WorkflowTextError",
    "assign_rows",
    "node_similarities",
    "node_texts",
    "placeholder_values",
    "realise",
]
