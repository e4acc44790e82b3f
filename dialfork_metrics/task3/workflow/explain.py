"""What the workflow-aware detector ``wf`` learns of the dialogue state at fit time, and why it alarms.

Two functions over a :class:`~.workflow_detector.WorkflowDetector` (kept apart to keep the
detector's module small): :func:`fit_roles` derives each fitted task's step roles and the
requirements its skip rule enforces (pruned on the conformant fit dialogues), and
:func:`explain_many` names the rule behind a dialogue's first alarm (what the Task 3 CLI's report,
the audit and the docs show).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from .rules import ROUTE_MARGIN, _task, first_alarm, repeat_flags
from .state import StepVerdict

logger = logging.getLogger("dialfork_metrics.task3.workflow.detector")

#: Every rule :func:`explain_many` may name: the dialogue-state rules, then the role-free ones.
EXPLAINED_RULES: tuple[str, ...] = (
    "skip-requires",
    "skip-closing",
    "repeat-slot",
    "repeat",
    "order",
    "off-task",
    "unfamiliar",
)


def fit_roles(
    det: Any,
    source: Any,
    tasks: Sequence[str],
    task_of: Sequence[str],
    turns: Sequence[Any],
    fit_nodes: Sequence[Sequence[str | None]],
    repeatable: dict[str, set[str]],
) -> None:
    """Set ``det.roles_`` and ``det.requires_`` from the workflow and the conformant fit dialogues.

    A task whose roles cannot be derived (:attr:`~dialfork_dataset.workflow.roles.TaskRoles.problems`) gets
    one warning per problem and is left out: it keeps the role-free rules. The questions the fit
    dialogues ask again for an answered slot are added to ``repeatable`` (never a repeat).

    Args:
        det: The detector being fitted (``state_rules``, ``skip_slots``, ``require_support``,
            ``structures_``).
        source: The workflow source.
        tasks: The fitted tasks.
        task_of: The task of each fit dialogue.
        turns: The turns of each fit dialogue.
        fit_nodes: The assigned step of each fit dialogue's system turns.
        repeatable: task -> steps never flagged as repeats (updated in place).
    """
    from dialfork_dataset.workflow.roles import derive_roles

    from .state import enforced_requirements, prune_requirements, track_state

    det.roles_, det.requires_ = {}, {}
    for t in tasks if det.state_rules else ():
        tr = derive_roles(source.tasks[t])
        if not tr.complete:
            for p in tr.problems:
                logger.warning("wf detector: %s; the task keeps the role-free rules", p)
            continue
        det.roles_[t] = tr
        req = enforced_requirements(tr, source.tasks[t], det.skip_slots)
        tracked = []
        for i, t_i in enumerate(task_of):
            if t_i != t:
                continue
            states, verdicts = track_state(turns[i], fit_nodes[i], tr, det.structures_[t], (), req)
            tracked.append((states, fit_nodes[i]))
            repeatable[t].update(v.node for v in verdicts if v.rule == "repeat-slot" and v.node)
        if not tracked:
            # no log to show that the task's agents always collect a slot: enforce only the slots
            # whose value the tracker can see when a user volunteers it (categories, dates, times,
            # counts, names); a free-text slot given in the opening request would look skipped
            req = {n: tuple(x for x in v if _visible(tr, x)) for n, v in req.items()}
            req = {n: v for n, v in req.items() if v}
        kept = prune_requirements(req, tracked, det.require_support)
        for n, slots in req.items():
            gone = [x for x in slots if x not in kept.get(n, ())]
            if gone and tr.steps[n].declared:
                logger.info(
                    "wf detector: task %r: the fit dialogues say step %r without slot(s) %s at least %.0f%% "
                    "of the time: not enforced (declared in the workflow, contradicted by the logs)",
                    t,
                    n,
                    ", ".join(gone),
                    100 * (1 - det.require_support),
                )
        det.requires_[t] = kept


def _visible(roles: Any, slot: str) -> bool:
    """Whether the tracker can recognise a volunteered value of ``slot`` (not free text)."""
    return roles.value_types.get(slot, "text") != "text" or bool(roles.values.get(slot))


def explain_many(
    det: Any, dialogues: Sequence[Any], embeddings: Sequence[np.ndarray] | None = None
) -> list[dict[str, Any] | None]:
    """Why each dialogue alarms under ``det``: the rule behind its first alarm (None: no alarm).

    Args:
        det: A fitted :class:`~.workflow_detector.WorkflowDetector`.
        dialogues: Records (``task`` used when present, else routed) or turn lists.
        embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.

    Returns:
        list[dict | None]: Per dialogue, ``system_turn`` (the first alarm), ``rule`` (one of
        :data:`EXPLAINED_RULES`), ``node`` (the step the turn was taken for), ``expected`` (the
        step that should have come first), ``slot`` (missing or asked again), ``rival``
        (``task:node`` of another workflow that fits it better) and a one-line ``message``; a
        dialogue-state rule's also carries ``role`` (the role the rule read).
    """
    det.check_is_fitted()
    dialogues = list(dialogues)
    turns, emb = det._turns_and_embeddings(dialogues, embeddings)
    out: list[dict[str, Any] | None] = []
    for d, t, e in zip(dialogues, turns, emb):
        task = _task(d) if _task(d) in det.structures_ else None
        j = first_alarm(det._deviations(det.assigner_, task, t, e), 0.0)
        if j is None:
            out.append(None)
            continue
        rows = det._system_rows(t)
        task = task or det.route(e[[k for k, x in enumerate(t) if x["speaker"] == "user"]], ROUTE_MARGIN)
        if task is None:
            out.append(
                {
                    "system_turn": j,
                    "rule": "off-task",
                    "node": None,
                    "expected": None,
                    "slot": None,
                    "rival": None,
                    "message": f"system turn {j} fits no fitted task",
                }
            )
            continue
        out.append(explain_turn(det, task, t, e[rows], j))
    return out


def explain_turn(det: Any, task: str, turns: Sequence[Any], E: np.ndarray, j: int) -> dict[str, Any]:
    """The reason of system turn ``j`` (1-based) of one dialogue of ``task`` (see :func:`explain_many`).

    Args:
        det: The fitted detector.
        task: The dialogue's task.
        turns: Its turns.
        E: The embeddings of its system turns.
        j: The system turn (1-based).

    Returns:
        dict[str, Any]: The reason (keys of :func:`explain_many`).
    """
    a = det.assigner_.assign(task, E)
    _, verdicts = det._state_flags(task, turns, a.nodes, det._confident(a))
    v = verdicts[j - 1] if verdicts else StepVerdict(None)
    node = a.nodes[j - 1]
    base = {"system_turn": j, "node": node, "expected": None, "slot": None, "rival": a.rival[j - 1]}
    if v.rule:
        return {**base, **v.to_dict(), "system_turn": j, "rival": None}
    reason = a.reasons[j - 1]
    if reason == "off-task":
        msg = f"system turn {j} fits step {a.rival[j - 1]!r} of another task better than any step of {task!r}"
        return {**base, "rule": "off-task", "message": msg}
    if reason == "unfamiliar":
        return {**base, "rule": "unfamiliar", "message": f"system turn {j} matches no step of {task!r}"}
    answered = det._answered(turns, det._system_rows(turns))
    rep = repeat_flags(
        a.nodes[:j], answered[:j], det.structures_[task], det.repeatable_.get(task, frozenset())
    )
    if rep[-1] and task not in getattr(det, "looping_", frozenset()):
        return {**base, "rule": "repeat", "message": f"question {node!r} asked again after it was answered"}
    return {**base, "rule": "order", "message": f"step {node!r} said after a later step of {task!r}"}


__all__ = ["EXPLAINED_RULES", "explain_many", "explain_turn", "fit_roles"]
