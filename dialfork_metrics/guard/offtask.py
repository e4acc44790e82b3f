"""The guard's off-task warning: a workflow-aware conversation that does not look like its task.

Kept apart from :mod:`.monitor` (which re-exports it) so that the monitor module stays small.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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


__all__ = ["off_task_warning"]
