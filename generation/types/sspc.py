"""SSPC, step selection corruption (SPEC section 2): from t_k on, the system keeps the task and the
goal but takes its steps in a corrupted order, one strategy per variant. Its entry, its template
planner, its variant check; its variants are ``sspc.yaml``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dialfork_dataset.taxonomy import HallucinationType

from ..backends.template.planners import PlanContext, Planner
from ..backends.template.sim import Body, Hal

#: SSPC strategies, exactly the five of SPEC section 2, in the SPEC's order.
SSPC_STRATEGIES: tuple[str, ...] = ("repeat", "skip", "reverse", "jump", "chaotic")


def _sspc_repeat(hal: Hal, cx: PlanContext) -> list[str]:
    """Repeat a completed step (and, in a long remainder, another one later)."""
    P, C, rng, m = cx.remaining, cx.completed, cx.rng, cx.sim.m
    c = C[rng.below(len(C))] if C else (P[1] if len(P) > 1 else (P[0] if P else m.start))
    seq = [c] + P
    if len(P) > 2 and C:
        seq.insert(1 + 2 + rng.below(max(len(P) - 2, 1)), C[rng.below(len(C))])
        seq.pop()
    return seq


def _sspc_skip(hal: Hal, cx: PlanContext) -> list[str]:
    """Skip the step due at t_k (and its later occurrences)."""
    P, C, m = cx.remaining, cx.completed, cx.sim.m
    target = P[0] if P else None
    seq = [n for n in P if n != target] if target else []
    hal.missing = [target] if target and m.is_ask(target) else []
    if not P:
        if cx.at_bye:  # nothing left to skip: repeat a completed step instead
            seq = [C[-1]] if C else [m.start]
        else:  # only the closing is left: skip "anything else?" and say goodbye at once
            hal.ask_more = False
    return seq


def _sspc_reverse(hal: Hal, cx: PlanContext) -> list[str]:
    """The remaining steps in reverse order."""
    P, C = cx.remaining, cx.completed
    seq = list(reversed(P))
    if len(P) < 2 or seq[0] == P[0]:  # nothing to reverse: swap the last completed step in
        seq = ([C[-1]] if C else []) + P
    return seq


def _sspc_jump(hal: Hal, cx: PlanContext) -> list[str]:
    """Jump to the outcome, then carry on with the steps it skipped."""
    P, C, m = cx.remaining, cx.completed, cx.sim.m
    outcome = m.outcome
    asks_left = [n for n in P if m.is_ask(n)]
    if outcome and P and P[0] != outcome:
        hal.missing = [n for n in asks_left if n != outcome]
        return [outcome] + [n for n in P if n != outcome]
    seq = [n for n in P[1:] if n != outcome]  # already at the outcome: jump to the end
    if not seq:
        if cx.at_bye:
            seq = [C[-1]] if C else [m.start]
        else:
            hal.ask_more = False
    return seq


def _sspc_chaotic(hal: Hal, cx: PlanContext) -> list[str]:
    """Steps drawn at random from the task's steps, the first differing from the one due."""
    P, C, rng, m = cx.remaining, cx.completed, cx.rng, cx.sim.m
    outcome = m.outcome
    pool = list(dict.fromkeys(P + C + list(m.other_asks) + ([outcome] if outcome else [])))
    pool = [n for n in pool if n in m.phr] or [m.start]
    n_steps = max(1, len(P) + cx.jitter)
    seq = [pool[rng.below(len(pool))] for _ in range(n_steps)]
    if P and seq[0] == P[0] and len(pool) > 1:
        seq[0] = next(n for n in pool if n != P[0])
    return seq


#: How SSPC reorders D+'s steps, per strategy (:data:`SSPC_STRATEGIES`, the variant's ``strategy``;
#: an unknown one plays ``chaotic``).
SSPC_PLANS: dict[str, Callable[[Hal, PlanContext], list[str]]] = {
    "repeat": _sspc_repeat,
    "skip": _sspc_skip,
    "reverse": _sspc_reverse,
    "jump": _sspc_jump,
    "chaotic": _sspc_chaotic,
}


def plan_sspc(hal: Hal, cx: PlanContext) -> Body:
    """D+'s remaining steps corrupted by the variant's strategy (:data:`SSPC_PLANS`).

    Sets ``hal.chaotic`` for the ``chaotic`` strategy; a strategy may set ``hal.missing`` and
    ``hal.ask_more``.

    Args:
        hal: the plan being built; ``hal.variant.template["strategy"]`` picks the strategy (an
            unknown one plays ``chaotic``).
        cx: the planner's context.

    Returns:
        ``("own", node)`` steps; when the strategy leaves none and ``hal.ask_more`` is set or D+
            says goodbye at t_k, the last completed step (or the start node).
    """
    strategy = hal.variant.template.get("strategy")
    seq = SSPC_PLANS.get(strategy, _sspc_chaotic)(hal, cx)
    if not seq and (hal.ask_more or cx.at_bye):
        seq = [cx.completed[-1]] if cx.completed else [cx.sim.m.start]
    hal.chaotic = strategy == "chaotic"
    return [("own", n) for n in seq if n]


def check_variants(items: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """The SSPC variants' template material: each names one of :data:`SSPC_STRATEGIES`, and the
    type holds each strategy exactly once (SPEC section 2).

    Args:
        items: ``(location, template)`` of each SSPC variant, in file order.

    Returns:
        One message per problem (empty when valid).
    """
    errs = [
        f"{loc}: template.strategy must be one of {SSPC_STRATEGIES}, got {tpl.get('strategy')!r}"
        for loc, tpl in items
        if tpl.get("strategy") not in SSPC_STRATEGIES
    ]
    strategies = sorted(tpl.get("strategy", "") for _, tpl in items)
    if strategies != sorted(SSPC_STRATEGIES):
        where = items[0][0].rsplit(": ", 1)[0] if items else "variants"
        errs.append(
            f"{where}: types.SSPC must hold exactly the five strategies {SSPC_STRATEGIES} once each, got {strategies}"
        )
    return errs


PLANNER = Planner(plan_sspc)

TYPE = HallucinationType(
    "SSPC",
    "step selection corruption",
    breaks_task=True,
    planner=PLANNER,
    variant_check=check_variants,
    variants=Path(__file__).with_suffix(".yaml"),
    example_line="Let me ask again: what is your name?",
)

__all__ = ["PLANNER", "SSPC_PLANS", "SSPC_STRATEGIES", "TYPE", "check_variants", "plan_sspc"]
