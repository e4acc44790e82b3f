"""WIC, workflow identity corruption (SPEC section 2): from t_k on, the system follows another
task's workflow. Its entry, its template planner, its variant check; its variants are ``wic.yaml``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dialfork_dataset.taxonomy import HallucinationType

from ..backends.template.planners import PlanContext, Planner
from ..backends.template.sim import Body, Hal, Sim


def plan_wic(hal: Hal, cx: PlanContext) -> Body:
    """The substitute task's steps, starting at one the original task does not have; a bridge line first.

    Sets ``hal.sub`` (a simulator of the substitute task) and ``hal.lines`` (the variant's
    ``bridge``, default one empty line).

    Args:
        hal: the plan being built.
        cx: the planner's context; ``cx.d.substitute`` is the substitute task.

    Returns:
        ``max(1, len(remaining) + jitter)`` ``("sub", node)`` steps along the substitute's happy
            path, cyclically.
    """
    sim, d, m = cx.sim, cx.d, cx.sim.m
    sub_m = cx.backend.model(d.substitute)
    hal.sub = Sim(sub_m, d.scenario, d.seed, sim.data, goal_seed_salt=1)
    own = {(n, m.phr.get(n, ("",))[0]) for n in m.phr}
    trace = [n for n in sub_m.happy_trace if n not in (sub_m.start, sub_m.anything_else, sub_m.bye)] or list(
        sub_m.phr
    )
    start = next((i for i, n in enumerate(trace) if (n, sub_m.phr[n][0]) not in own), 0)
    n_steps = max(1, len(cx.remaining) + cx.jitter)
    hal.lines = tuple(d.fork.variant.template.get("bridge") or [""])
    return [("sub", trace[(start + i) % len(trace)]) for i in range(n_steps)]


def check_variants(items: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """WIC's template material: an optional ``template.bridge``, a non-empty list of lines
    (``""`` for no bridge).

    Args:
        items: ``(location, template)`` of each WIC variant.

    Returns:
        One message per problem (empty when valid).
    """
    errs = []
    for loc, tpl in items:
        br = tpl.get("bridge", [""])
        if not isinstance(br, Sequence) or isinstance(br, str) or not br:
            errs.append(f'{loc}: template.bridge must be a non-empty list (use "" for no bridge)')
    return errs


PLANNER = Planner(plan_wic)

TYPE = HallucinationType(
    "WIC",
    "workflow identity corruption",
    breaks_task=True,
    substitute=True,
    planner=PLANNER,
    variant_check=check_variants,
    variants=Path(__file__).with_suffix(".yaml"),
    cue="Leave the steps on the left and do another task instead: {description}",
    example_line="Would you like to book a table at a restaurant instead?",
)

__all__ = ["PLANNER", "TYPE", "check_variants", "plan_wic"]
