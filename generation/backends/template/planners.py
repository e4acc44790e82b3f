"""Planning a fork's hallucination: one planner per hallucination type, named by its entry in
:mod:`dialfork_dataset.taxonomy` (:func:`planner_for`).

At system turn t_k, :func:`build_hal` reads the conformant dialogue's remaining steps (``remaining``,
from t_k to the closing) and completed steps (``completed``) and hands them to the planner of the
fork's type, which returns the plan's *body*: the steps the system says from t_k on, each a
``(kind, node)`` pair that :mod:`.realise` says:

* ``("own", node)``: a step of the task's own workflow;
* ``("own_alt", node)``: an own step with the goal's identity slot steered to another value (GR);
* ``("own_aux", node)``: an own step while pursuing an auxiliary goal (CSC);
* ``("sub", node)``: a step of the substitute task's workflow (WIC);
* ``("line", None)``: a standalone line of the variant (GR, CSC).

A planner may also set how the user reacts to the variant's lines (``Hal.line_reply``) and whether the
user sometimes protests at the chaos (``Hal.chaotic``).

Adding a hallucination type: a :class:`~dialfork_dataset.taxonomy.HallucinationType` entry naming
its :class:`Planner`, and variants in ``generation/variants.yaml`` (see ``docs/extending.md``). Every draw a planner makes comes from the fork's random stream, in a fixed
order, so a fork is reproducible from its seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...seeds import Rng
from .acts import user_line
from .data import GENERIC_NODES
from .realise import item_and_alternative
from .sim import Body, Hal, Sim


@dataclass
class PlanContext:
    """What a planner reads: the simulator, the fork's dialogue, its random stream, and D+'s steps.

    Attributes:
        sim: the fork's simulator.
        d: the engine's Dialogue of the fork.
        rng: the fork's random stream at t_k.
        backend: the TemplateBackend.
        remaining: D+'s content steps from t_k up to its closing.
        completed: D+'s steps before t_k.
        at_bye: whether D+ says goodbye at t_k.
        jitter: -1, 0 or +1, the allowed deviation of the step count.
    """

    sim: Sim
    d: Any
    """The engine's Dialogue of the fork (``d.fork`` is the injection being planned)."""
    rng: Rng
    backend: Any
    """The TemplateBackend (for the substitute task's model)."""
    remaining: list[str]
    """D+'s content steps from t_k up to its closing."""
    completed: list[str]
    """D+'s steps before t_k (its ask steps, else its content steps)."""
    at_bye: bool
    """D+ says goodbye at t_k (no closing question)."""
    jitter: int
    """-1, 0 or +1: the hallucinated step count is D+'s remaining count up to this."""


@dataclass(frozen=True)
class Planner:
    """How one hallucination type is injected: ``plan`` returns the plan's body (and may set fields of
    the :class:`Hal` it is given).

    Attributes:
        plan: ``plan(hal, cx)`` returns the body, a list of ``(kind, node)`` steps (kinds ``own``,
            ``own_alt``, ``own_aux``, ``sub``, ``line``; see the module doc).
    """

    plan: Callable[[Hal, PlanContext], Body]


# ---- WIC: the substitute task's happy path, from a step the original task does not have


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


# ---- SSPC: D+'s remaining steps in a corrupted order; one strategy per variant


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


#: How SSPC reorders D+'s steps, per strategy (:data:`generation.variants.SSPC_STRATEGIES`, the variant's
#: ``strategy``; an unknown one plays ``chaotic``).
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


# ---- GR, CSC: the workflow's steps with 1-3 standalone turns pursuing the other goal


def _with_goal_lines(kind: str, cx: PlanContext) -> Body:
    body: Body = [(kind, n) for n in cx.remaining]
    n_lines = 1 + cx.rng.below(3)
    body.insert(0, ("line", None))
    for _ in range(n_lines - 1):
        body.insert(1 + cx.rng.below(len(body)), ("line", None))
    return body


def _refuse_replacement(sim: Sim, hal: Hal, rng: Rng) -> str:
    item, _ = item_and_alternative(sim, rng, knows_goal=True)  # the user knows what it wants
    return user_line(sim.data, "refuse", rng, i=item)


def _answer_sub_goal(sim: Sim, hal: Hal, rng: Rng) -> str:
    if hal.replies:
        return hal.replies[rng.below(len(hal.replies))]
    return user_line(sim.data, "aux_generic", rng)


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
    return _with_goal_lines("own_alt" if steer else "own", cx)


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
    return _with_goal_lines("own_aux", cx)


#: The planners of the paper's four types (named by their entries in :mod:`dialfork_dataset.taxonomy`).
WIC_PLANNER = Planner(plan_wic)
SSPC_PLANNER = Planner(plan_sspc)
GR_PLANNER = Planner(plan_gr)
CSC_PLANNER = Planner(plan_csc)


def planner_for(htype: str) -> Planner:
    """The template backend's planner of a hallucination type: its registry entry's ``planner``
    (:class:`dialfork_dataset.taxonomy.HallucinationType`), imported on first use.

    Args:
        htype: A registered type code.

    Returns:
        The :class:`Planner` (a bare ``plan(hal, cx)`` function is wrapped in one).

    Raises:
        KeyError: The type is not registered, or its entry names no planner (the message says
            where to add one).
        ValueError: The entry's ``"module:attr"`` planner cannot be imported.
    """
    from dialfork_dataset.registry import resolve
    from dialfork_dataset.taxonomy import get_type

    spec = get_type(htype)
    if spec.planner is None:
        raise KeyError(
            f"the template backend has no planner for hallucination type {htype!r}: give its "
            "HallucinationType a planner (see docs/extending.md)"
        )
    planner = resolve(spec.planner, f"planner of hallucination type {htype!r}")
    return planner if isinstance(planner, Planner) else Planner(planner)


def build_hal(sim: Sim, d: Any, rng: Rng, backend: Any) -> Hal:
    """The hallucination plan of ``d.fork`` at its system turn t_k, from D+'s trace (``d.reference``).

    Args:
        sim: the fork's simulator.
        d: the engine's Dialogue of the fork; ``d.fork`` is the injection to plan and
            ``d.reference.scratch["sim"].trace`` D+'s node trace.
        rng: the fork's random stream at t_k (draws the step-count jitter, then the planner's).
        backend: the TemplateBackend (the substitute task's model for WIC).

    Returns:
        The plan (:class:`Hal`), its body filled by the type's planner.

    Raises:
        KeyError: the fork's hallucination type has no planner (:func:`planner_for`).
    """
    f = d.fork
    m = sim.m
    planner = planner_for(f.htype)
    hal = Hal(f.htype, f.variant, f)
    ref_trace: list[str] = d.reference.scratch["sim"].trace
    t = f.turn
    end = len(ref_trace)
    for i in range(t - 1, len(ref_trace)):
        if ref_trace[i] in (m.anything_else, m.bye, "bye") or (ref_trace[i] or "").endswith("bye"):
            end = i
            break
    remaining = [n for n in ref_trace[t - 1 : end] if n in m.phr and n not in GENERIC_NODES]
    hal.ask_more = end >= len(ref_trace) or ref_trace[end] == m.anything_else
    at_bye = t - 1 < len(ref_trace) and t - 1 == end and ref_trace[end] != m.anything_else
    completed = [n for n in ref_trace[: t - 1] if m.is_ask(n)] or [
        n for n in ref_trace[: t - 1] if n in m.phr and n not in (m.start, m.bye, *GENERIC_NODES)
    ]
    jitter = (0, 0, 1, -1)[rng.below(4)]
    cx = PlanContext(sim, d, rng, backend, remaining, completed, at_bye, jitter)
    hal.body = planner.plan(hal, cx)
    return hal


__all__ = [
    "CSC_PLANNER",
    "GR_PLANNER",
    "SSPC_PLANNER",
    "SSPC_PLANS",
    "WIC_PLANNER",
    "Hal",
    "PlanContext",
    "Planner",
    "build_hal",
    "planner_for",
    "plan_csc",
    "plan_gr",
    "plan_sspc",
    "plan_wic",
]
