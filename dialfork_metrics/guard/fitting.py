"""Fitting a guard monitor: what :meth:`~dialfork_metrics.guard.monitor.Monitor.fit` reads of its input.

Kept apart from :mod:`.monitor` to keep that module small.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

logger = logging.getLogger("dialfork_metrics.guard.monitor")


def as_dialogues(dialogues: Any) -> list[Any]:
    """A list of dialogues from a list/iterable of records or turn lists, or a ``datasets`` split.

    Args:
        dialogues: What :meth:`~dialfork_metrics.guard.monitor.Monitor.fit` was given.

    Returns:
        list[Any]: The dialogues.

    Raises:
        TypeError: A single dialogue or record, or not a list of dialogues.
    """
    if isinstance(dialogues, str | bytes | Mapping):
        raise TypeError(
            "Monitor.fit() takes a list of conformant dialogues (records, lists of {speaker, text} "
            "turns, or a datasets split), not a single " + type(dialogues).__name__
        )
    if hasattr(dialogues, "column_names") and hasattr(dialogues, "to_list"):  # datasets.Dataset
        rows = dialogues.to_list()
    elif isinstance(dialogues, Iterable):
        rows = list(dialogues)
    else:
        raise TypeError(f"Monitor.fit() takes a list of dialogues, got {type(dialogues).__name__}")
    if rows and isinstance(rows[0], Mapping) and "speaker" in rows[0] and "turns" not in rows[0]:
        raise TypeError("Monitor.fit() got a single dialogue (a list of turns); pass a list of dialogues")
    return rows


def fit_tasks(rows: Sequence[Any]) -> list[str]:
    """The tasks the fit records name.

    Args:
        rows: The fit dialogues.

    Returns:
        list[str]: The tasks, sorted (empty: none names one).
    """
    return sorted({r["task"] for r in rows if isinstance(r, Mapping) and r.get("task")})


def watched_task(tasks: Sequence[str], task: str | None, workflow_aware: bool) -> str | None:
    """The task a monitor fitted on records of ``tasks`` watches.

    A workflow-aware detector is fitted on every task (their texts are each other's rivals: the
    same detector as the Task 3 ``wf`` fit on the same data) and watches ``task``; a workflow-free
    one learns one task's dialogues only.

    Args:
        tasks: The tasks of the fit records.
        task: The task asked for (None: the only one).
        workflow_aware: Whether the detector is ``wf``.

    Returns:
        str | None: The watched task (None: the records name none).

    Raises:
        ValueError: Several tasks and none chosen, a task not among them, or several tasks for a
            workflow-free detector.
    """
    if task is not None:
        if tasks and task not in tasks:
            raise ValueError(
                f"Monitor.fit(task={task!r}): no fit record of that task (they are of {', '.join(tasks[:5])})"
            )
        if len(tasks) > 1 and not workflow_aware:
            raise ValueError(
                f"Monitor.fit() got dialogues of {len(tasks)} tasks ({', '.join(tasks[:5])}); a workflow-free "
                "monitor learns one task's dialogues: give only that task's records"
            )
        return task
    if len(tasks) > 1:
        raise ValueError(
            f"Monitor.fit() got dialogues of {len(tasks)} tasks ({', '.join(tasks[:5])}); a monitor "
            "watches one task: pass task=NAME (the workflow-aware detector is fitted on all of them)"
        )
    return tasks[0] if tasks else None


def default_detector(task: str | None, workflow: Any) -> str:
    """The guard's detector when none is named: ``"wf"`` when the task's workflow can be found, else
    ``"ss+nc"`` (logged).

    Args:
        task: The watched task (None: unknown).
        workflow: The workflow source given (None: ``$DIALFORK_STAR_DIR``).

    Returns:
        str: The detector's registry name.
    """
    if task is None:
        logger.info("Monitor.fit: dialogues without a task: the workflow-free ss+nc detector")
        return "ss+nc"
    from dialfork_metrics.task3.workflow.detector import resolve_workflow

    try:
        source = resolve_workflow(workflow)
    except (ValueError, OSError) as e:
        logger.warning(
            "Monitor.fit: no workflow for task %r (%s): the workflow-free ss+nc detector; pass "
            "workflow= (or set $DIALFORK_STAR_DIR) for the workflow-aware wf",
            task,
            e,
        )
        return "ss+nc"
    if task not in source.tasks:
        logger.warning(
            "Monitor.fit: task %r is not in the workflow source: the workflow-free ss+nc detector", task
        )
        return "ss+nc"
    return "wf"
