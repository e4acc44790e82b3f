"""Saying a fork's hallucination plan: the system's hallucinated turns and the user's reactions."""

from __future__ import annotations

from typing import Any

from ...prompts import END_TOKEN
from ...seeds import Rng, stable_seed
from .acts import answer_slot, criteria_reply, enter_node, goodbye, invent_free, user_line
from .sim import Sim


def item_and_alternative(sim: Sim, rng: Rng, knows_goal: bool = False) -> tuple[str, str]:
    """What the user wants (its identity slot's value) and a stable alternative to it (GR's ``{alt}``).

    Args:
        sim: the dialogue's simulator (its task's identity slot, given and goal values).
        rng: the turn's random stream (not drawn from: the alternative is a hash of the value).
        knows_goal: the speaker knows the user's goal (the user does; the system, the default,
            knows only the values the user has given: before the user names a city, the system
            says "this", never the city of the user's goal).

    Returns:
        ``(item, alternative)``: the value and another category (or, for an integer slot,
            ``"number N"`` and another number); ``("your request", "a different option")`` when there
            is no identity slot, ``("this", "a different option")`` when its value is not known yet.
    """
    s = sim.m.identity
    if s is None:
        return "your request", "a different option"
    v = sim.given.get(s.name) or (sim.goal.get(s.name) if knows_goal else "") or ""
    if not v:
        return "this", "a different option"
    if s.type == "int":
        if not v.isdigit():
            return "your request", "a different option"
        return f"number {v}", f"number {int(v) + 1 + stable_seed(v, sim.m.name) % 9}"
    if not v:
        return "your request", "a different option"
    others = [c for c in s.categories if c != v] or ["a different option"]
    return v, others[stable_seed(v, sim.m.name) % len(others)]


def variant_line(sim: Sim, template: str, rng: Rng) -> str:
    """A variant's line (GR/CSC ``lines``, WIC ``bridge``) with its fields filled.

    Args:
        sim: the dialogue's simulator.
        template: the line, with optional ``{name}``, ``{item}``, ``{alt}``, ``{service}``,
            ``{domain}`` and ``{other_service}`` fields.
        rng: the turn's random stream.

    Returns:
        The filled line (``name`` defaults to ``"there"``; ``other_service`` is the WIC substitute
            task's service, else the task's own).
    """
    item, alt = item_and_alternative(sim, rng)
    return template.format(
        name=sim.name or "there",
        item=item,
        alt=alt,
        service=sim.m.service,
        domain=sim.m.domain,
        other_service=(sim.hal.sub.m.service if sim.hal and sim.hal.sub else sim.m.service),
    )


def hal_system_turn(sim: Sim, d: Any, rng: Rng, backend: Any) -> str:
    """The system's turn while a fork's plan (``sim.hal``) is in force: the plan's next step, said.

    A ``sub`` step is said by the substitute task's simulator (the first one after the variant's
    bridge line), a ``line`` step is one of the variant's lines, an own step is the node said (with
    the alternative value for ``own_alt``). After the last step comes the closing:
    ``anything_else`` (once, when the plan asks for more and the task has it), then goodbye.

    Args:
        sim: the fork's simulator, with ``sim.hal`` set (:func:`.planners.build_hal`).
        d: the engine's Dialogue of the fork (not read here).
        rng: the turn's random stream.
        backend: the :class:`TemplateBackend` (not read here).

    Returns:
        The utterance; a goodbye ends with :data:`~generation.prompts.END_TOKEN`.
    """
    hal = sim.hal
    m = sim.m
    if hal.pos >= len(hal.body):
        # closing: anything_else, then goodbye after the user's reply
        hal.closing += 1
        if hal.closing == 1 and m.anything_else and hal.ask_more:
            sim.prev = m.anything_else
            sim.trace.append(m.anything_else)
            return sim.realise(m.anything_else, rng)
        sim.trace.append(m.bye or "bye")
        return goodbye(sim, rng) + " " + END_TOKEN
    kind, node = hal.body[hal.pos]
    first = hal.pos == 0
    hal.pos += 1
    if kind == "sub":
        sub = hal.sub
        sub.prev = node
        enter_node(sub, node, rng)
        text = sub.realise(node, rng)
        if first and hal.lines:
            bridge = variant_line(sim, hal.lines[rng.below(len(hal.lines))], rng)
            text = f"{bridge} {text}".strip()
        sim.trace.append(f"{sub.m.name}:{node}")
        return text
    if kind == "line":
        sim.trace.append(f"{hal.htype}:line")
        sim.prev = None
        return variant_line(sim, hal.lines[rng.below(len(hal.lines))], rng)
    sim.prev = node
    sim.trace.append(node)
    enter_node(sim, node, rng)
    return sim.realise(node, rng, alt=(kind == "own_alt"))


def hal_user_turn(sim: Sim, d: Any, rng: Rng) -> str:
    """The user's reaction to the plan step the system has just said.

    To a substitute-task step: an answer, an acknowledgement or confusion (the user restates its
    request); to a variant line: the planner's ``line_reply`` (default: the ``aux_generic`` pool); to
    an own step: a ``missing`` line at the outcome when a required step was skipped, a
    ``repeat_given`` line for a slot already given, an occasional ``chaotic`` protest, else a
    conformant reply.

    Args:
        sim: the fork's simulator, with ``sim.hal`` set and at least one step said.
        d: the engine's Dialogue of the fork (not read here).
        rng: the turn's random stream.

    Returns:
        The user's utterance.
    """
    hal = sim.hal
    m, data = sim.m, sim.data
    kind, node = hal.body[hal.pos - 1]
    if kind == "sub":
        sub = hal.sub
        r = rng.below(20)
        first = hal.pos == 1
        if node in sub.m.ask_slot and r < (8 if first else 12):
            slot = sub.m.ask_slot[node]
            v = (
                sub.goal.get(slot.name, "")
                if slot is not None
                else invent_free(sub.m.ask_readable[node], rng, data)
            )
            return user_line(data, "wic_answer", rng, v=v)
        if not first and r < 15:
            return user_line(data, "ack", rng)
        return user_line(data, "confused", rng, p=m.request)
    if kind == "line":  # the planner says how the user answers its type's lines
        if hal.line_reply is not None:
            return hal.line_reply(sim, hal, rng)
        return user_line(data, "aux_generic", rng)
    # an own-task node (SSPC, GR, CSC)
    prefix = ""
    if node == m.outcome and hal.missing:
        miss = hal.missing.pop(0)
        return user_line(data, "missing", rng, r=m.ask_readable.get(miss, "details"))
    if node in m.is_search_more:
        return prefix + user_line(data, "more_no", rng)
    kids = m.children.get(node) or ()
    if "yes" in kids or "done" in kids or node in m.confirms:
        return prefix + user_line(data, "yes", rng)
    slot = m.ask_slot.get(node)
    if slot is not None and slot.name in sim.given and sim.given[slot.name] != "?":
        v = sim.given[slot.name]
        if slot.type == "long" or slot.free != "generic":
            v = v[:1].lower() + v[1:]
        return prefix + user_line(data, "repeat_given", rng, v=v)
    if hal.chaotic and rng.below(3) == 0:
        return user_line(data, "chaotic", rng)
    if node in m.ask_slot:
        return prefix + answer_slot(sim, node, slot, rng)
    if node == m.start:
        return prefix + user_line(data, "request", rng, p=m.request)
    if "search_criteria" in node or node.endswith("request_optional"):
        return prefix + criteria_reply(sim, rng)
    return prefix + user_line(data, "ack", rng)


__all__ = ["hal_system_turn", "hal_user_turn", "item_and_alternative", "variant_line"]
