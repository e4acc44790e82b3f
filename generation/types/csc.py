"""CSC, competing sub-goal (SPEC section 2): from t_k on, the system keeps the task and its goal but
pursues an auxiliary goal alongside, with 1 to 3 lines of the variant. Its entry, its template
planner, its variant check; its variants are ``csc.yaml``."""

from __future__ import annotations

from pathlib import Path

from dialfork_dataset.taxonomy import HallucinationType

from ..backends.template.acts import user_line
from ..backends.template.planners import PlanContext, Planner, with_goal_lines
from ..backends.template.sim import Body, Hal, Sim
from ..seeds import Rng
from ..variants import check_line_templates as check_variants


def _answer_sub_goal(sim: Sim, hal: Hal, rng: Rng) -> str:
    if hal.replies:
        return hal.replies[rng.below(len(hal.replies))]
    return user_line(sim.data, "aux_generic", rng)


def plan_csc(hal: Hal, cx: PlanContext) -> Body:
    """An auxiliary goal pursued alongside (``own_aux``); the user answers with the variant's replies.

    Args:
        hal: the plan being built; its ``line_reply`` is set to the variant's ``user_replies``
            (else the ``aux_generic`` pool).
        cx: the planner's context.

    Returns:
        D+'s remaining steps as ``("own_aux", node)`` with 1 to 3 ``("line", None)`` steps, the
            first one at the start.
    """
    hal.line_reply = _answer_sub_goal
    return with_goal_lines("own_aux", cx)


PLANNER = Planner(plan_csc)

TYPE = HallucinationType(
    "CSC",
    "competing sub-goal",
    planner=PLANNER,
    variant_check=check_variants,
    variants=Path(__file__).with_suffix(".yaml"),
    example_line="Before we go on, please rate this chat from 1 to 5.",
)

__all__ = ["PLANNER", "TYPE", "check_variants", "plan_csc"]
