"""Fork arithmetic (SPEC section 1): fork turns and system-turn <-> turn-position maps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .taxonomy import FORK_POSITIONS

NUM_FORK_POSITIONS = len(FORK_POSITIONS)
#: The fewest system turns that hold one distinct fork turn per position (SPEC section 1).
MIN_SYSTEM_TURNS = NUM_FORK_POSITIONS


def fork_turns(T: int) -> tuple[int, int, int, int]:
    """The four fork turns ``(t_1, t_2, t_3, t_4)`` with ``t_k = 1 + round((k-1) * T / 4)`` (Python's ``round``).

    Args:
        T: Number of system turns of the conformant dialogue.

    Returns:
        The system-turn indices (1-based) before which the four forks are injected.

    Raises:
        ValueError: ``T`` is not an integer, or ``T < 4`` (the four positions are then not distinct
            and <= T).

    Example:
        >>> fork_turns(6)
        (1, 3, 4, 5)
    """
    if isinstance(T, bool) or not isinstance(T, int):
        raise ValueError(f"fork_turns: T must be an integer number of system turns, got {T!r}")
    if T < MIN_SYSTEM_TURNS:
        raise ValueError(
            f"fork_turns: T={T} system turns cannot hold four distinct fork turns; "
            f"a conformant dialogue needs T >= {MIN_SYSTEM_TURNS} to be kept"
        )
    ts = tuple(1 + round((k - 1) * T / NUM_FORK_POSITIONS) for k in FORK_POSITIONS)
    assert len(set(ts)) == NUM_FORK_POSITIONS and ts[-1] <= T, ts
    return ts  # type: ignore[return-value]


def admits_forks(T: int) -> bool:
    """Whether a conformant dialogue with ``T`` system turns is kept (SPEC section 1).

    Args:
        T: Number of system turns.

    Returns:
        True when ``T >= 4`` (four distinct fork turns exist).
    """
    return isinstance(T, int) and T >= MIN_SYSTEM_TURNS


def _speaker(t: Any) -> str:
    return t["speaker"] if isinstance(t, Mapping) else t.speaker


def system_turn_positions(turns: Sequence[Any]) -> list[int]:
    """0-based positions in ``turns`` of system turns 1..T (list index i holds turn i+1).

    Args:
        turns: A dialogue's turns (``{"speaker", "text"}`` dicts).

    Returns:
        The positions of the system turns, in order.
    """
    return [i for i, t in enumerate(turns) if _speaker(t) == "system"]


def system_turn_to_position(turns: Sequence[Any], t: int) -> int:
    """0-based position in ``turns`` of system turn ``t`` (1-based).

    Args:
        turns: A dialogue's turns.
        t: A system-turn index, 1..T.

    Returns:
        The index of that turn in ``turns``.

    Raises:
        ValueError: ``t`` is outside 1..T.
    """
    pos = system_turn_positions(turns)
    if not 1 <= t <= len(pos):
        raise ValueError(f"system turn {t} out of range 1..{len(pos)}")
    return pos[t - 1]


def position_to_system_turn(turns: Sequence[Any], position: int) -> int:
    """System-turn index of the turn at 0-based ``position``.

    A system turn maps to its own index; a user turn maps to the latest system turn before it,
    or 1 if none (SPEC section 8: a flag raised at a user turn).

    Args:
        turns: A dialogue's turns.
        position: A 0-based index into ``turns``.

    Returns:
        The system-turn index, 1..T.

    Raises:
        ValueError: ``position`` is outside the dialogue.
    """
    if not 0 <= position < len(turns):
        raise ValueError(f"turn position {position} out of range 0..{len(turns) - 1}")
    n = 0
    for t in turns[: position + 1]:
        if _speaker(t) == "system":
            n += 1
    return max(n, 1)


def prefix_before_system_turn(turns: Sequence[Any], t: int) -> list[Any]:
    """The turns strictly before system turn ``t`` (the shared prefix of a fork at ``t``).

    Args:
        turns: A dialogue's turns.
        t: A system-turn index, 1..T.

    Returns:
        A new list holding the turns before that system turn.
    """
    return list(turns[: system_turn_to_position(turns, t)])
