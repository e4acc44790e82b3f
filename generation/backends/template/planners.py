"""Planning a fork's hallucination: the planner of each hallucination type is named by its entry in
:mod:`dialfork_dataset.taxonomy` (:func:`planner_for`); the built-in types' planners live in their
modules, ``generation/types/<code>.py``.

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

Adding a hallucination type: a module with its :class:`~dialfork_dataset.taxonomy.HallucinationType`
entry naming its :class:`Planner`, and its variants file (see ``docs/extending.md``). Every draw a
planner makes comes from the fork's random stream, in a fixed order, so a fork is reproducible from
its seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...seeds import Rng
from .data import GENERIC_NODES
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


def with_goal_lines(kind: str, cx: PlanContext) -> Body:
    """D+'s remaining steps as ``(kind, node)`` with 1 to 3 ``("line", None)`` steps of the variant,
    the first one at the start: the body of a type that pursues another goal alongside the
    workflow's steps (GR, CSC).

    Args:
        kind: The kind of the workflow's steps (``"own"``, ``"own_alt"``, ``"own_aux"``).
        cx: The planner's context (draws the number and places of the lines from ``cx.rng``).

    Returns:
        The body.
    """
    body: Body = [(kind, n) for n in cx.remaining]
    n_lines = 1 + cx.rng.below(3)
    body.insert(0, ("line", None))
    for _ in range(n_lines - 1):
        body.insert(1 + cx.rng.below(len(body)), ("line", None))
    return body


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
    from dialfork_dataset import taxonomy
    from dialfork_dataset.registry import resolve

    spec = taxonomy.get(htype)
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


__all__ = ["Hal", "PlanContext", "Planner", "build_hal", "planner_for", "with_goal_lines"]
