"""Compound forks (SPEC section 3, ours): one fork, several injections.

A *plan* names the injections in order, each a hallucination type at a fork position k
(system turn t_k of the conformant source): ``SSPC@1,GR@3`` injects SSPC before t_1, then GR
before t_3. Positions must increase strictly, so the injection turns do too (the t_k of a kept
source are distinct). A compound fork's record carries ``injections: [{type, variant, turn}]``;
its single-injection fields (``hallucination_type``, ``variant``, ``fork_position``,
``fork_turn``...) are the first injection's, so Task 3 scores it on the earliest injection.
"""

from __future__ import annotations

from dialfork_dataset import taxonomy
from dialfork_dataset.taxonomy import FORK_POSITIONS

CompoundPlan = tuple[tuple[str, int], ...]


def parse_compound_plan(text: str) -> CompoundPlan:
    """``"SSPC@1,GR@3"`` -> ``(("SSPC", 1), ("GR", 3))``; raises ValueError naming every problem.

    Args:
        text: comma-separated ``TYPE@K`` items (type case-insensitive, one of
            ``HALLUCINATION_TYPES``; K one of ``FORK_POSITIONS``, 1..4); blank items are ignored.

    Returns:
        The plan: ``(type, k)`` pairs in the given order, types upper-cased.

    Raises:
        ValueError: an item is not ``TYPE@K`` with a known type and position, the plan has fewer
            than two injections, or its positions do not increase strictly.
    """
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    errors: list[str] = []
    plan: list[tuple[str, int]] = []
    for item in items:
        h, sep, k = item.partition("@")
        h = h.strip().upper()
        if not sep or h not in taxonomy.names() or not k.strip().isdigit() or int(k) not in FORK_POSITIONS:
            errors.append(
                f"{item!r}: expected TYPE@K with TYPE in {', '.join(taxonomy.names())} and K in "
                f"{FORK_POSITIONS[0]}..{FORK_POSITIONS[-1]}"
            )
            continue
        plan.append((h, int(k)))
    if not errors and len(plan) < 2:
        errors.append("a compound plan has at least two injections, e.g. SSPC@1,GR@3")
    if not errors and any(b[1] <= a[1] for a, b in zip(plan, plan[1:])):
        errors.append("fork positions must increase strictly (SSPC@1,GR@3, not GR@3,SSPC@1)")
    if errors:
        raise ValueError(f"--compound {text!r}: " + "; ".join(errors))
    return tuple(plan)


def plan_text(plan: CompoundPlan) -> str:
    """The canonical text of a plan (``SSPC@1,GR@3``).

    Args:
        plan: ``(type, k)`` pairs.

    Returns:
        ``TYPE@K`` items joined with commas (what :func:`parse_compound_plan` reads back).
    """
    return ",".join(f"{h}@{k}" for h, k in plan)


def compound_key(source_key: str, plan: CompoundPlan) -> str:
    """A compound fork's dialogue id: ``<source>-SSPC+GR-k1+k3`` (``rsplit('-', 2)[0]`` is the source,
    as for single forks ``<source>-SSPC-k1``).

    Args:
        source_key: the conformant source's dialogue id.
        plan: the compound plan.

    Returns:
        ``<source_key>-<types joined by +>-<k1+k3...>``.
    """
    return f"{source_key}-{'+'.join(h for h, _ in plan)}-{'+'.join(f'k{k}' for _, k in plan)}"


__all__ = ["CompoundPlan", "compound_key", "parse_compound_plan", "plan_text"]
