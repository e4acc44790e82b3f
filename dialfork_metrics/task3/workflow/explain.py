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
from .state import StepVerdict, declined_turns

logger = logging.getLogger("dialfork_metrics.task3.workflow.detector")

#: Every rule :func:`explain_many` may name: the dialogue-state rules, then the role-free ones.
EXPLAINED_RULES: tuple[str, ...] = (
    "skip-requires",
    "skip-closing",
    "repeat-slot",
    "repeat-confirmation",
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
    repeated: dict[str, dict[str, set[int]]],
) -> None:
    """Set ``det.roles_`` and ``det.requires_`` from the workflow and the conformant fit dialogues.

    A task whose roles cannot be derived (:attr:`~dialfork_dataset.workflow.roles.TaskRoles.problems`) gets
    one warning per problem and is left out: it keeps the role-free rules. The questions and
    confirmations the fit dialogues ask again are added to ``repeated`` (with the dialogues that
    do; :func:`repeatable_steps` reads the evidence).

    Requirements: a step's ``requires:`` declared in the workflow file is enforced as written,
    with or without logs (never pruned). A derived requirement is pruned where the fit dialogues
    say the step without the slot (:func:`~.state.prune_requirements`), and, fitting from the file
    alone, where it is a free-text slot the tracker cannot see volunteered; each pruned slot is
    logged with its step and the reason.

    Args:
        det: The detector being fitted (``state_rules``, ``skip_slots``, ``require_support``,
            ``structures_``).
        source: The workflow source.
        tasks: The fitted tasks.
        task_of: The task of each fit dialogue.
        turns: The turns of each fit dialogue.
        fit_nodes: The assigned step of each fit dialogue's system turns.
        repeated: task -> step -> the fit dialogues (indices) that repeat it (updated in place).
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
        declared = frozenset(getattr(source.tasks[t], "declared_requires", None) or ())  # as written
        tracked = []
        for i, t_i in enumerate(task_of):
            if t_i != t:
                continue
            states, verdicts = track_state(
                turns[i], fit_nodes[i], tr, det.structures_[t], (), req, det._slot_read()
            )
            tracked.append((states, fit_nodes[i]))
            for v in verdicts:
                if v.rule in ("repeat-slot", "repeat-confirmation") and v.node:
                    repeated[t].setdefault(v.node, set()).add(i)
        if not tracked:
            # no log to show that the task's agents always collect a slot: of the derived
            # requirements, enforce only the slots whose value the tracker can see when a user
            # volunteers it (categories, dates, times, counts, names); a free-text slot given in the
            # opening request would look skipped. Declared ones stay as written.
            for n, v in req.items():
                hidden = [x for x in v if not _visible(tr, x)]
                if hidden and n not in declared:
                    logger.info(
                        "wf detector: task %r: step %r: derived requirement(s) %s not enforced: free-text "
                        "slot(s) a user may give in any words, and no fit dialogue shows they are always "
                        "asked first (declare 'requires:' on the step to enforce them)",
                        t,
                        n,
                        ", ".join(hidden),
                    )
            req = {
                n: (v if n in declared else tuple(x for x in v if _visible(tr, x))) for n, v in req.items()
            }
            req = {n: v for n, v in req.items() if v}
        kept = prune_requirements(req, tracked, det.require_support, declared=declared)
        for n, slots in req.items():
            gone = [x for x in slots if x not in kept.get(n, ())]
            if gone:
                logger.info(
                    "wf detector: task %r: step %r: derived requirement(s) %s not enforced: the conformant fit "
                    "dialogues say the step without them more than %.0f%% of the time",
                    t,
                    n,
                    ", ".join(gone),
                    100 * (1 - det.require_support),
                )
        det.requires_[t] = kept


def repeatable_steps(
    det: Any, repeated: dict[str, dict[str, set[int]]], task_of: Sequence[str], rows: Sequence[Any]
) -> dict[str, frozenset[str]]:
    """The steps each task's conformant fit dialogues repeat often enough to be no repeat.

    A step is *repeatable* (the repeat rules never flag it) only with the evidence that switches a
    rule off (:func:`~.fit.misfire_evidence`: at least ``det.rule_min_misfires`` fit dialogues of
    the task, and more than half ``false_alarm_rate`` of them); one warning per step names the
    dialogues. Fewer repeats are logged (info) and the step keeps the rules: a few logs never make
    detection worse than the workflow file alone.

    Args:
        det: The detector being fitted.
        repeated: task -> step -> the fit dialogues (indices) that repeat it.
        task_of: The task of each fit dialogue.
        rows: The fit records (``dialogue_id`` names them).

    Returns:
        dict[str, frozenset[str]]: task -> its repeatable steps.
    """
    from collections.abc import Mapping

    from .fit import _named, misfire_evidence

    def name(i: int) -> str:
        d = rows[i]
        return str(d.get("dialogue_id", f"#{i}")) if isinstance(d, Mapping) else f"#{i}"

    out: dict[str, frozenset[str]] = {}
    for t, steps in repeated.items():
        n = sum(x == t for x in task_of)
        keep = set()
        for node, who in sorted(steps.items()):
            ids = [name(i) for i in sorted(who)]
            if misfire_evidence(len(who), n, det.false_alarm_rate, det.rule_min_misfires):
                keep.add(node)
                logger.warning(
                    "wf detector: task %r: step %r is asked again in %d of its %d conformant fit dialogues: never "
                    "a repeat for this task (a loop the workflow does not draw); asked again in %s",
                    t,
                    node,
                    len(who),
                    n,
                    _named(ids),
                )
            else:
                logger.info(
                    "wf detector: task %r: step %r is asked again in %d of its %d conformant fit dialogues (%s): "
                    "still a repeat (too few to show a loop)",
                    t,
                    node,
                    len(who),
                    n,
                    _named(ids),
                )
        out[t] = frozenset(keep)
    return out


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
        if task is None:  # an unsure route: the task whose deviation is the alarm's (the least, as scored)
            devs = {tk: det._deviations(det.assigner_, tk, t, e)[j - 1] for tk in det.tasks}
            task = min(devs, key=lambda tk: (devs[tk], tk)) if devs else None
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
    _, verdicts = det._state_flags(task, turns, a.nodes, det._confident(a), getattr(a, "also", None))
    v = verdicts[j - 1] if verdicts else StepVerdict(None)
    w = det._rule_weights(task)
    if v.rule is not None and w.get(v.rule, 0.0) <= 0:
        v = StepVerdict(None)  # a rule switched off for the task is no reason
    node = a.nodes[j - 1]
    base = {"system_turn": j, "node": node, "expected": None, "slot": None, "rival": a.rival[j - 1]}
    if v.rule:
        return {**base, **v.to_dict(), "system_turn": j, "rival": None}
    reason = a.reasons[j - 1]
    if reason == "off-task" and a.rival_similarity[j - 1] >= det.min_similarity_:
        msg = f"system turn {j} fits step {a.rival[j - 1]!r} of another task better than any step of {task!r}"
        return {**base, "rule": "off-task", "message": msg}
    if reason == "off-task":  # the rival is no step either: the turn fits no step of any task
        msg = (
            f"system turn {j} fits no step of any task (the closest, {a.rival[j - 1]!r}, is below the floor)"
        )
        return {**base, "rule": "unfamiliar", "message": msg}
    if reason == "unfamiliar":
        return {**base, "rule": "unfamiliar", "message": f"system turn {j} matches no step of {task!r}"}
    answered = det._answered(turns, det._system_rows(turns))
    roles = getattr(det, "roles_", {}).get(task)
    declined = declined_turns(turns, a.nodes, roles) if roles is not None else None
    rep = repeat_flags(
        a.nodes[:j],
        answered[:j],
        det.structures_[task],
        det.repeatable_.get(task, frozenset()),
        declined[:j] if declined is not None else None,
    )
    if rep[-1] and w["repeat"] > 0:
        return {**base, "rule": "repeat", "message": f"question {node!r} asked again after it was answered"}
    return {**base, "rule": "order", "message": f"step {node!r} said after a later step of {task!r}"}


__all__ = ["EXPLAINED_RULES", "explain_many", "explain_turn", "fit_roles", "repeatable_steps"]
