"""Fitting a guard monitor: what :meth:`~dialfork_metrics.guard.monitor.Monitor.fit` reads of its input,
which detector it fits when none is named, and which detectors the guard runs (any Task 3 registry
entry with ``guard=True`` that steps the workflow-aware way or the node way).

Kept apart from :mod:`.monitor` to keep that module small.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

logger = logging.getLogger("dialfork_metrics.guard.monitor")


def _guard_spec(detector: Any) -> Any:
    """The registry entry of a detector object (looked up by its ``name``), or None when unregistered."""
    from ..task3 import registry as detector_registry

    name = getattr(detector, "name", None)
    if not isinstance(name, str):
        return None
    try:
        return detector_registry.get(name)
    except ValueError:
        return None


def _is_workflow(detector: Any) -> bool:
    """Whether a detector is stepped the workflow-aware way: ``step(state, speaker, embedding, task,
    text=)`` over per-task thresholds (``wf``), else the node way (``assign`` then ``step`` on a node id,
    the IT/SS detectors). Read from what the detector does, not its class: any registry entry with
    ``guard=True`` that steps one of the two ways runs in the guard."""
    import inspect

    step = getattr(detector, "step", None)
    if step is None:
        return False
    try:
        return "task" in inspect.signature(step).parameters
    except (TypeError, ValueError):
        return False


def _check_guardable(detector: Any) -> None:
    """Refuse a detector the guard cannot run: its registry entry says ``guard=False``, or it steps
    neither way (:func:`_is_workflow`)."""
    from ..task3 import registry as detector_registry

    spec = _guard_spec(detector)
    if spec is not None and not spec.guard:
        raise TypeError(
            f"detector {spec.name!r} cannot run in the guard (its registry entry has guard=False); the "
            f"guard runs {', '.join(detector_registry.names(guard=True))}"
        )
    if not _is_workflow(detector) and not (hasattr(detector, "assign") and hasattr(detector, "step")):
        raise TypeError(
            f"Monitor needs a fitted detector the guard can step turn by turn (a registry entry with "
            f"guard=True: {', '.join(detector_registry.names(guard=True))}), got {type(detector).__name__}"
        )


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


def default_detector(task: str | None, workflow: Any, has_dialogues: bool = True) -> str:
    """The guard's detector when none is named.

    A workflow that was named (``workflow=``, else ``$DIALFORK_STAR_DIR``) must open and hold the
    task: otherwise this raises, with the file, the line and what is wrong (a monitor silently fitted
    without its workflow would miss what the workflow says). The workflow-free ``ss+nc`` is used only
    when no workflow was named, or when the task is unknown and the only workflow is the
    environment's STAR copy; a warning says so.

    Args:
        task: The watched task (None: unknown).
        workflow: The workflow source given (None: ``$DIALFORK_STAR_DIR``).
        has_dialogues: Whether there are fit dialogues (``ss+nc`` learns from them alone).

    Returns:
        str: The detector's registry name: ``"wf"`` or ``"ss+nc"``.

    Raises:
        ValueError: The named workflow cannot be opened (missing file, bad YAML, an unknown
            ``requires:`` slot...: every problem at its ``file:line``), does not hold ``task``, or
            there is neither a workflow nor a dialogue to fit on (the message says what to give).
    """
    import os

    from dialfork_metrics.task3.workflow.detector import resolve_workflow

    named = workflow is not None
    env = os.environ.get("DIALFORK_STAR_DIR") or None
    if not named and env is None:
        if not has_dialogues:
            raise ValueError(
                "Monitor.fit() got no dialogues and no workflow: fit from a workflow file alone with "
                "workflow='workflow:FILE.yaml' and task=NAME (or set $DIALFORK_STAR_DIR to a STAR copy), "
                "or give conformant dialogues"
            )
        logger.warning(
            "Monitor.fit: no workflow was named (workflow= unset, $DIALFORK_STAR_DIR unset): the "
            "workflow-free ss+nc detector, which knows no step, slot or rule (no reason on its alarms); "
            "pass workflow='workflow:FILE.yaml' for the workflow-aware wf"
        )
        return "ss+nc"
    if task is None:
        if not has_dialogues:
            raise ValueError(
                "Monitor.fit() got no dialogues: fitted on the workflow alone it needs the task to "
                "watch: pass task=NAME"
            )
        logger.warning(
            "Monitor.fit: dialogues without a 'task' field and no task=: the workflow-free ss+nc "
            "detector; pass task=NAME for the workflow-aware wf"
        )
        return "ss+nc"
    what = f"workflow={workflow!r}" if named else f"$DIALFORK_STAR_DIR={env!r}"
    # a named source that does not open raises its own error: every problem at its file:line
    source = resolve_workflow(workflow)
    if task not in source.tasks:
        known = ", ".join(sorted(source.tasks)[:20])
        if named or not has_dialogues:
            raise ValueError(
                f"Monitor.fit(task={task!r}): the workflow named ({what}) has no task {task!r} (it has "
                f"{known}); pass the workflow file that defines it, or the task's name as written there"
            )
        logger.warning(
            "Monitor.fit: task %r is not in the STAR copy of $DIALFORK_STAR_DIR: the workflow-free ss+nc "
            "detector; pass workflow='workflow:FILE.yaml' (the file that defines the task) for the "
            "workflow-aware wf",
            task,
        )
        return "ss+nc"
    return "wf"
