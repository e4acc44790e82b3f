"""The guard's off-task warning: a workflow-aware conversation that does not look like its task.

Kept apart from :mod:`.monitor` (which re-exports it) so that the monitor module stays small.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def off_task_warning(state: Mapping[str, Any], task: str | None, min_turns: int = 2) -> str | None:
    """The guard's warning that a conversation does not look like the monitor's task.

    Raised once at least ``min_turns`` system turns were said and most of them fit another task's
    workflow better than the monitor's (that task is named; several are named with their counts),
    or fit no step of it.

    Args:
        state: A workflow-aware session's step state (``system_turn``, ``off_task``, ``unfamiliar``).
        task: The monitor's task.
        min_turns: Least system turns before warning.

    Returns:
        str | None: The warning, or None.

    Example:
        >>> off_task_warning({"system_turn": 3, "off_task": {"bank_balance": 2}, "unfamiliar": 0}, "weather")
        "the conversation does not look like task 'weather': 2 of 3 system turns fit task 'bank_balance' better"
        >>> off_task_warning({"system_turn": 6, "off_task": {"ride_book": 2, "hotel_book": 3}, "unfamiliar": 0},
        ...                  "weather")
        "the conversation does not look like task 'weather': 5 of 6 system turns fit other tasks better ('hotel_book' 3, 'ride_book' 2)"
    """
    ns = int(state.get("system_turn") or 0)
    if ns < min_turns:
        return None
    off = dict(state.get("off_task") or {})
    n_off = sum(off.values())
    unfamiliar = int(state.get("unfamiliar") or 0)
    if 2 * (n_off + unfamiliar) <= ns:
        return None
    if n_off >= unfamiliar and off:
        if len(off) == 1:
            (other,) = off
            return (
                f"the conversation does not look like task {task!r}: {n_off} of {ns} system turns fit task "
                f"{other!r} better"
            )
        # several rivals: name each with its count (naming one would claim all the turns for it)
        shown = ", ".join(f"{t!r} {c}" for t, c in sorted(off.items(), key=lambda x: (-x[1], x[0])))
        return (
            f"the conversation does not look like task {task!r}: {n_off} of {ns} system turns fit other "
            f"tasks better ({shown})"
        )
    return (
        f"the conversation does not look like task {task!r}: {n_off + unfamiliar} of {ns} system turns fit "
        f"no step of its workflow"
    )


def alarm_reason(
    detector: Any, task: str, result: Any, embedding: np.ndarray, state: Mapping[str, Any]
) -> dict[str, Any]:
    """The reason of a workflow-aware alarm that broke no dialogue-state rule (what
    :attr:`~dialfork_metrics.guard.Verdict.rule` holds then, so that every alarm says why).

    * ``off-task``: the turn fits a step of another task better than any step of ``task`` (named);
    * ``unfamiliar``: it fits no step of any fitted task (its closest step is named, with its
      similarity and the floor it misses);
    * ``repeat``: a question asked again after it was answered;
    * ``order``: a step said after a later step of the workflow.

    Args:
        detector: The fitted workflow-aware detector (``assigner_``, ``min_similarity_``,
            ``structures_``, ``repeatable_``, ``looping_``).
        task: The watched task.
        result: The turn's :class:`~dialfork_metrics.task3.workflow.rules.WorkflowStepResult`.
        embedding: The turn's embedding, ``(d,)``.
        state: The session's step state after the turn (``nodes``, ``answered``).

    Returns:
        dict: ``rule``, ``node``, ``expected`` (None), ``slot`` (None) and a one-line ``message``.
    """
    j = result.system_turn
    base = {"node": result.node, "expected": None, "slot": None}
    if result.node is None:
        a = detector.assigner_.assign(task, np.asarray(embedding, dtype=np.float64).reshape(1, -1))
        floor = float(detector.min_similarity_)
        own, rival_sim, rival = float(a.own_similarity[0]), float(a.rival_similarity[0]), a.rival[0]
        if result.reason == "off-task" and rival and rival_sim >= floor:
            msg = f"system turn {j} fits step {rival!r} of another task better than any step of {task!r}"
            return {**base, "rule": "off-task", "message": msg}
        best_sim, best = (rival_sim, rival) if rival and rival_sim > own else (own, f"{task}:{a.best[0]}")
        msg = (
            f"system turn {j} fits no step of any task (closest: step {best!r}, similarity "
            f"{best_sim:.2f} < {floor:.2f})"
        )
        return {**base, "rule": "unfamiliar", "message": msg}
    from dialfork_metrics.task3.workflow.rules import repeat_flags

    nodes, answered = list(state.get("nodes") or []), list(state.get("answered") or [])
    looping = task in getattr(detector, "looping_", frozenset())
    rep = repeat_flags(
        nodes,
        answered,
        detector.structures_[task],
        getattr(detector, "repeatable_", {}).get(task, frozenset()),
    )
    if len(rep) and rep[-1] and not looping:
        return {
            **base,
            "rule": "repeat",
            "message": f"question {result.node!r} asked again after it was answered",
        }
    return {**base, "rule": "order", "message": f"step {result.node!r} said after a later step of {task!r}"}


__all__ = ["alarm_reason", "off_task_warning"]
