"""GR, goal replacement (SPEC section 2): from t_k on, the system follows the workflow's steps but
pursues another goal, with 1 to 3 lines of the variant. Its entry, its template planner, its
variant check; its variants are ``gr.yaml``."""

from __future__ import annotations

from pathlib import Path

from dialfork_dataset.taxonomy import HallucinationType

from ..backends.template.acts import user_line
from ..backends.template.planners import PlanContext, Planner, with_goal_lines
from ..backends.template.realise import item_and_alternative
from ..backends.template.sim import Body, Hal, Sim
from ..seeds import Rng
from ..variants import check_line_templates as check_variants


def _refuse_replacement(sim: Sim, hal: Hal, rng: Rng) -> str:
    item, _ = item_and_alternative(sim, rng, knows_goal=True)  # the user knows what it wants
    return user_line(sim.data, "refuse", rng, i=item)


def plan_gr(hal: Hal, cx: PlanContext) -> Body:
    """The outcome steered to another value (``own_alt``); the user refuses the replacement.

    Args:
        hal: the plan being built; its ``line_reply`` is set to the user's refusal.
        cx: the planner's context.

    Returns:
        D+'s remaining steps as ``("own_alt", node)`` with 1 to 3 ``("line", None)`` steps, the
            first one at the start.
    """
    hal.line_reply = _refuse_replacement
    # the outcome is steered to the alternative only by a variant whose lines announce it ({alt}:
    # "I'd really recommend {alt}"); the others (a partner service, a premium offer, cancelling) keep
    # the user's values in the workflow's steps: the system says only what the user has said
    steer = any("{alt}" in line for line in hal.lines)
    return with_goal_lines("own_alt" if steer else "own", cx)


PLANNER = Planner(plan_gr)

TYPE = HallucinationType(
    "GR",
    "goal replacement",
    breaks_task=True,
    planner=PLANNER,
    variant_check=check_variants,
    variants=Path(__file__).with_suffix(".yaml"),
    example_line="Have you considered our premium subscription plan?",
)

__all__ = ["PLANNER", "TYPE", "check_variants", "plan_gr"]
