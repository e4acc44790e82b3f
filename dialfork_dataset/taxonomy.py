"""The one place that names DialFork's hallucination types and fork positions (SPEC sections 2-3).

Everything that lists the types, orders them for a table, names them for a reader or counts the
forks of a source imports them from here. Adding a type means: add it to :data:`HALLUCINATION_TYPES`
and :data:`TYPE_NAMES` (and to the two table orders), give it variants in
``generation/variants.yaml`` and a planner in the template backend; see ``docs/extending.md``.

>>> FORKS_PER_SOURCE
16
>>> TABLE4_ORDER
('CSC', 'GR', 'SSPC', 'WIC')
>>> display_name("GR")
'goal replacement'
"""

from __future__ import annotations

#: The hallucination types in SPEC order (also the order of the paper's Tables 2 and 3).
HALLUCINATION_TYPES: tuple[str, ...] = ("WIC", "SSPC", "GR", "CSC")

#: Human-readable names of the types (SPEC section 2).
TYPE_NAMES: dict[str, str] = {
    "WIC": "workflow identity corruption",
    "SSPC": "step selection corruption",
    "GR": "goal replacement",
    "CSC": "competing sub-goal",
}

#: Fork positions k: the fork turn t_k of a source dialogue (SPEC section 3).
FORK_POSITIONS: tuple[int, ...] = (1, 2, 3, 4)

#: Column order of the per-type Kendall taus in the paper's Table 2 (Task 1) and Table 3 (Task 2).
TABLE3_ORDER: tuple[str, ...] = HALLUCINATION_TYPES

#: Column order of the per-type MAEs in the paper's Table 4 (Task 3): alphabetical, CSC first.
TABLE4_ORDER: tuple[str, ...] = ("CSC", "GR", "SSPC", "WIC")

#: Forks generated per source dialogue: one per (type, position).
FORKS_PER_SOURCE: int = len(HALLUCINATION_TYPES) * len(FORK_POSITIONS)

#: The expected ranking of the four forks of a unit by distance to the source (fork at t_1 is the
#: farthest): the target of Task 1 and Task 2's Kendall tau.
EXPECTED_RANKING: tuple[int, ...] = tuple(sorted(FORK_POSITIONS, reverse=True))


def display_name(htype: str) -> str:
    """The human-readable name of a hallucination type.

    Args:
        htype: a type code from :data:`HALLUCINATION_TYPES`.

    Returns:
        Its name, for example ``"goal replacement"`` for ``"GR"``.

    Raises:
        KeyError: ``htype`` is not a known type; the message lists the known ones.
    """
    try:
        return TYPE_NAMES[htype]
    except KeyError:
        raise KeyError(f"unknown hallucination type {htype!r}; known: {', '.join(HALLUCINATION_TYPES)}") from None


def type_index(htype: str) -> int:
    """The position of ``htype`` in :data:`HALLUCINATION_TYPES` (used to derive stable seeds).

    Args:
        htype: A hallucination type code (``"WIC"``, ``"SSPC"``, ``"GR"`` or ``"CSC"``).

    Returns:
        int: Its 0-based index.

    Raises:
        ValueError: ``htype`` is not a hallucination type.
    """
    return HALLUCINATION_TYPES.index(htype)
