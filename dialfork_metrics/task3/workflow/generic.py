"""What any agent says: closings, thanks, fillers and acknowledgements, a class every workflow shares.

A workflow file has a handful of phrasings a step; an agent also says things no step spells out
("Let me check that for you.", "Got it!", "Have a great day!"). Without this class such a turn is
matched to the nearest step of *some* workflow, and when another task's texts happen to hold a
closer phrasing the turn is taken for another workflow (an off-task alarm on a conformant
dialogue). The node assigner of the workflow-aware detector (``shared_steps=True``) adds these
phrasings as nodes of a pseudo-task, :data:`GENERIC_TASK`, that is *own* for every task and a rival
for none. A turn that matches them best is accepted, and the detector reads it as the role the
workflow allows (:data:`GENERIC_ROLES`): a closing is the task's closing step (so a closing before
any outcome is still the skip-closing rule's), a filler, thanks or acknowledgement has no role (the
state rules ignore it).

The phrasings are ours, written for this purpose; tests replay other phrasings of the same kinds.
"""

from __future__ import annotations

from collections.abc import Mapping

GENERIC_TASK = "*generic*"
"""The pseudo-task holding the generic nodes (never a record's task)."""

GENERIC_TURNS: Mapping[str, tuple[str, ...]] = {
    "generic_closing": (
        "Goodbye, and thank you.",
        "Bye now!",
        "Have a lovely day!",
        "Have a nice day, goodbye.",
        "Take care!",
        "Enjoy your day!",
        "You're welcome, bye!",
        "Glad I could help. Goodbye!",
        "See you next time.",
        "Have a good one!",
    ),
    "generic_thanks": (
        "Thank you!",
        "Thanks a lot.",
        "Thank you for your patience.",
        "Thanks for waiting.",
        "Thank you for letting me know.",
        "I appreciate it.",
    ),
    "generic_filler": (
        "Let me check on that.",
        "One moment please.",
        "Please wait while I look that up.",
        "Give me a second.",
        "Just a moment, I'm checking.",
        "Hold on, let me see.",
        "I'm looking into it now.",
        "Let me see what I can find.",
    ),
    "generic_acknowledgement": (
        "Got it.",
        "Okay.",
        "Sure.",
        "Alright.",
        "Understood.",
        "Great.",
        "Perfect.",
        "No problem.",
        "Certainly.",
        "I see.",
    ),
}
"""Generic node -> its phrasings (ours)."""

GENERIC_ROLES: Mapping[str, str | None] = {
    "generic_closing": "closing",
    "generic_thanks": None,
    "generic_filler": None,
    "generic_acknowledgement": None,
}
"""Generic node -> the step role it is read as (None: no role; the state rules ignore it)."""


def is_generic(node: str | None) -> bool:
    """Whether ``node`` is one of the shared generic nodes (:data:`GENERIC_TURNS`).

    Args:
        node: A node name or None.

    Returns:
        bool: True for a generic node.

    Example:
        >>> is_generic("generic_filler"), is_generic("weather_ask_day"), is_generic(None)
        (True, False, False)
    """
    return node in GENERIC_TURNS


def as_task_step(node: str | None, closings: list[str]) -> str | None:
    """The step a generic node stands for in one task: a closing is the task's last closing step
    (when it has one); any other node is returned as it is.

    Args:
        node: An assigned node (generic or not) or None.
        closings: The task's closing steps, in step order.

    Returns:
        str | None: The node to read.

    Example:
        >>> as_task_step("generic_closing", ["anything_else", "weather_goodbye"])
        'weather_goodbye'
        >>> as_task_step("generic_filler", ["weather_goodbye"]), as_task_step("generic_closing", [])
        ('generic_filler', 'generic_closing')
    """
    if node is not None and GENERIC_ROLES.get(node) == "closing" and closings:
        bye = [c for c in closings if c != "anything_else"]
        return (bye or closings)[-1]
    return node


__all__ = ["GENERIC_ROLES", "GENERIC_TASK", "GENERIC_TURNS", "as_task_step", "is_generic"]
