"""The pure rules of the workflow-aware detector ``wf`` (:mod:`.workflow_detector`): the repeat
and order rules over a workflow graph (SSPC: a step repeated, reversed or jumped over), the per-turn deviation, the own-workflow floor read off the workflow's
texts, and where a detector finds the dialogues' workflow. Functions over arrays and plain values."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .nodes import DEFAULT_MIN_SIMILARITY, NodeAssigner

DEFAULT_REJECT_MARGIN = 0.1
"""Margin by which another workflow must fit a turn better before it counts against it (ours)."""
DEFAULT_REPEAT_WEIGHT = 1.0
"""Deviation added by an answered question step asked again (ours). 1.0: every repeat alarms (an
on-workflow turn's deviation is above -1). STAR's human wizards re-ask answered steps in 12% of
their conformant dialogues, but (on the human fit split) only in trivia, whose graph does not draw
its question loop: a question step the task's conformant fit dialogues repeat is *repeatable*
(``WorkflowDetector.repeatable_``) and never a repeat; the other steps of the task keep the rule
(``looping_`` lists the tasks with such a step). 0 turns the rule off."""
DEFAULT_ORDER_WEIGHT = 0.0
"""Deviation added by a step said after a later step of the workflow (:func:`order_flags`; ours).
1.0: every such turn alarms; 0 (default) turns the rule off. Off by default because it costs more
on real text than it brings (benchmarks/bench_task3_tracks.py, no human fit): on the template
test it raises SSPC recall at 5% false alarms from 25.0% (repeat rule only) to 58.3%, but on
STAR's human-picked dialogues it raises three early false alarms (a new request after the
outcome, a retry after a failed booking, a confirmation read as a question), which lowers the
Score from 91.9 to 71.0 and recall at 1% false alarms from 0.613 to 0.271."""
SWITCHABLE_RULES: tuple[str, ...] = (
    "repeat",
    "order",
    "skip-requires",
    "skip-closing",
    "repeat-slot",
    "repeat-confirmation",
)
"""The rules :func:`~.fit.rule_budget` may switch off for a task, one by one: the role-free
repeat and order rules, then the dialogue-state rules (:data:`~.state.RULES`)."""
REPEAT_RULES: tuple[str, ...] = ("repeat", "repeat-slot", "repeat-confirmation")
"""Rules that flag a repeat: a turn they flag adds ``repeat_weight`` once, whichever flags it."""
CALIBRATIONS = ("cross_fit", "in_sample")
ROUTE_MARGIN = 0.1
"""Lead of the best task's user-turn similarity needed to route a dialogue without a ``task`` (ours);
until then a system turn counts against the fitted task it fits best."""
THRESHOLD_RULES = ("percentile", "conformal", "upper_bound")


# -- pure core --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkflowStructure:
    """What the repeat rule reads of a workflow graph.

    Attributes:
        asks: The question steps (action nodes whose name has the word ``ask``, not ``confirm``,
            and whose text is not only placeholders: :func:`~dialfork_dataset.workflow.roles.says_only_values`).
        leads_to: node -> the nodes reachable from it in the workflow graph.
        resets: Action nodes with no next step (after them a conversation may start over).
        failures: Action nodes that say a failure or a refusal (:data:`FAILURE_WORDS` in their id,
            or reached only through outcome branches with such a word: ``unavailable``,
            ``query_failure``, ``no``): after one, the workflow's loop back to a question is taken.
    """

    asks: frozenset[str]
    leads_to: Mapping[str, frozenset[str]]
    resets: frozenset[str]
    failures: frozenset[str] = frozenset()


FAILURE_WORDS = frozenset(
    {
        "nothing",
        "unavailable",
        "failed",
        "failure",
        "fail",
        "cannot",
        "incorrect",
        "not",
        "no",
        "noanswer",
        "missing",
        "declines",
        "declined",
        "unable",
        "error",
        "invalid",
        "wrong",
        "rejected",
        "unsuccessful",
        "full",
    }
)
"""Words of a step or outcome id that say the lookup failed or the user refused (ours; STAR's
``*_nothing_found``, ``*_unavailable``, ``*_failed``, outcomes ``unavailable``, ``query_failure``,
``no``, ``incorrect``; SGD's ``declines``)."""


def _id_words(name: str) -> set[str]:
    return set(re.findall(r"[a-z]+", name.lower()))


def workflow_structure(task: Any) -> WorkflowStructure:
    """The :class:`WorkflowStructure` of a workflow task.

    Args:
        task: A workflow task (``kinds`` and ``digraph()``).

    Returns:
        WorkflowStructure: Its question steps, reachability and dead ends.
    """
    import networkx as nx

    g = task.digraph()
    kinds = dict(task.kinds)
    from dialfork_dataset.workflow.roles import says_only_values

    asks = frozenset(
        n
        for n, k in kinds.items()
        if k == "action"
        and "ask" in n.split("_")
        and "confirm" not in n.split("_")
        and not says_only_values(task, n)  # its words are data ("{question:s}"): each round is new
    )
    leads = {n: frozenset(nx.descendants(g, n)) for n in g.nodes}
    resets = frozenset(n for n in g.nodes if kinds.get(n) == "action" and not leads[n])

    def via_failure(n: str) -> bool:  # every way into it is a failure outcome (not a shared step)
        preds = list(g.predecessors(n)) if n in g else []
        return bool(preds) and all(kinds.get(p) == "branch" and _id_words(p) & FAILURE_WORDS for p in preds)

    failures = frozenset(
        n for n, k in kinds.items() if k == "action" and (_id_words(n) & FAILURE_WORDS or via_failure(n))
    )
    return WorkflowStructure(asks, leads, resets, failures)


def repeat_flags(
    nodes: Sequence[str | None],
    answered: Sequence[bool],
    structure: WorkflowStructure,
    repeatable: frozenset[str] | set[str] = frozenset(),
    declined: Sequence[bool] | None = None,
) -> np.ndarray:
    """Whether each system turn asks again a question step answered earlier (the SSPC repeat).

    A turn at node ``n`` repeats when ``n`` is a question step said before at turn ``i``, a user
    turn answered turn ``i``, some other step was said in between (an immediate re-ask is a
    clarification), and the loop back to ``n`` was not taken: no step said in between is a failure
    outcome (``structure.failures``: "that day is not available") or a dead end (after which a
    conversation may start over), and the user said no to none of the turns from ``i`` on
    (``declined``). That the graph *can* lead back to ``n`` is no excuse.

    Args:
        nodes: The assigned node of each system turn (None: off-workflow).
        answered: Whether a user turn followed each system turn.
        structure: The task's :class:`WorkflowStructure`.
        repeatable: Nodes that conformant dialogues of the task say more than once (a loop the
            graph does not draw, e.g. STAR trivia's next question): never a repeat.
        declined: Whether the user answered each system turn no
            (:func:`~.state.answer_polarity`); None: never.

    Returns:
        np.ndarray: 0/1 per system turn.

    Example:
        >>> st = WorkflowStructure(frozenset({"ask_day", "ask_city"}), {"ask_day": frozenset({"ask_city"}),
        ...                        "ask_city": frozenset({"ask_day"})}, frozenset(), frozenset({"sorry"}))
        >>> repeat_flags(["ask_day", "ask_city", "ask_day"], [True, True, True], st).tolist()
        [0, 0, 1]
        >>> repeat_flags(["ask_day", "ask_day"], [True, True], st).tolist()  # clarification
        [0, 0]
        >>> repeat_flags(["ask_day", "sorry", "ask_day"], [True] * 3, st).tolist()  # the loop was taken
        [0, 0, 0]
        >>> repeat_flags(["ask_day", "ask_city", "ask_day"], [True] * 3, st, declined=[False, True, False]).tolist()
        [0, 0, 0]
    """
    out = np.zeros(len(nodes), dtype=np.int64)
    last: dict[str, int] = {}
    stops = structure.resets | getattr(structure, "failures", frozenset())
    no = [bool(x) for x in declined] if declined is not None else [False] * len(nodes)
    for j, n in enumerate(nodes):
        if n is None:
            continue
        i = last.get(n)
        if n in structure.asks and n not in repeatable and i is not None and answered[i]:
            between = [m for m in nodes[i + 1 : j] if m is not None]
            if (
                between
                and any(m != n for m in between)
                and not any(m in stops for m in between)
                and not any(no[i:j])
            ):
                out[j] = 1
        last[n] = j
    return out


def order_flags(
    nodes: Sequence[str | None],
    structure: WorkflowStructure,
    allowed: frozenset[tuple[str, str]] | set[tuple[str, str]] = frozenset(),
    *,
    start: str = "hello",
    min_before_start: int = 2,
) -> np.ndarray:
    """Whether each system turn goes back in the workflow (the SSPC reversal and jump, ours).

    A turn at node ``n`` goes back when a step ``m`` said earlier (since the last dead end, after
    which a conversation may start over) is one that ``n`` leads to in the workflow graph while
    ``m`` does not lead back to ``n``, unless

    * both are question steps: slots may be asked in any order (users volunteer them; STAR's
      wizards reorder them in about 4% of their conformant dialogues);
    * ``(m, n)`` is in ``allowed`` (a back step the task's conformant dialogues take:
      :func:`order_pairs`);
    * ``n`` is the ``start`` node and fewer than ``min_before_start`` other steps were said (a
      greeting after the first question is a late greeting, not a restart).

    So a question asked after the outcome it leads to, an outcome said before another that precedes
    it, or a greeting in mid-conversation raise it; a repeated step is :func:`repeat_flags`'s.

    Args:
        nodes: The assigned node of each system turn (None: off-workflow; skipped).
        structure: The task's :class:`WorkflowStructure`.
        allowed: ``(earlier step, later turn's step)`` pairs that never raise it.
        start: The workflow's start node.
        min_before_start: Steps other than ``start`` needed before a ``start`` turn goes back.

    Returns:
        np.ndarray: 0/1 per system turn.

    Example:
        >>> st = WorkflowStructure(frozenset({"ask_day", "ask_city"}),
        ...                        {"hello": frozenset({"ask_day", "ask_city", "inform"}),
        ...                         "ask_day": frozenset({"ask_city", "inform"}), "ask_city": frozenset({"inform"}),
        ...                         "inform": frozenset()}, frozenset())
        >>> order_flags(["hello", "ask_city", "ask_day", "inform"], st).tolist()  # slots in any order
        [0, 0, 0, 0]
        >>> order_flags(["hello", "inform", "ask_day", "ask_city"], st).tolist()  # asked after the outcome
        [0, 0, 1, 1]
        >>> order_flags(["ask_day", "ask_city", "hello"], st).tolist()  # greeting in mid-conversation
        [0, 0, 1]
        >>> order_flags(["hello", "inform", "ask_day"], st, {("inform", "ask_day")}).tolist()
        [0, 0, 0]
    """
    out = np.zeros(len(nodes), dtype=np.int64)
    seen: list[str] = []
    for j, n in enumerate(nodes):
        if n is None:
            continue
        if n in structure.resets:
            seen = []
            continue
        if n != start or sum(m != start for m in seen) >= min_before_start:
            ahead = structure.leads_to.get(n, frozenset())
            for m in seen:
                if (
                    m != n
                    and m in ahead
                    and n not in structure.leads_to.get(m, ())
                    and not (n in structure.asks and m in structure.asks)
                    and (m, n) not in allowed
                ):
                    out[j] = 1
                    break
        seen.append(n)
    return out


def order_pairs(
    nodes: Sequence[str | None],
    structure: WorkflowStructure,
    *,
    start: str = "hello",
    min_before_start: int = 2,
) -> set[tuple[str, str]]:
    """The ``(earlier step, step)`` pairs at which :func:`order_flags` flags a dialogue.

    Fitted on conformant dialogues, they are the back steps a task's conversations take that its
    graph does not draw (e.g. STAR trivia's next question after an answer); the detector passes them
    as ``allowed``.

    Args:
        nodes: The assigned node of each system turn (None: off-workflow).
        structure: The task's :class:`WorkflowStructure`.
        start: As in :func:`order_flags`.
        min_before_start: As in :func:`order_flags`.

    Returns:
        set[tuple[str, str]]: The pairs.

    Example:
        >>> st = WorkflowStructure(frozenset({"ask"}), {"ask": frozenset({"inform"}), "inform": frozenset()},
        ...                        frozenset())
        >>> sorted(order_pairs(["ask", "inform", "ask"], st))
        [('inform', 'ask')]
    """
    out: set[tuple[str, str]] = set()
    seen: list[str] = []
    for n in nodes:
        if n is None:
            continue
        if n in structure.resets:
            seen = []
            continue
        flagged = order_flags(seen + [n], structure, start=start, min_before_start=min_before_start)
        if flagged[-1]:
            ahead = structure.leads_to.get(n, frozenset())
            out.update(
                (m, n)
                for m in seen
                if m != n
                and m in ahead
                and n not in structure.leads_to.get(m, ())
                and not (n in structure.asks and m in structure.asks)
            )
        seen.append(n)
    return out


def turn_deviations(
    own: np.ndarray,
    rival: np.ndarray,
    repeats: np.ndarray | None = None,
    *,
    min_similarity: float = DEFAULT_MIN_SIMILARITY,
    reject_margin: float = DEFAULT_REJECT_MARGIN,
    repeat_weight: float = DEFAULT_REPEAT_WEIGHT,
    order: np.ndarray | None = None,
    order_weight: float = DEFAULT_ORDER_WEIGHT,
) -> np.ndarray:
    """The deviation of each system turn (see the module doc); positive: the assigner rejects it.

    Args:
        own: Similarity to the best node of the task's own workflow, per system turn.
        rival: Similarity to the best node of another workflow (``-inf``: none).
        repeats: 0/1 repeat flags (:func:`repeat_flags`), or None.
        min_similarity: The absolute floor of the own similarity.
        reject_margin: How much better another workflow must fit.
        repeat_weight: Deviation added by a repeat.
        order: 0/1 flags of a step said after a later one (:func:`order_flags`), or None.
        order_weight: Deviation added by such a step.

    Returns:
        np.ndarray: float64 per system turn.

    Example:
        >>> turn_deviations(np.array([0.9, 0.3, 0.6]), np.array([0.2, 0.2, 0.8]), min_similarity=0.45,
        ...                 reject_margin=0.1).round(2).tolist()
        [-0.45, 0.15, 0.1]
        >>> turn_deviations(np.array([0.9, 0.9]), np.array([0.2, 0.2]), None, order=np.array([0, 1]),
        ...                 min_similarity=0.45, reject_margin=0.1, order_weight=1.0).round(2).tolist()
        [-0.45, 0.55]
    """
    own = np.asarray(own, dtype=np.float64)
    rival = np.asarray(rival, dtype=np.float64)
    d = np.maximum(rival - own - reject_margin, min_similarity - own)
    if repeats is not None:
        d = d + repeat_weight * np.asarray(repeats, dtype=np.float64)
    if order is not None:
        d = d + order_weight * np.asarray(order, dtype=np.float64)
    return d


def first_alarm(deviations: np.ndarray, threshold: float) -> int | None:
    """The first system turn (1-based) whose deviation exceeds ``threshold``, or None.

    Args:
        deviations: Per system turn.
        threshold: The alarm threshold.

    Returns:
        int | None: The 1-based system turn index.

    Example:
        >>> first_alarm(np.array([-0.2, 0.05, 0.3]), 0.1)
        3
    """
    hit = np.flatnonzero(np.asarray(deviations) > threshold)
    return int(hit[0]) + 1 if hit.size else None


def auto_min_similarity(assigner: NodeAssigner, quantile: float = 0.05) -> float:
    """The own-similarity floor read off the workflow's own texts (no dialogue needed).

    Each text of each node is held out in turn and compared with every *other* text of its task;
    the floor is the ``quantile`` of those best similarities, so that all but ``quantile`` of the
    workflow's own phrasings (STAR's ``wizard_nlu_training_data.md`` examples are human
    paraphrases) would be recognised as the workflow's. Clipped to [0.3, 0.6].

    Args:
        assigner: A fitted :class:`NodeAssigner` (workflow texts only).
        quantile: The share of the workflow's own phrasings allowed below the floor.

    Returns:
        float: The floor.
    """
    assigner.check_is_fitted()
    keep = ~getattr(assigner, "derived_", np.zeros(len(assigner.P_), dtype=bool))  # its own phrasings only
    P, owners = assigner.P_[keep], assigner.owners_[keep]
    task = np.array([assigner.keys_[i][0] for i in owners], dtype=object)
    best = np.full(len(P), np.nan)
    for t in np.unique(task):
        idx = np.flatnonzero(task == t)
        if len(idx) < 2:
            continue
        S = P[idx] @ P[idx].T
        np.fill_diagonal(S, -np.inf)
        best[idx] = S.max(axis=1)
    v = best[np.isfinite(best)]
    if not v.size:
        return DEFAULT_MIN_SIMILARITY
    return float(np.clip(np.quantile(v, quantile), 0.3, 0.6))


def fit_workflow_assigner(
    source: Any, encoder: Any, min_similarity: float | None = None, reader: Any = None
) -> NodeAssigner:
    """A node assigner over every task of ``source`` (the other tasks are the rivals that reject a
    turn of another workflow), its own-workflow floor read off the workflow's own phrasings
    (:func:`auto_min_similarity`) unless given: what the audit's step coverage and the check of
    generated D+ use.

    Args:
        source: A workflow source (every task is read).
        encoder: The assigner's encoder (alias, path or object with ``encode``).
        min_similarity: The floor; None reads it off the workflow texts.
        reader: The learned step reader (``NodeAssigner(reader=)``: ``"auto"``, a folder or a
            :class:`~.reader.steps.StepReader`); None: cosine only.

    Returns:
        NodeAssigner: The fitted assigner.
    """
    assigner = NodeAssigner(encoder, min_similarity=0.0, reader=reader).fit(source)
    assigner.min_similarity = (
        auto_min_similarity(assigner) if min_similarity is None else float(min_similarity)
    )
    return assigner


@dataclass(frozen=True)
class WorkflowStepResult:
    """One turn's outcome under :meth:`WorkflowDetector.step`.

    Attributes:
        system_turn: The 1-based system turn index (None on a user turn).
        alarm: The turn's deviation exceeds the threshold.
        deviation: The turn's deviation (None on a user turn).
        threshold: The task's threshold.
        node: The assigned node (None: off-workflow or a user turn).
        reason: None, ``"off-task"`` or ``"unfamiliar"`` (why the node is None).
        rival_task: The task whose workflow fits the turn best among the others.
        rule: The dialogue-state rule that fired (``skip-requires``, ``skip-closing``,
            ``repeat-slot``), or None.
        expected: The step that should have come first (the rule's), or None.
        slot: The slot missing or asked again, or None.
        message: The rule's one-line reason ("outcome 'weather_inform_forecast' before slot
            'location' was collected (expected step 'weather_ask_location')"), or None.
    """

    system_turn: int | None
    alarm: bool
    deviation: float | None
    threshold: float
    node: str | None
    reason: str | None
    rival_task: str | None
    rule: str | None = None
    expected: str | None = None
    slot: str | None = None
    message: str | None = None


# -- sources -----------------------------------------------------------------------------------------


def resolve_workflow(workflow: Any = None) -> Any:
    """The workflow source of a detector: ``workflow`` as given, parsed, or STAR from the environment.

    Args:
        workflow: A source object (with ``tasks``), a spec string (``star:PATH``, ``workflow:PATH``,
            a folder or a ``.yaml`` file), a path, or None (``$DIALFORK_STAR_DIR``).

    Returns:
        The workflow source.

    Raises:
        ValueError: None given and ``$DIALFORK_STAR_DIR`` unset, or the spec cannot be read (the
            message says what to pass).
    """
    if workflow is not None and not isinstance(workflow, str | os.PathLike):
        if not hasattr(workflow, "tasks"):
            raise ValueError(
                f"workflow must be a workflow source (with .tasks), a spec or a path, got "
                f"{type(workflow).__name__}"
            )
        return workflow
    spec = os.fspath(workflow) if workflow is not None else os.environ.get("DIALFORK_STAR_DIR")
    if not spec:
        raise ValueError(
            "the workflow-aware detector needs the dialogues' workflows: pass workflow= "
            "(a StarCorpus, 'star:PATH' or 'workflow:FILE.yaml') or set $DIALFORK_STAR_DIR "
            "to a STAR copy"
        )
    from dialfork_dataset.sources import open_source

    return open_source(spec)


def workflow_for_data(data: Any) -> str | None:
    """The workflow source a corpus names, for a detector that needs the workflow.

    A generator output folder's ``manifest.json`` names its source (``config.star``); the STAR
    human track's names its STAR copy (``star``). A relative path is tried as given, then against the
    corpus folder. Otherwise ``$DIALFORK_STAR_DIR`` (None when unset).

    Args:
        data: A corpus folder or Hub id (anything but a local folder gives the environment's).

    Returns:
        str | None: A source spec (``star:PATH``, ``workflow:PATH``, a path), or None.
    """
    env = os.environ.get("DIALFORK_STAR_DIR") or None
    try:
        folder = Path(os.fspath(data))
    except TypeError:
        return env
    m = folder / "manifest.json"
    if not m.is_file():
        return env
    try:
        meta = json.loads(m.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return env
    spec = (meta.get("config") or {}).get("star") if isinstance(meta.get("config"), Mapping) else None
    spec = spec or meta.get("star")
    if not isinstance(spec, str) or not spec:
        return env
    kind, sep, path = spec.partition(":") if spec.split(":", 1)[0] in ("star", "workflow") else ("", "", spec)
    for cand in (Path(path), folder / path):
        if cand.exists():
            return f"{kind}{sep}{cand}" if sep else str(cand)
    return env


def _task(d: Any) -> str | None:
    t = d.get("task") if isinstance(d, Mapping) else None
    return str(t) if t else None


def _unit(E: np.ndarray) -> np.ndarray:
    E = np.asarray(E, dtype=np.float64)
    n = np.linalg.norm(E, axis=-1, keepdims=True)
    return E / np.where(n > 0, n, 1.0)
